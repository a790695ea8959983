//! Frontends, slots and backends written the way `cilium-dbg bpf lb list` prints them
//! (`SERVICE ADDRESS  BACKEND ADDRESS (REVNAT_ID) (SLOT)`), so a finding's evidence reads
//! like what an operator sees when they inspect the node's Cilium agent.

use std::net::{IpAddr, SocketAddr};

use crate::heart::cilium::{Frontend, L4, MapBackend, Scope, SvcFlags};
use crate::heart::model::Protocol;

impl L4 {
    /// The Service protocol, when the byte names one (not `ANY`).
    pub fn protocol(self) -> Option<Protocol> {
        match self {
            L4::Tcp => Some(Protocol::Tcp),
            L4::Udp => Some(Protocol::Udp),
            L4::Sctp => Some(Protocol::Sctp),
            L4::Any | L4::Other(_) => None,
        }
    }

    /// Whether a key of this protocol serves `protocol` (`ANY` serves every one).
    pub fn serves(self, protocol: Protocol) -> bool {
        self == L4::Any || self.protocol() == Some(protocol)
    }

    fn suffix(self) -> String {
        match self {
            L4::Any => "/ANY".to_string(),
            L4::Tcp => "/TCP".to_string(),
            L4::Udp => "/UDP".to_string(),
            L4::Sctp => "/SCTP".to_string(),
            L4::Other(b) => format!("/{b}"),
        }
    }
}

/// `10.0.1.21:30080/TCP`, `[fd00::1]:30080/TCP`.
pub fn address(addr: IpAddr, port: u16, proto: L4) -> String {
    format!("{}{}", SocketAddr::new(addr, port), proto.suffix())
}

/// The frontend as the first column shows it, with its scope when internal.
pub fn frontend_name(f: &Frontend) -> String {
    let scope = match f.scope {
        Scope::External => "",
        Scope::Internal => " (internal scope)",
        Scope::Other(_) => " (unknown scope)",
    };
    format!("{}{scope}", address(f.address, f.port, f.proto))
}

/// The master entry's line: `0.0.0.0:30080/TCP  0.0.0.0:0 (8) (0) [NodePort, non-routable]`.
pub fn master_line(f: &Frontend) -> String {
    let none = SocketAddr::new(unspecified_like(f.address), 0);
    format!(
        "{}  {none} ({}) (0) [{}]",
        frontend_name(f),
        f.rev_nat,
        flag_words(f.flags).join(", ")
    )
}

/// A slot's line: the backend's address, or `backend N not found`.
pub fn slot_line(f: &Frontend, slot: u16, backend_id: u32, backend: Option<&MapBackend>) -> String {
    let target = match backend {
        Some(b) => address(b.address, b.port, b.proto),
        None => format!("backend {backend_id} not found"),
    };
    format!("{}  {target} ({}) ({slot})", frontend_name(f), f.rev_nat)
}

/// A backend as `cilium-dbg bpf lb list --backends` prints it: `12 10.244.1.5:8080/TCP active`.
pub fn backend_line(b: &MapBackend) -> String {
    format!("{} {} {}", b.id, address(b.address, b.port, b.proto), b.state())
}

fn unspecified_like(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    }
}

/// The flags in words, as the CLI lists them.
pub fn flag_words(flags: SvcFlags) -> Vec<&'static str> {
    let mut words = Vec::new();
    let kind = if flags.nodeport() {
        "NodePort"
    } else if flags.loadbalancer() {
        "LoadBalancer"
    } else if flags.external_ip() {
        "ExternalIPs"
    } else if flags.hostport() {
        "HostPort"
    } else if flags.has(SvcFlags::LOCALREDIRECT) {
        "LocalRedirect"
    } else {
        "ClusterIP"
    };
    words.push(kind);
    if flags.ext_local() {
        words.push("Local");
    }
    if flags.int_local() {
        words.push("InternalLocal");
    }
    if flags.two_scopes() {
        words.push("two-scopes");
    }
    if flags.has(SvcFlags::AFFINITY) {
        words.push("sessionAffinity");
    }
    if !flags.routable() {
        words.push("non-routable");
    }
    if flags.has(SvcFlags::FWD_MODE_DSR) {
        words.push("dsr");
    }
    if flags.has(SvcFlags::L7_LOADBALANCER) {
        words.push("l7-load-balancer");
    }
    words
}

impl std::fmt::Display for crate::heart::cilium::BackendState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::heart::cilium::BackendState::*;
        match self {
            Active => f.write_str("active"),
            Terminating => f.write_str("terminating"),
            Quarantined => f.write_str("quarantined"),
            Maintenance => f.write_str("maintenance"),
            Other(b) => write!(f, "state {b}"),
        }
    }
}
