//! What an IPVS node's check could not judge: a table not read whole, and families whose
//! NodePort addresses no virtual server shows (so no nodePort can be missing from them).

use crate::heart::desired::DesiredState;
use crate::heart::ipvs::{IpvsRead, nodeport_addresses};
use crate::heart::model::Family;

use super::DetectConfig;

/// Sentences for the coverage.
pub(super) fn not_judged(
    desired: Option<&DesiredState>,
    read: &IpvsRead,
    config: &DetectConfig,
) -> Vec<String> {
    let mut out = Vec::new();
    if !read.whole || !read.table.unparsed.is_empty() {
        let why = match read.table.unparsed.first() {
            Some(u) => format!(
                "{} line(s) not understood, first line {}: {}",
                read.table.unparsed.len(),
                u.line,
                u.reason
            ),
            None => "it was cut short".to_string(),
        };
        out.push(format!(
            "The IPVS table ({}) was not read whole ({why}): stale virtual and real servers were still reported, but nothing was concluded missing from it",
            read.origin
        ));
    }
    let Some(desired) = desired else {
        return out;
    };
    let addrs = nodeport_addresses(desired, &read.table, &config.nodeport_range);
    for family in [Family::Ipv4, Family::Ipv6] {
        let wanted = desired
            .ports
            .iter()
            .any(|p| p.in_family(family) && p.endpoints(family).is_some_and(|e| e.has_endpoints));
        if wanted && !addrs.iter().any(|a| Family::of(a) == family) {
            out.push(format!(
                "No {family} IPVS virtual server shows which node addresses carry NodePorts (none carries the nodePorts of two Services), so no {family} nodePort could be found missing from {}",
                read.origin
            ));
        }
    }
    out
}
