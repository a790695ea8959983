//! The NodePort frontends and backends each Service should have on this node, by
//! Cilium's semantics: the surrogate and one frontend per node NodePort address, active
//! slots holding the endpoints kube-proxy would use (ready ones, or the serving
//! terminating ones when none is ready), the node's own with a Local traffic policy.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use crate::heart::cilium::exposure::{Exposure, exposure};
use crate::heart::cilium::lines::{frontend_name, master_line, slot_line};
use crate::heart::cilium::maps::FamilyMaps;
use crate::heart::cilium::{Frontend, MapKind, Scope};
use crate::heart::citation::Citation;
use crate::heart::desired::{DesiredPort, DesiredState, EndpointSet, FamilyEndpoints};
use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::model::{Family, Protocol};

use super::{ADVICE, CiliumCheck, finding, owners};

pub(super) fn check_family(
    desired: &DesiredState,
    family: Family,
    fm: &FamilyMaps,
    origin: &dyn Fn(MapKind) -> String,
    check: &mut CiliumCheck,
) {
    let services = origin(MapKind::services(family));
    let nodeports: Vec<&Frontend> = fm.frontends.iter().filter(|f| f.flags.nodeport()).collect();
    // Cilium gives every NodePort Service a frontend on each of the same node addresses:
    // an address that carries some Service's NodePort is one every Service should have.
    let node_addrs: BTreeSet<IpAddr> = nodeports
        .iter()
        .filter(|f| !f.address.is_unspecified())
        .map(|f| f.address)
        .collect();
    let mut exposed: BTreeMap<(Protocol, u16), bool> = BTreeMap::new();
    for port in desired.ports.iter().filter(|p| p.in_family(family)) {
        let shown = match exposure(port, desired.node_labels.as_ref()) {
            Exposure::Exposed => true,
            Exposure::NotExposed(_) => false,
            Exposure::Unknown(why) => {
                check.not_checked.push(format!(
                    "Whether Cilium exposes {} (nodePort {}/{}) on this node is not known ({why}): its frontends were not judged",
                    port.service, port.protocol, port.node_port
                ));
                // Neither stale nor missing: treated as owned, and its frontends left alone.
                exposed.insert((port.protocol, port.node_port), true);
                continue;
            }
        };
        *exposed.entry((port.protocol, port.node_port)).or_default() |= shown;
        if !shown {
            continue;
        }
        let frontends: Vec<&Frontend> = nodeports
            .iter()
            .copied()
            .filter(|f| f.port == port.node_port && f.proto.serves(port.protocol))
            .collect();
        if fm.services_complete {
            missing_frontends(
                family,
                port,
                &frontends,
                &node_addrs,
                &services,
                &mut check.findings,
            );
        }
        if !port.uncertain && !desired.uncertain {
            endpoints(family, port, &frontends, fm, &services, check);
        }
    }
    stale_frontends(
        desired,
        family,
        &nodeports,
        &exposed,
        &services,
        &mut check.findings,
    );
}

fn service_finding(
    kind: Kind,
    severity: Severity,
    family: Family,
    port: &DesiredPort,
    message: String,
) -> Finding {
    let mut f = finding(kind, severity, family, message);
    f.protocol = Some(port.protocol);
    f.port = Some(port.node_port);
    f.service = Some(port.service.service());
    f.service_port = Some(port.service.port_name.clone());
    f
}

/// The surrogate and each node NodePort address need a frontend when the Service has
/// endpoints (without any, Cilium's frontend forwards nowhere either way).
fn missing_frontends(
    family: Family,
    port: &DesiredPort,
    frontends: &[&Frontend],
    node_addrs: &BTreeSet<IpAddr>,
    services: &str,
    out: &mut Vec<Finding>,
) {
    if !port.endpoints(family).is_some_and(|e| e.has_endpoints) {
        return;
    }
    let has = |addr: &IpAddr| {
        frontends
            .iter()
            .any(|f| f.address == *addr && f.scope == Scope::External)
    };
    let surrogate = match family {
        Family::Ipv4 => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        Family::Ipv6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    };
    for addr in std::iter::once(&surrogate).chain(node_addrs) {
        if has(addr) {
            continue;
        }
        let what = if addr.is_unspecified() {
            format!(
                "its surrogate frontend {}, which serves the port on every node address",
                SocketAddr::new(*addr, port.node_port)
            )
        } else {
            format!("a frontend on node address {addr}, where this node's other NodePorts are")
        };
        let mut f = service_finding(
            Kind::MissingRule,
            Severity::Critical,
            family,
            port,
            format!(
                "{} has endpoints but Cilium's services map lacks {what}: connections to nodePort {}/{} there are not forwarded; {ADVICE}.",
                port.service, port.protocol, port.node_port
            ),
        );
        f.rule_source = Some(Citation::file(services));
        f.evidence = frontends.iter().map(|f| master_line(f)).collect();
        out.push(f);
    }
}

/// Active slots must hold exactly the endpoints the policy picks; no slot may hold an
/// address no EndpointSlice lists. One finding per endpoint, naming every frontend.
fn endpoints(
    family: Family,
    port: &DesiredPort,
    frontends: &[&Frontend],
    fm: &FamilyMaps,
    services: &str,
    check: &mut CiliumCheck,
) {
    let Some(eps) = port.endpoints(family) else {
        return;
    };
    let mut audit = SlotAudit::default();
    for f in frontends {
        if names_a_backend_twice(f) {
            check.not_checked.push(format!(
                "Cilium's frontend {} named one backend in two slots when read (it was being rewritten): its endpoints were not judged; the next scan looks again",
                frontend_name(f)
            ));
            continue;
        }
        let local = match f.scope {
            Scope::External => port.external_policy_local,
            Scope::Internal => port.internal_policy_local,
            Scope::Other(_) => continue,
        };
        audit.add_frontend(f, local, eps, fm);
    }
    for ((addr, active), lines) in audit.stale {
        let f = stale_endpoint(family, port, services, addr, active, lines);
        check.findings.push(f);
    }
    for (addr, names) in audit.missing {
        let f = missing_endpoint(family, port, services, addr, &names);
        check.findings.push(f);
    }
}

/// Cilium gives each backend of a frontend one slot: one named twice is a frontend
/// caught between two of its slot writes (a walk of a hash map is no snapshot), which a
/// second read can catch the same way. Not judged.
fn names_a_backend_twice(f: &Frontend) -> bool {
    let mut ids: Vec<u32> = f.slots.iter().map(|(_, id)| *id).collect();
    ids.sort_unstable();
    ids.windows(2).any(|w| w[0] == w[1])
}

/// What the slots of one port's frontends hold that they should not, and lack.
#[derive(Default)]
struct SlotAudit {
    /// (target, active) → the slot lines that hold it.
    stale: BTreeMap<(SocketAddr, bool), Vec<String>>,
    /// An endpoint → the frontends that do not hold it in an active slot.
    missing: BTreeMap<SocketAddr, Vec<String>>,
}

impl SlotAudit {
    /// Audits frontend `f`, whose traffic policy is `local` or not.
    fn add_frontend(&mut self, f: &Frontend, local: bool, eps: &FamilyEndpoints, fm: &FamilyMaps) {
        let mut active = BTreeSet::new();
        for &(slot, id) in &f.slots {
            let Some(b) = fm.backends.get(&id) else { continue };
            let addr = SocketAddr::new(b.address, b.port);
            let is_active = slot <= f.count;
            if is_active {
                active.insert(addr);
            }
            if !eps.listed.contains(&addr) {
                self.stale
                    .entry((addr, is_active))
                    .or_default()
                    .push(slot_line(f, slot, id, Some(b)));
            }
        }
        // A slot's backend that was not read may be the endpoint: nothing is missing then.
        if !(fm.backends_complete && fm.services_complete && (local || !eps.cluster_uncertain)) {
            return;
        }
        let expected: &EndpointSet = if local { &eps.local } else { &eps.cluster };
        for addr in expected.iter().filter(|a| !active.contains(a)) {
            self.missing.entry(addr).or_default().push(frontend_name(f));
        }
    }
}

/// An address no EndpointSlice lists, in the slots `lines`: critical when active.
fn stale_endpoint(
    family: Family,
    port: &DesiredPort,
    services: &str,
    addr: SocketAddr,
    active: bool,
    lines: Vec<String>,
) -> Finding {
    let (severity, effect) = if active {
        (Severity::Critical, "new connections are sent to it")
    } else {
        (
            Severity::Warning,
            "it is in a non-active slot, which takes new connections only if no active backend is left",
        )
    };
    let mut f = service_finding(
        Kind::StaleEndpoint,
        severity,
        family,
        port,
        format!(
            "Cilium forwards nodePort {}/{} of {} to {addr}, which no EndpointSlice of the Service lists: {effect}; {ADVICE}.",
            port.protocol, port.node_port, port.service
        ),
    );
    f.target = Some(addr.to_string());
    f.rule = lines.first().cloned();
    f.rule_source = Some(Citation::file(services));
    f.evidence = lines;
    f
}

/// An endpoint the frontends `names` do not hold in an active slot.
fn missing_endpoint(
    family: Family,
    port: &DesiredPort,
    services: &str,
    addr: SocketAddr,
    names: &[String],
) -> Finding {
    let mut f = service_finding(
        Kind::MissingEndpoint,
        Severity::Critical,
        family,
        port,
        format!(
            "{addr} is an endpoint of {} that Cilium's frontends for nodePort {}/{} do not hold in an active slot ({}): it gets none of their new connections; {ADVICE}.",
            port.service,
            port.protocol,
            port.node_port,
            names.join(", ")
        ),
    );
    f.target = Some(addr.to_string());
    f.rule_source = Some(Citation::file(services));
    f
}

/// NodePort frontends for a port no Service owns, or that no owner exposes here.
fn stale_frontends(
    desired: &DesiredState,
    family: Family,
    nodeports: &[&Frontend],
    exposed: &BTreeMap<(Protocol, u16), bool>,
    services: &str,
    out: &mut Vec<Finding>,
) {
    let owners = owners(desired);
    let mut by_port: BTreeMap<(Option<Protocol>, u16), Vec<&Frontend>> = BTreeMap::new();
    for f in nodeports {
        by_port.entry((f.proto.protocol(), f.port)).or_default().push(f);
    }
    for ((protocol, port), frontends) in by_port {
        let protocols: Vec<Protocol> = match protocol {
            Some(p) => vec![p],
            None => vec![Protocol::Tcp, Protocol::Udp, Protocol::Sctp],
        };
        let owned = protocols.iter().any(|p| owners.contains_key(&(*p, port)));
        let allocated = protocols
            .iter()
            .any(|p| desired.other_allocated.contains(&(*p, port)));
        let shown = protocols
            .iter()
            .any(|p| exposed.get(&(*p, port)).copied().unwrap_or(false));
        let (severity, why) = if !owned {
            if allocated || desired.services_partial || desired.uncertain {
                continue;
            }
            (
                if frontends.iter().any(|f| f.count > 0) {
                    Severity::Critical
                } else {
                    Severity::Warning
                },
                "no Service owns that port".to_string(),
            )
        } else if !shown {
            // Owned in another family only, or kept off this node by annotations.
            let in_family = protocols.iter().any(|p| {
                owners.get(&(*p, port)).is_some_and(|ids| {
                    ids.iter()
                        .any(|&i| desired.ports.get(i).is_some_and(|d| d.in_family(family)))
                })
            });
            if !in_family {
                continue;
            }
            (
                Severity::Warning,
                "its Service's Cilium annotations keep it off this node".to_string(),
            )
        } else {
            continue;
        };
        let mut f = finding(
            Kind::StaleNodeport,
            severity,
            family,
            format!(
                "Cilium's services map holds NodePort frontends for port {port} ({}), but {why}: {ADVICE}.",
                frontends
                    .iter()
                    .map(|f| frontend_name(f))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        f.protocol = protocol;
        f.port = Some(port);
        f.rule = frontends.first().map(|f| master_line(f));
        f.rule_source = Some(Citation::file(services));
        f.evidence = frontends.iter().map(|f| master_line(f)).collect();
        out.push(f);
    }
}
