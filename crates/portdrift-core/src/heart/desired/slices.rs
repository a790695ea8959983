//! EndpointSlices reduced to what kube-proxy reads from them, and merged per Service
//! port the way kube-proxy's `EndpointSliceCache` (pkg/proxy/endpointslicecache.go)
//! merges them.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::jiff::Timestamp;

use crate::heart::model::{Family, Protocol};

/// The label naming the Service an EndpointSlice belongs to.
pub(crate) const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// The annotation the EndpointSlice controller sets to the time of the change that
/// triggered the slice's last update.
pub(crate) const ANNOTATION_LAST_CHANGE_TRIGGER: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// A zone name, interned: thousands of endpoints share a handful of zones.
pub(crate) type ZoneId = u32;

/// Zone names seen in topology hints, each stored once.
#[derive(Debug, Default, Clone)]
pub struct ZoneTable {
    ids: HashMap<String, ZoneId>,
}

impl ZoneTable {
    fn intern(&mut self, zone: &str) -> ZoneId {
        if let Some(id) = self.ids.get(zone) {
            return *id;
        }
        let id = ZoneId::try_from(self.ids.len()).unwrap_or(ZoneId::MAX);
        self.ids.insert(zone.to_string(), id);
        id
    }

    /// The id of `zone`, if any hint named it.
    pub(crate) fn lookup(&self, zone: &str) -> Option<ZoneId> {
        self.ids.get(zone).copied()
    }
}

/// How an endpoint's node hints (`hints.forNodes`) relate to this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeHint {
    /// No node hints.
    Absent,
    /// Hinted for other nodes only (or this node is unknown).
    Elsewhere,
    /// Hinted for this node.
    ThisNode,
}

/// One endpoint of a slice: its first address and the conditions kube-proxy reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SliceEndpoint<'a> {
    pub ip: IpAddr,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// `nodeName` equals this node.
    pub local: bool,
    pub zone_hints: &'a [ZoneId],
    pub node_hint: NodeHint,
}

/// The endpoints of one slice, kept column by column: a slice's addresses are all of
/// its family, so they are bare IPv4 or IPv6 addresses; an endpoint's conditions take
/// one byte; zone hints take room only in a slice that has some. Five IPv4 endpoints
/// fit in 25 bytes, where a row of fields each took 48.
#[derive(Debug, Clone, Default)]
pub(crate) struct SliceEndpoints {
    ips: SliceIps,
    flags: Box<[u8]>,
    /// Per endpoint its zone hints; empty when no endpoint of the slice has any.
    zone_hints: Box<[Box<[ZoneId]>]>,
}

#[derive(Debug, Clone)]
enum SliceIps {
    V4(Box<[Ipv4Addr]>),
    V6(Box<[Ipv6Addr]>),
}

impl Default for SliceIps {
    fn default() -> Self {
        SliceIps::V4(Box::default())
    }
}

const READY: u8 = 1;
const SERVING: u8 = 1 << 1;
const TERMINATING: u8 = 1 << 2;
const LOCAL: u8 = 1 << 3;
const HINT_ELSEWHERE: u8 = 1 << 4;
const HINT_THIS_NODE: u8 = 1 << 5;

impl SliceEndpoints {
    /// Packs `endpoints`, all of `family` (as [`read_endpoints`] keeps them).
    fn pack(family: Family, endpoints: Vec<SliceEndpointRow>) -> SliceEndpoints {
        let ips = match family {
            Family::Ipv4 => SliceIps::V4(
                endpoints
                    .iter()
                    .filter_map(|e| match e.ip {
                        IpAddr::V4(ip) => Some(ip),
                        IpAddr::V6(_) => None,
                    })
                    .collect(),
            ),
            Family::Ipv6 => SliceIps::V6(
                endpoints
                    .iter()
                    .filter_map(|e| match e.ip {
                        IpAddr::V6(ip) => Some(ip),
                        IpAddr::V4(_) => None,
                    })
                    .collect(),
            ),
        };
        let flags = endpoints.iter().map(|e| e.flags).collect();
        let zone_hints = if endpoints.iter().all(|e| e.zone_hints.is_empty()) {
            Box::default()
        } else {
            endpoints.into_iter().map(|e| e.zone_hints).collect()
        };
        SliceEndpoints {
            ips,
            flags,
            zone_hints,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.flags.len()
    }

    /// Each endpoint, in the slice's order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = SliceEndpoint<'_>> {
        (0..self.len()).map(move |i| self.get(i))
    }

    fn get(&self, i: usize) -> SliceEndpoint<'_> {
        let ip = match &self.ips {
            SliceIps::V4(ips) => IpAddr::V4(ips[i]),
            SliceIps::V6(ips) => IpAddr::V6(ips[i]),
        };
        let flags = self.flags[i];
        SliceEndpoint {
            ip,
            ready: flags & READY != 0,
            serving: flags & SERVING != 0,
            terminating: flags & TERMINATING != 0,
            local: flags & LOCAL != 0,
            zone_hints: self.zone_hints.get(i).map_or(&[], |z| z),
            node_hint: if flags & HINT_THIS_NODE != 0 {
                NodeHint::ThisNode
            } else if flags & HINT_ELSEWHERE != 0 {
                NodeHint::Elsewhere
            } else {
                NodeHint::Absent
            },
        }
    }
}

/// An endpoint as read, before its slice's endpoints are packed.
struct SliceEndpointRow {
    ip: IpAddr,
    flags: u8,
    zone_hints: Box<[ZoneId]>,
}

/// One port of a slice (`nil`/0 ports are dropped when reading).
#[derive(Debug, Clone)]
pub(crate) struct SlicePort {
    pub name: Box<str>,
    pub protocol: Protocol,
    pub port: u16,
}

/// An EndpointSlice of an IP family, reduced to what kube-proxy reads.
#[derive(Debug, Clone)]
pub(crate) struct SliceSummary {
    pub family: Family,
    pub ports: Box<[SlicePort]>,
    pub endpoints: SliceEndpoints,
    /// The newest of the slice's creation time and its last-change-trigger-time.
    pub last_change: Option<Timestamp>,
}

/// What reading one EndpointSlice gave (its names are the record's).
#[derive(Debug, Clone)]
pub(crate) enum SliceRead {
    /// A slice kube-proxy uses, for the Service its label names.
    Use {
        summary: SliceSummary,
        problems: Box<[String]>,
    },
    /// A slice kube-proxy ignores (no Service label, FQDN addresses, opted out by label).
    Ignore,
    /// A slice that cannot be read (its Service label can be).
    Broken { problem: Box<str> },
}

/// Labels with which a Service or EndpointSlice opts out of kube-proxy: its informers
/// select `!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name`.
pub(crate) const OPT_OUT_LABELS: [&str; 2] = [
    "service.kubernetes.io/service-proxy-name",
    "service.kubernetes.io/headless",
];

/// Reduces `slice` to what kube-proxy reads from it.
pub(crate) fn read_slice(slice: &EndpointSlice, node: Option<&str>, zones: &mut ZoneTable) -> SliceRead {
    let labels = slice.metadata.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key));
    if label(LABEL_SERVICE_NAME).is_none_or(|s| s.is_empty()) {
        // kube-proxy cannot tie such a slice to a Service and drops it.
        return SliceRead::Ignore;
    }
    if OPT_OUT_LABELS.iter().any(|key| label(key).is_some()) {
        return SliceRead::Ignore;
    }
    let named = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
    if !named(&slice.metadata.namespace) || !named(&slice.metadata.name) {
        return SliceRead::Broken {
            problem: "has no metadata.name or metadata.namespace".into(),
        };
    }
    let family = match slice.address_type.as_str() {
        "IPv4" => Family::Ipv4,
        "IPv6" => Family::Ipv6,
        "FQDN" => return SliceRead::Ignore,
        "" => {
            return SliceRead::Broken {
                problem: "has no addressType".into(),
            };
        }
        // kube-proxy ignores address types it does not know; so do we.
        _ => return SliceRead::Ignore,
    };
    let mut problems = Vec::new();
    let ports = slice.ports.iter().flatten().filter_map(read_slice_port).collect();
    let endpoints = read_endpoints(&slice.endpoints, family, node, zones, &mut problems);
    SliceRead::Use {
        summary: SliceSummary {
            family,
            ports,
            endpoints,
            last_change: slice_last_change(slice),
        },
        problems: problems.into_boxed_slice(),
    }
}

/// A slice port as kube-proxy keys it. The API server defaults a missing name to ""
/// and a missing protocol to TCP, so kube-proxy never sees them nil; a nil or 0 port
/// is ignored, as kube-proxy ignores it.
fn read_slice_port(port: &EndpointPort) -> Option<SlicePort> {
    let number = port
        .port
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)?;
    let protocol = match port.protocol.as_deref() {
        None => Protocol::Tcp,
        Some(p) => parse_api_protocol(p)?,
    };
    Some(SlicePort {
        name: port.name.as_deref().unwrap_or_default().into(),
        protocol,
        port: number,
    })
}

/// Parses an API protocol (`TCP`, `UDP`, `SCTP`; case-sensitive in the API).
pub(crate) fn parse_api_protocol(protocol: &str) -> Option<Protocol> {
    match protocol {
        "TCP" => Some(Protocol::Tcp),
        "UDP" => Some(Protocol::Udp),
        "SCTP" => Some(Protocol::Sctp),
        _ => None,
    }
}

fn read_endpoints(
    endpoints: &[Endpoint],
    family: Family,
    node: Option<&str>,
    zones: &mut ZoneTable,
    problems: &mut Vec<String>,
) -> SliceEndpoints {
    let mut out = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints {
        // kube-proxy looks at the first address only.
        let Some(address) = endpoint.addresses.first() else {
            continue;
        };
        let Some(ip) = parse_ip_sloppy(address) else {
            problems.push(format!(
                "endpoint address {address:?} is not an IP address; ignored"
            ));
            continue;
        };
        if Family::of(&ip) != family {
            problems.push(format!("endpoint address {address} is not {family}; ignored"));
            continue;
        }
        out.push(read_endpoint(endpoint, ip, node, zones));
    }
    SliceEndpoints::pack(family, out)
}

fn read_endpoint(
    endpoint: &Endpoint,
    ip: IpAddr,
    node: Option<&str>,
    zones: &mut ZoneTable,
) -> SliceEndpointRow {
    let conditions = endpoint.conditions.as_ref();
    let hints = endpoint.hints.as_ref();
    let zone_hints = hints
        .and_then(|h| h.for_zones.as_ref())
        .map(|z| z.iter().map(|zone| zones.intern(&zone.name)).collect())
        .unwrap_or_default();
    let node_hint = match hints.and_then(|h| h.for_nodes.as_ref()).filter(|n| !n.is_empty()) {
        None => 0,
        Some(nodes) if node.is_some_and(|this| nodes.iter().any(|n| n.name == this)) => HINT_THIS_NODE,
        Some(_) => HINT_ELSEWHERE,
    };
    let flag = |set: bool, bit: u8| if set { bit } else { 0 };
    let flags = flag(conditions.and_then(|c| c.ready).unwrap_or(true), READY)
        | flag(conditions.and_then(|c| c.serving).unwrap_or(true), SERVING)
        | flag(
            conditions.and_then(|c| c.terminating).unwrap_or(false),
            TERMINATING,
        )
        | flag(
            node.is_some_and(|this| endpoint.node_name.as_deref() == Some(this)),
            LOCAL,
        )
        | node_hint;
    SliceEndpointRow {
        ip,
        flags,
        zone_hints,
    }
}

/// Parses an IP the way Go's `netutils.ParseIPSloppy` does: IPv4 octets may carry
/// leading zeros (read as decimal), and an IPv4-mapped IPv6 address is IPv4.
pub(crate) fn parse_ip_sloppy(text: &str) -> Option<IpAddr> {
    let ip = match text.parse::<IpAddr>() {
        Ok(ip) => ip,
        Err(_) => IpAddr::V4(parse_ipv4_leading_zeros(text)?),
    };
    Some(match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    })
}

fn parse_ipv4_leading_zeros(text: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = text.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *octet = part.parse().ok()?;
    }
    parts.next().is_none().then_some(Ipv4Addr::from(octets))
}

/// The newest time the API records for an object: its creation, or the last write of
/// any field manager (`managedFields[].time`, which an update of the spec moves on).
pub(crate) fn last_recorded_change(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<Timestamp> {
    let created = meta.creation_timestamp.as_ref().map(|t| t.0);
    let managed = meta
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.time.as_ref().map(|t| t.0))
        .max();
    created.max(managed)
}

fn slice_last_change(slice: &EndpointSlice) -> Option<Timestamp> {
    let created = last_recorded_change(&slice.metadata);
    let triggered = slice
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LAST_CHANGE_TRIGGER))
        .and_then(|t| t.parse::<Timestamp>().ok());
    created.max(triggered)
}

/// One endpoint of one Service port after merging all slices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MergedEndpoint {
    pub addr: SocketAddr,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub local: bool,
    pub zone_hints: Vec<ZoneId>,
    pub node_hint: NodeHint,
}

/// The endpoints of one Service port in one family, merged from all its slices.
#[derive(Debug, Default)]
pub(crate) struct MergedPort {
    /// Sorted by address, one entry per `ip:port`.
    pub endpoints: Vec<MergedEndpoint>,
    /// Addresses listed twice with conditions kube-proxy chooses between arbitrarily.
    pub ambiguous: Vec<SocketAddr>,
}

/// Merges the endpoints of every slice of `family` for the port `port_name`/`protocol`.
/// Duplicates resolve as in kube-proxy (non-terminating wins); where its pick depends
/// on Go's map order and the copies differ, the address is ambiguous.
pub(crate) fn merge_port(
    slices: &[(Box<str>, SliceSummary)],
    family: Family,
    port_name: &str,
    protocol: Protocol,
) -> MergedPort {
    let mut chosen: BTreeMap<SocketAddr, (MergedEndpoint, bool)> = BTreeMap::new();
    let matching_ports = slices
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.family == family)
        .flat_map(|slice| {
            slice
                .ports
                .iter()
                .filter(|p| &*p.name == port_name && p.protocol == protocol)
                .map(move |p| (slice, p.port))
        });
    for (slice, port) in matching_ports {
        for endpoint in slice.endpoints.iter() {
            let candidate = merged_endpoint(&endpoint, port);
            match chosen.get_mut(&candidate.addr) {
                None => {
                    chosen.insert(candidate.addr, (candidate, false));
                }
                Some((current, ambiguous)) => pick_duplicate(current, ambiguous, candidate),
            }
        }
    }
    let mut merged = MergedPort::default();
    for (addr, (endpoint, ambiguous)) in chosen {
        if ambiguous {
            merged.ambiguous.push(addr);
        }
        merged.endpoints.push(endpoint);
    }
    merged
}

fn merged_endpoint(endpoint: &SliceEndpoint<'_>, port: u16) -> MergedEndpoint {
    MergedEndpoint {
        addr: SocketAddr::new(endpoint.ip, port),
        ready: endpoint.ready,
        serving: endpoint.serving,
        terminating: endpoint.terminating,
        local: endpoint.local,
        zone_hints: endpoint.zone_hints.to_vec(),
        node_hint: endpoint.node_hint,
    }
}

/// Applies kube-proxy's duplicate rule to `current` and a second copy `candidate`.
fn pick_duplicate(current: &mut MergedEndpoint, ambiguous: &mut bool, candidate: MergedEndpoint) {
    match (current.terminating, candidate.terminating) {
        // A non-terminating copy always wins over a terminating one.
        (true, false) => {
            *current = candidate;
            *ambiguous = false;
        }
        (false, true) => {}
        // Same class: which copy wins depends on iteration order.
        _ => {
            if *current != candidate {
                *ambiguous = true;
            }
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod last_change_tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, Time};

    use super::*;

    fn at(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn the_last_write_of_any_manager_counts() {
        let meta = ObjectMeta {
            creation_timestamp: Some(at("2025-01-01T00:00:00Z")),
            managed_fields: Some(vec![
                ManagedFieldsEntry {
                    time: Some(at("2025-03-01T00:00:00Z")),
                    ..Default::default()
                },
                ManagedFieldsEntry {
                    time: Some(at("2025-02-01T00:00:00Z")),
                    ..Default::default()
                },
                ManagedFieldsEntry {
                    time: None,
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        assert_eq!(
            last_recorded_change(&meta),
            Some("2025-03-01T00:00:00Z".parse().unwrap())
        );
        let bare = ObjectMeta {
            creation_timestamp: Some(at("2025-01-01T00:00:00Z")),
            ..Default::default()
        };
        assert_eq!(
            last_recorded_change(&bare),
            Some("2025-01-01T00:00:00Z".parse().unwrap())
        );
        assert_eq!(last_recorded_change(&ObjectMeta::default()), None);
    }
}
