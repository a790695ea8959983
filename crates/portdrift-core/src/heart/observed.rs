//! Observed state: what the node's kernel actually holds.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::time::Duration;

use serde::Serialize;

use crate::heart::model::{Listener, ProcessInfo, ProxyMode, RuleDump};

/// Everything read from one node.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// One per netfilter dump read (backend × family).
    pub dumps: Vec<RuleDump>,
    /// Listening TCP and bound UDP sockets.
    pub listeners: Vec<Listener>,
    /// Socket inode → owning process, where it could be found.
    pub owners: HashMap<u64, ProcessInfo>,
    /// The kernel's local port sysctls, when either file was read.
    pub sysctls: Option<NodeSysctls>,
    /// What kube-proxy's `/healthz` said, when it answered.
    pub kube_proxy_health: Option<KubeProxyHealth>,
    /// The mode kube-proxy's `/proxyMode` named, when it answered with one this reads
    /// (`decode::node::parse_proxy_mode`).
    pub kube_proxy_mode: Option<ProxyMode>,
    /// Which of kube-proxy's endpoints answered when asked.
    pub kube_proxy_answered: KubeProxyAnswered,
    /// IPVS mode's traces outside netfilter, when `/proc/net/dev` or `/proc/net/ip_vs`
    /// was read.
    pub ipvs: Option<IpvsTraces>,
    /// The IPVS virtual servers in full, when `/proc/net/ip_vs` (or a bundle's
    /// `ipvsadm.txt`) was read.
    pub ipvs_table: Option<crate::heart::ipvs::IpvsRead>,
    /// Cilium's service maps, when the node has them.
    pub cilium: Option<crate::heart::cilium::CiliumMaps>,
    /// A second read of the same maps, taken after the first (the live node): a
    /// difference only one read shows is not reported.
    pub cilium_confirm: Option<crate::heart::cilium::CiliumMaps>,
}

/// Whether each of kube-proxy's endpoints gave an HTTP answer, of any status, when it
/// was asked (in a bundle: whether its file was read); None where it was not asked. A
/// kube-proxy that is down, or bound elsewhere, answers neither: the agent exports that
/// as such rather than as a missing health series.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KubeProxyAnswered {
    /// `/healthz` (`--kube-proxy-healthz`).
    pub healthz: Option<bool>,
    /// `/proxyMode` on its metrics server (`--kube-proxy-metrics`).
    pub proxy_mode: Option<bool>,
}

/// The kernel's ephemeral-port settings (`net.ipv4.ip_local_port_range`,
/// `net.ipv4.ip_local_reserved_ports`), for the check that the NodePort range does not
/// overlap the ports the kernel hands out to outgoing connections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSysctls {
    /// `ip_local_port_range`: the ephemeral ports. None when it was not read or could
    /// not be understood.
    pub local_port_range: Option<RangeInclusive<u16>>,
    /// `ip_local_reserved_ports`: ports the kernel never hands out as ephemeral ones.
    /// Empty when none are reserved or the file was not read.
    pub reserved_ports: Vec<RangeInclusive<u16>>,
}

/// kube-proxy's IPVS mode outside netfilter: the dummy interface it binds Service
/// addresses to, and the kernel's IPVS virtual servers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpvsTraces {
    /// `kube-ipvs0` is among the interfaces (`/proc/net/dev`).
    pub interface: bool,
    /// Virtual servers in `/proc/net/ip_vs`; None when that file was not read (the
    /// `ip_vs` module not loaded, or a bundle without it).
    pub virtual_servers: Option<usize>,
}

impl IpvsTraces {
    /// What they show, for the mode's evidence; empty when they show no IPVS.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.interface {
            out.push("interface kube-ipvs0".to_string());
        }
        if let Some(n) = self.virtual_servers.filter(|&n| n > 0) {
            out.push(format!("{n} IPVS virtual servers"));
        }
        out
    }
}

/// What kube-proxy's `/healthz` said (`{"lastUpdated": ..., "currentTime": ...,
/// "nodeEligible": ...}`). Every field is optional: older and newer kube-proxies print
/// different sets, and a garbled body must not end the scan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KubeProxyHealth {
    /// kube-proxy answered 200; it answers 503 when it has not synced in time.
    pub healthy: bool,
    /// When kube-proxy last synced its rules, as it printed it (RFC 3339).
    pub last_updated: Option<String>,
    /// kube-proxy's clock when it answered.
    pub current_time: Option<String>,
    /// `currentTime - lastUpdated`, when both parse.
    pub since_last_update: Option<Duration>,
    /// Whether the node is eligible for load-balancer traffic (false while it is being
    /// deleted or tainted out).
    pub node_eligible: Option<bool>,
}

impl KubeProxyHealth {
    /// One line per fact, for the source's notes.
    pub fn describe(&self) -> Vec<String> {
        let mut notes = Vec::new();
        match (&self.last_updated, self.since_last_update) {
            (Some(l), Some(age)) => notes.push(format!(
                "last synced {l}, {} before its current time",
                friendly(Duration::from_secs(age.as_secs()))
            )),
            (Some(l), None) => notes.push(format!("last synced {l}")),
            (None, _) => notes.push("the answer does not say when kube-proxy last synced".into()),
        }
        if let Some(e) = self.node_eligible {
            notes.push(format!("nodeEligible {e}"));
        }
        notes
    }
}

/// `2m 5s`, for messages.
pub fn friendly(d: Duration) -> String {
    match jiff::SignedDuration::try_from(d) {
        Ok(d) => format!("{d:#}"),
        Err(_) => format!("{d:?}"),
    }
}
