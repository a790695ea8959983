//! port-range-overlap: the NodePort range against the local ports and reserved ranges.

use std::ops::RangeInclusive;

use crate::heart::citation::Citation;
use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::input::Input;
use crate::heart::observed::Observed;

use super::DetectConfig;

/// The node's ephemeral port range (`net.ipv4.ip_local_port_range`, which also governs
/// IPv6) against the NodePort range: any overlap that `ip_local_reserved_ports` does
/// not cover lets an outgoing connection take a NodePort (kubernetes#111682).
pub(super) fn port_range_overlap(observed: &Observed, config: &DetectConfig, out: &mut Vec<Finding>) {
    let Some(sysctls) = &observed.sysctls else { return };
    let Some(local) = &sysctls.local_port_range else {
        return;
    };
    let nodeports = &config.nodeport_range;
    let (from, to) = (
        (*local.start()).max(*nodeports.start()),
        (*local.end()).min(*nodeports.end()),
    );
    if from > to {
        return;
    }
    let open = uncovered(from..=to, &sysctls.reserved_ports);
    if open.is_empty() {
        return;
    }
    let count: u32 = open
        .iter()
        .map(|r| u32::from(*r.end()) - u32::from(*r.start()) + 1)
        .sum();
    let ranges: Vec<String> = open
        .iter()
        .take(5)
        .map(|r| format!("{}-{}", r.start(), r.end()))
        .collect();
    let mut f = Finding::new(
        Kind::PortRangeOverlap,
        Severity::Warning,
        format!(
            "The node's ephemeral port range (net.ipv4.ip_local_port_range {}-{}) overlaps the NodePort range {}-{} on {count} ports that ip_local_reserved_ports does not reserve: an outgoing connection can take a NodePort and break that Service on this node — reserve the range (sysctl net.ipv4.ip_local_reserved_ports={}-{}) or move the ephemeral range.",
            local.start(),
            local.end(),
            nodeports.start(),
            nodeports.end(),
            nodeports.start(),
            nodeports.end()
        ),
    );
    f.rule_source = Some(Citation::file(Input::LocalPortRange.name()));
    f.evidence.push(format!(
        "unreserved: {}{}",
        ranges.join(", "),
        if open.len() > 5 { ", …" } else { "" }
    ));
    out.push(f);
}

/// The parts of `range` that none of `reserved` covers.
pub(super) fn uncovered(
    range: RangeInclusive<u16>,
    reserved: &[RangeInclusive<u16>],
) -> Vec<RangeInclusive<u16>> {
    let mut reserved: Vec<&RangeInclusive<u16>> = reserved.iter().collect();
    reserved.sort_by_key(|r| *r.start());
    let mut out = Vec::new();
    let mut next = u32::from(*range.start());
    let end = u32::from(*range.end());
    for r in reserved {
        let (rs, re) = (u32::from(*r.start()), u32::from(*r.end()));
        if re < next || rs > end {
            continue;
        }
        if rs > next {
            out.push(next as u16..=(rs - 1) as u16);
        }
        next = next.max(re + 1);
    }
    if next <= end {
        out.push(next as u16..=end as u16);
    }
    out
}
