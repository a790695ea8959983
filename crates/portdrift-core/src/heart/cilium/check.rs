//! Cilium's service maps against the cluster: the NodePort frontends each Service should
//! have on this node and the backends behind them (`services`), and the maps' own
//! consistency (`integrity`). Pure; the caller reads the maps.
//!
//! What Cilium writes (its `pkg/loadbalancer/reconciler/bpf_reconciler.go`): a NodePort
//! Service gets the surrogate frontend `0.0.0.0:port` (`::` for IPv6), which the datapath
//! falls back to for any local address, and one frontend per node address Cilium uses
//! for NodePorts. Each frontend's slots `1..=count` hold its active backends, then its
//! terminating and quarantined ones up to `count + qcount`; when none is active the
//! terminating ones are the active ones. Each frontend has its own reverse-NAT ID.

use std::collections::BTreeMap;

use crate::heart::cilium::{CiliumMaps, MapKind};
use crate::heart::desired::DesiredState;
use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::model::Family;

mod integrity;
mod services;

/// The checks' findings, and what they could not judge.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CiliumCheck {
    pub findings: Vec<Finding>,
    /// Sentences for the coverage: each makes the check incomplete.
    pub not_checked: Vec<String>,
}

/// What to tell the operator to do: the maps are Cilium's to fix.
pub(crate) const ADVICE: &str = "inspect the node's Cilium agent (`cilium-dbg bpf lb list`) and restart it if its maps stay wrong; portdrift never writes Cilium's maps";

/// Compares the maps with the desired state (when known) and with themselves.
///
/// `confirm` is a second read of the same maps, taken after the first: a finding is kept
/// only when the second read shows it too, so an entry caught mid-update by one read is
/// not reported (a hash map's walk is no snapshot).
pub fn cilium_findings(
    desired: Option<&DesiredState>,
    maps: &CiliumMaps,
    confirm: Option<&CiliumMaps>,
) -> CiliumCheck {
    let mut check = examine(desired, maps);
    if let Some(second) = confirm {
        let again = examine(desired, second);
        let seen: std::collections::HashSet<_> = again.findings.iter().map(Finding::identity).collect();
        let before = check.findings.len();
        check.findings.retain(|f| seen.contains(&f.identity()));
        let dropped = before - check.findings.len();
        if dropped > 0 {
            check.not_checked.push(format!(
                "{dropped} difference(s) in Cilium's maps were not seen again when the maps were read a second time (the agent was changing them): not reported; the next scan looks again"
            ));
        }
    }
    check
}

fn examine(desired: Option<&DesiredState>, maps: &CiliumMaps) -> CiliumCheck {
    let mut check = CiliumCheck::default();
    for (&family, fm) in &maps.families {
        let origin = |kind: MapKind| {
            maps.read(kind)
                .map(|r| r.origin.clone())
                .unwrap_or_else(|| kind.pin_name().to_string())
        };
        integrity::check_family(family, fm, &origin, &mut check);
        if let Some(desired) = desired {
            services::check_family(desired, family, fm, &origin, &mut check);
        }
    }
    integrity::check_capacity(maps, &mut check.findings);
    not_read(maps, &mut check.not_checked);
    if let Some(desired) = desired {
        families_not_found(desired, maps, &mut check.not_checked);
    }
    check
}

/// A family the cluster's NodePorts use whose services map is not there: its NodePorts
/// were not compared (Cilium without that family would not serve them either, but that
/// is for the check to say, not to assume).
fn families_not_found(desired: &DesiredState, maps: &CiliumMaps, out: &mut Vec<String>) {
    for family in [Family::Ipv4, Family::Ipv6] {
        let ports = desired.ports.iter().filter(|p| p.in_family(family)).count();
        if ports > 0 && !maps.families.contains_key(&family) {
            out.push(format!(
                "Cilium's {family} services map ({}) was not found, though {ports} Service port(s) with a nodePort are {family}: their {family} NodePorts were not compared",
                MapKind::services(family).pin_name()
            ));
        }
    }
}

/// Every map that could not be read whole, in a sentence each.
fn not_read(maps: &CiliumMaps, out: &mut Vec<String>) {
    for (&family, fm) in &maps.families {
        for (kind, complete) in [
            (MapKind::services(family), fm.services_complete),
            (MapKind::backends(family), fm.backends_complete),
            (MapKind::rev_nat(family), fm.rev_nat_complete),
        ] {
            if complete {
                continue;
            }
            let why = match maps.read(kind) {
                None => "it was not found".to_string(),
                Some(r) if r.unreadable_count > 0 => format!(
                    "{} of its {} entries could not be decoded (first: {})",
                    r.unreadable_count,
                    r.entries,
                    r.unreadable.first().map(String::as_str).unwrap_or("?")
                ),
                Some(r) => r
                    .unreadable
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "it could not be read".to_string()),
            };
            out.push(format!(
                "Cilium's {} ({family}) was not read whole ({why}): nothing was concluded missing from it",
                kind.pin_name()
            ));
        }
    }
}

/// A finding about one frontend or map, with the fields every Cilium finding shares.
pub(crate) fn finding(kind: Kind, severity: Severity, family: Family, message: String) -> Finding {
    let mut f = Finding::new(kind, severity, message);
    f.family = Some(family);
    f
}

/// Ports by the Service ports that own them: `(protocol, nodePort)` → indexes into
/// `desired.ports`.
pub(crate) fn owners(desired: &DesiredState) -> BTreeMap<(crate::heart::model::Protocol, u16), Vec<usize>> {
    let mut by_port: BTreeMap<_, Vec<usize>> = BTreeMap::new();
    for (i, p) in desired.ports.iter().enumerate() {
        by_port.entry((p.protocol, p.node_port)).or_default().push(i);
    }
    by_port
}
