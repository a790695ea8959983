//! The IPVS table against the cluster, by what kube-proxy's IPVS proxier
//! (`pkg/proxy/ipvs/proxier.go`) and kube-router program: for every Service port with a
//! nodePort, one virtual server per node NodePort address (`nodeIP:nodePort`, the port's
//! protocol), whose real servers are the endpoints the port's traffic policy picks (the
//! node's own with externalTrafficPolicy Local), each at weight 1. A removed endpoint is
//! kept at weight 0 while its connections drain (graceful termination): not stale.
//!
//! Only what the table shows is judged. A line it could not read may be the virtual or
//! real server that looks missing, so from a table with unparsed lines nothing is
//! concluded missing (what was read is still judged stale); calling the check
//! incomplete is the caller's.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;

use crate::heart::citation::Citation;
use crate::heart::desired::{DesiredPort, DesiredState, EndpointSet};
use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::model::{Family, Protocol};

use super::{IpvsTable, RealServer, VirtualServer};

/// Who fixes the table: portdrift only reports.
const PROGRAMMER: &str = "kube-proxy (IPVS mode) or kube-router on this node";
const AFTER: &str = "check its logs and restart it if this stays; portdrift never edits IPVS";

/// Evidence lines kept per finding; a port on many addresses would otherwise list them all.
const EVIDENCE: usize = 12;

/// The Service ports that own each `(protocol, nodePort, family)`: indexes into
/// `desired.ports`.
type Owners = BTreeMap<(Protocol, u16, Family), Vec<usize>>;

/// NodePort virtual servers by `(protocol, nodePort, family)`.
type NodePorts<'t> = BTreeMap<(Protocol, u16, Family), Vec<&'t VirtualServer>>;

/// The findings of `table` (read from `origin`) against `desired`. A virtual server is a
/// NodePort one when its port is in `nodeport_range` and its address is one of the
/// node's NodePort addresses ([`nodeport_addresses`]).
pub fn ipvs_findings(
    desired: &DesiredState,
    table: &IpvsTable,
    origin: &str,
    nodeport_range: RangeInclusive<u16>,
) -> Vec<Finding> {
    let owners = owners(desired);
    let addrs = node_addresses(desired, table, &nodeport_range, &owners);
    let mut nodeports = NodePorts::new();
    for vs in &table.services {
        let Some((protocol, addr)) = vs.addr.socket() else {
            // Mark services (kube-router's DSR, external IPs) carry no nodePort.
            continue;
        };
        if nodeport_range.contains(&addr.port()) && addrs.contains(&addr.ip()) {
            let key = (protocol, addr.port(), Family::of(&addr.ip()));
            nodeports.entry(key).or_default().push(vs);
        }
    }
    let mut out = Vec::new();
    missing_rules(desired, table, &addrs, &nodeports, origin, &mut out);
    for (&(protocol, port, family), servers) in &nodeports {
        match owners.get(&(protocol, port, family)).map(Vec::as_slice) {
            None | Some([]) => stale_nodeport(desired, (protocol, port, family), servers, origin, &mut out),
            Some([owner]) => {
                if let Some(p) = desired.ports.get(*owner) {
                    let whole = table.unparsed.is_empty();
                    endpoints(desired, p, family, servers, whole, origin, &mut out);
                }
            }
            // Two Services claim the port (a nodeport-collision, reported as such): whose
            // endpoints its real servers should be is not known.
            Some(_) => {}
        }
    }
    out
}

/// The node's NodePort addresses: those carrying virtual servers for the cluster's
/// nodePorts. kube-proxy programs every nodePort on the same set of addresses (its
/// `--nodeport-addresses`, by default every local address), kube-router on the node's
/// address (or all of them), so an address carrying one Service's nodePort should carry
/// every Service's.
///
/// But a Service's ClusterIP or external IP carries that Service's ports, and a port
/// often equals its nodePort (`port: 30080, nodePort: 30080`): such an address would pass
/// for a node address and be found lacking every other nodePort. So an address counts
/// only when the nodePorts it carries are not all one Service's: they belong to two
/// Services or more, or they are every nodePort of its family.
pub fn nodeport_addresses(
    desired: &DesiredState,
    table: &IpvsTable,
    nodeport_range: &RangeInclusive<u16>,
) -> BTreeSet<IpAddr> {
    node_addresses(desired, table, nodeport_range, &owners(desired))
}

fn node_addresses(
    desired: &DesiredState,
    table: &IpvsTable,
    range: &RangeInclusive<u16>,
    owners: &Owners,
) -> BTreeSet<IpAddr> {
    // Per address: the owned nodePorts it carries, and the Services owning them.
    type Carried<'d> = (BTreeSet<(Protocol, u16)>, BTreeSet<(&'d str, &'d str)>);
    let mut carried: BTreeMap<IpAddr, Carried<'_>> = BTreeMap::new();
    for vs in &table.services {
        let Some((protocol, addr)) = vs.addr.socket() else {
            continue;
        };
        let port = addr.port();
        if !range.contains(&port) {
            continue;
        }
        let Some(ids) = owners.get(&(protocol, port, Family::of(&addr.ip()))) else {
            continue;
        };
        let (ports, services) = carried.entry(addr.ip()).or_default();
        ports.insert((protocol, port));
        for p in ids.iter().filter_map(|&i| desired.ports.get(i)) {
            services.insert((&p.service.namespace, &p.service.name));
        }
    }
    let mut every: BTreeMap<Family, BTreeSet<(Protocol, u16)>> = BTreeMap::new();
    for &(protocol, port, family) in owners.keys() {
        if range.contains(&port) {
            every.entry(family).or_default().insert((protocol, port));
        }
    }
    carried
        .into_iter()
        .filter(|(ip, (ports, services))| services.len() >= 2 || every.get(&Family::of(ip)) == Some(ports))
        .map(|(ip, _)| ip)
        .collect()
}

fn owners(desired: &DesiredState) -> Owners {
    let mut by = Owners::new();
    for (i, p) in desired.ports.iter().enumerate() {
        for &family in &p.families {
            let ids = by.entry((p.protocol, p.node_port, family)).or_default();
            if !ids.contains(&i) {
                ids.push(i);
            }
        }
    }
    by
}

/// A port with endpoints needs a virtual server on each NodePort address of each of
/// its families (without endpoints one forwards nowhere either way).
fn missing_rules(
    desired: &DesiredState,
    table: &IpvsTable,
    addrs: &BTreeSet<IpAddr>,
    nodeports: &NodePorts<'_>,
    origin: &str,
    out: &mut Vec<Finding>,
) {
    if desired.uncertain || !table.unparsed.is_empty() {
        return;
    }
    // Looked up whatever the range: a nodePort outside the range given is still found.
    let present: BTreeSet<(Protocol, SocketAddr)> =
        table.services.iter().filter_map(|vs| vs.addr.socket()).collect();
    for p in desired.ports.iter().filter(|p| !p.uncertain) {
        let families: BTreeSet<Family> = p.families.iter().copied().collect();
        for family in families {
            if !p.endpoints(family).is_some_and(|e| e.has_endpoints) {
                continue;
            }
            for &ip in addrs.iter().filter(|ip| Family::of(ip) == family) {
                let addr = SocketAddr::new(ip, p.node_port);
                if present.contains(&(p.protocol, addr)) {
                    continue;
                }
                let mut f = port_finding(
                    Kind::MissingRule,
                    Severity::Critical,
                    family,
                    p,
                    format!(
                        "{} has endpoints, but IPVS has no virtual server for nodePort {}/{} on {ip}, one of this node's NodePort addresses: connections to {addr} do not reach the Service; {PROGRAMMER} should have added it: {AFTER}.",
                        p.service.service(),
                        p.protocol,
                        p.node_port,
                    ),
                );
                let others = nodeports
                    .get(&(p.protocol, p.node_port, family))
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                let lines = others.iter().map(|vs| {
                    format!(
                        "present on another address: {vs} ({})",
                        Citation::line(origin, vs.line)
                    )
                });
                f.evidence = capped(lines);
                f.evidence.push(format!(
                    "this node's {family} NodePort addresses (those carrying the cluster's nodePorts): {}",
                    join(addrs.iter().filter(|a| Family::of(a) == family))
                ));
                out.push(f);
            }
        }
    }
}

/// NodePort virtual servers for a port no Service owns in their family.
fn stale_nodeport(
    desired: &DesiredState,
    (protocol, port, family): (Protocol, u16, Family),
    servers: &[&VirtualServer],
    origin: &str,
    out: &mut Vec<Finding>,
) {
    // A port held by a Service the cluster state cannot show (one kube-proxy skips, an
    // unreadable object, a filtered list) may well be owned: not judged.
    if desired.services_partial || desired.uncertain || desired.other_allocated.contains(&(protocol, port)) {
        return;
    }
    let serving: usize = servers
        .iter()
        .map(|vs| vs.reals.iter().filter(|r| r.serving()).count())
        .sum();
    // Forwarding to old endpoints takes whatever reaches the port somewhere wrong; with no
    // real server taking connections the port is dead either way.
    let (severity, effect) = if serving > 0 {
        (
            Severity::Critical,
            format!("sending new connections to {serving} real server(s)"),
        )
    } else {
        (
            Severity::Warning,
            "with no real server taking new connections".to_string(),
        )
    };
    let on = join(
        servers
            .iter()
            .filter_map(|vs| vs.addr.socket())
            .map(|(_, a)| a.ip()),
    );
    let mut f = Finding::new(
        Kind::StaleNodeport,
        severity,
        format!(
            "No Service owns {protocol}/{port} in {family}, but IPVS still has NodePort virtual servers for it on {on}, {effect}; {PROGRAMMER} should have removed them: {AFTER}."
        ),
    );
    f.protocol = Some(protocol);
    f.port = Some(port);
    f.family = Some(family);
    if let Some(first) = servers.first() {
        f.rule = Some(first.to_string());
        f.rule_source = Some(Citation::line(origin, first.line));
    }
    f.evidence = capped(servers.iter().flat_map(|vs| {
        std::iter::once(format!("{vs} ({})", Citation::line(origin, vs.line))).chain(
            vs.reals
                .iter()
                .map(move |r| format!("{vs} {r} ({})", Citation::line(origin, r.line))),
        )
    }));
    out.push(f);
}

/// Real servers no EndpointSlice lists (stale) and, from a `whole` table, endpoints no
/// real server serves (missing): one finding per address, naming every virtual server.
fn endpoints(
    desired: &DesiredState,
    p: &DesiredPort,
    family: Family,
    servers: &[&VirtualServer],
    whole: bool,
    origin: &str,
    out: &mut Vec<Finding>,
) {
    if desired.uncertain || p.uncertain {
        return;
    }
    let Some(eps) = p.endpoints(family) else {
        return;
    };
    let mut stale: BTreeMap<SocketAddr, Vec<(&VirtualServer, &RealServer)>> = BTreeMap::new();
    for &vs in servers {
        // Weight 0 is graceful termination draining a removed endpoint, listed or not.
        for r in vs
            .reals
            .iter()
            .filter(|r| r.serving() && !eps.listed.contains(&r.addr))
        {
            stale.entry(r.addr).or_default().push((vs, r));
        }
    }
    for (target, held) in stale {
        out.push(stale_endpoint(p, family, target, &held, origin));
    }
    // The policy's set: the node's own endpoints with externalTrafficPolicy Local,
    // else the Cluster set, unless that could not be computed exactly.
    let expected: &EndpointSet = if !whole {
        return;
    } else if p.external_policy_local {
        &eps.local
    } else if eps.cluster_uncertain {
        return;
    } else {
        &eps.cluster
    };
    let mut missing: BTreeMap<SocketAddr, Vec<(&VirtualServer, Option<&RealServer>)>> = BTreeMap::new();
    for &vs in servers {
        for addr in expected {
            if !vs.reals.iter().any(|r| r.addr == addr && r.serving()) {
                let drained = vs.reals.iter().find(|r| r.addr == addr);
                missing.entry(addr).or_default().push((vs, drained));
            }
        }
    }
    for (target, lacking) in missing {
        out.push(missing_endpoint(p, family, target, &lacking, origin));
    }
}

fn stale_endpoint(
    p: &DesiredPort,
    family: Family,
    target: SocketAddr,
    held: &[(&VirtualServer, &RealServer)],
    origin: &str,
) -> Finding {
    let weights: BTreeSet<u32> = held.iter().map(|(_, r)| r.weight).collect();
    let on = join(
        held.iter()
            .filter_map(|(vs, _)| vs.addr.socket())
            .map(|(_, a)| a.ip()),
    );
    let mut f = port_finding(
        Kind::StaleEndpoint,
        Severity::Critical,
        family,
        p,
        format!(
            "IPVS still sends new connections for {}'s nodePort {}/{} on {on} to {target} (weight {}), which no EndpointSlice of the Service lists (a deleted pod): they reach nothing or whatever now has that address; {PROGRAMMER} should have removed that real server (one it drains is kept at weight 0, never above): {AFTER}.",
            p.service.service(),
            p.protocol,
            p.node_port,
            join(weights.iter()),
        ),
    );
    f.target = Some(target.to_string());
    if let Some((vs, r)) = held.first() {
        f.rule = Some(format!("{vs} {r}"));
        f.rule_source = Some(Citation::line(origin, r.line));
    }
    f.evidence = capped(
        held.iter()
            .map(|(vs, r)| format!("{vs} {r} ({})", Citation::line(origin, r.line))),
    );
    f
}

fn missing_endpoint(
    p: &DesiredPort,
    family: Family,
    target: SocketAddr,
    lacking: &[(&VirtualServer, Option<&RealServer>)],
    origin: &str,
) -> Finding {
    let on = join(lacking.iter().filter_map(|(vs, drained)| {
        let (_, addr) = vs.addr.socket()?;
        Some(match drained {
            Some(_) => format!("{} (at weight 0)", addr.ip()),
            None => addr.ip().to_string(),
        })
    }));
    let whose = if p.external_policy_local {
        " on this node (externalTrafficPolicy Local)"
    } else {
        ""
    };
    let mut f = port_finding(
        Kind::MissingEndpoint,
        Severity::Critical,
        family,
        p,
        format!(
            "{target} is an endpoint of {}{whose} that its nodePort should reach, but IPVS's virtual servers for nodePort {}/{} on {on} send it no new connections; {PROGRAMMER} should have added it as a real server: {AFTER}.",
            p.service.service(),
            p.protocol,
            p.node_port,
        ),
    );
    f.target = Some(target.to_string());
    if let Some((vs, drained)) = lacking.first() {
        match drained {
            Some(r) => {
                f.rule = Some(format!("{vs} {r}"));
                f.rule_source = Some(Citation::line(origin, r.line));
            }
            None => {
                f.rule = Some(vs.to_string());
                f.rule_source = Some(Citation::line(origin, vs.line));
            }
        }
    }
    f.evidence = capped(lacking.iter().map(|(vs, drained)| match drained {
        Some(r) => format!("{vs} {r} ({}): weight 0", Citation::line(origin, r.line)),
        None => format!(
            "{vs} ({}): no real server {target} among its {}",
            Citation::line(origin, vs.line),
            vs.reals.len()
        ),
    }));
    f
}

/// A finding about one Service port's nodePort.
fn port_finding(kind: Kind, severity: Severity, family: Family, p: &DesiredPort, message: String) -> Finding {
    let mut f = Finding::new(kind, severity, message);
    f.protocol = Some(p.protocol);
    f.port = Some(p.node_port);
    f.family = Some(family);
    f.service = Some(p.service.service());
    f.service_port = Some(p.service.port_name.clone());
    f
}

fn join<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The first [`EVIDENCE`] lines, and how many more there were.
fn capped(lines: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut kept: Vec<String> = Vec::new();
    let mut more = 0usize;
    for line in lines {
        if kept.len() < EVIDENCE {
            kept.push(line);
        } else {
            more += 1;
        }
    }
    if more > 0 {
        kept.push(format!("… and {more} more"));
    }
    kept
}
