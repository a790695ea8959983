//! IPVS virtual servers as values: what kube-proxy's IPVS mode and kube-router program
//! (one virtual server per node address, protocol and nodePort, its real servers the
//! Service's endpoints), as `decode::ipvs` reads it from `/proc/net/ip_vs` or from
//! `ipvsadm -Ln`, for `check` to compare with the cluster.
//!
//! Each value renders the way `ipvsadm -Ln` prints it, so findings quote what an
//! operator sees on the node.

use std::fmt;
use std::net::SocketAddr;

use crate::heart::model::{Family, Protocol, Unparsed};

mod check;

pub use check::{ipvs_findings, nodeport_addresses};

/// The node's IPVS table as one source gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpvsRead {
    /// The file or command it came from (`/proc/net/ip_vs`, `ipvsadm.txt`).
    pub origin: String,
    pub table: IpvsTable,
    /// The source gave it whole (not cut by an error, a deadline or the size limit).
    pub whole: bool,
}

/// One read of the node's IPVS table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpvsTable {
    /// The virtual servers, in the order read.
    pub services: Vec<VirtualServer>,
    /// Every line that could not be read: with any, the table is not known whole and
    /// nothing may be concluded missing from it (the caller says so).
    pub unparsed: Vec<Unparsed>,
}

/// What a virtual server matches: an address, port and protocol, or a firewall mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VirtualAddr {
    /// `TCP  10.0.1.21:30080`: connections of `protocol` to `addr`.
    Socket { protocol: Protocol, addr: SocketAddr },
    /// `FWM  1`: packets carrying firewall mark `mark` (kube-router's DSR and external
    /// IPs use these). `ipvsadm` says `IPv6` for an IPv6 mark service; the kernel's
    /// `/proc/net/ip_vs` does not tell the family, hence None.
    Fwmark { mark: u32, family: Option<Family> },
}

/// One virtual server and its real servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualServer {
    pub addr: VirtualAddr,
    /// The scheduler's name (`rr`, `wrr`, `lc`, `sh`, `mh`, ...).
    pub scheduler: String,
    /// `persistent N`: session affinity for N seconds (kube-proxy's ClientIP affinity).
    pub persistent: Option<u32>,
    /// What follows the scheduler as printed, spaces collapsed: `persistent 10800`,
    /// `ops`, `(sh-fallback,sh-port)`, the kernel's netmask. Empty when nothing does.
    pub flags: String,
    pub reals: Vec<RealServer>,
    /// 1-based line of the source.
    pub line: u32,
}

/// How IPVS forwards to a real server (`ip_vs_fwd_name` in the kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Forward {
    /// NAT: what kube-proxy and kube-router use for Services.
    Masq,
    /// The real server is on this host.
    Local,
    /// IP-in-IP (or GUE/GRE) tunnelling: kube-router's DSR.
    Tunnel,
    /// Direct routing (gatewaying).
    Route,
}

/// One real server of a virtual server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealServer {
    pub addr: SocketAddr,
    pub forward: Forward,
    /// 0 takes no new connections: kube-proxy's graceful termination keeps a removed
    /// endpoint at weight 0 until its connections drain.
    pub weight: u32,
    pub active: u64,
    pub inactive: u64,
    /// 1-based line of the source.
    pub line: u32,
}

impl VirtualAddr {
    /// The protocol, address and port, for a virtual server that is not a mark service.
    pub fn socket(&self) -> Option<(Protocol, SocketAddr)> {
        match *self {
            VirtualAddr::Socket { protocol, addr } => Some((protocol, addr)),
            VirtualAddr::Fwmark { .. } => None,
        }
    }
}

impl Forward {
    /// Reads the name both the kernel and `ipvsadm` print.
    pub fn parse(word: &str) -> Option<Forward> {
        match word {
            "Masq" => Some(Forward::Masq),
            "Local" => Some(Forward::Local),
            "Tunnel" => Some(Forward::Tunnel),
            "Route" => Some(Forward::Route),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Forward::Masq => "Masq",
            Forward::Local => "Local",
            Forward::Tunnel => "Tunnel",
            Forward::Route => "Route",
        }
    }
}

impl RealServer {
    /// Takes new connections.
    pub fn serving(&self) -> bool {
        self.weight > 0
    }
}

impl fmt::Display for Forward {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `TCP  10.0.1.21:30080`, `SCTP [fd00::1]:30080`, `FWM  1`, `FWM  1 IPv6`: ipvsadm's
/// protocol column is four wide.
impl fmt::Display for VirtualAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VirtualAddr::Socket { protocol, addr } => {
                write!(f, "{:<4} {addr}", protocol.as_str().to_ascii_uppercase())
            }
            VirtualAddr::Fwmark { mark, family } => {
                write!(f, "FWM  {mark}")?;
                if *family == Some(Family::Ipv6) {
                    f.write_str(" IPv6")?;
                }
                Ok(())
            }
        }
    }
}

/// The virtual server's own line: `TCP  10.0.1.21:30080 rr`.
impl fmt::Display for VirtualServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.addr, self.scheduler)?;
        if !self.flags.is_empty() {
            write!(f, " {}", self.flags)?;
        }
        Ok(())
    }
}

/// A real server's line without its indent: `-> 10.244.1.5:8080 Masq 1 0 0`.
impl fmt::Display for RealServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "-> {} {} {} {} {}",
            self.addr, self.forward, self.weight, self.active, self.inactive
        )
    }
}

#[cfg(test)]
mod tests;
