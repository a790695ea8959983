//! Observed state: what the node's kernel actually holds.

pub mod iptables;
pub mod lines;
pub mod live;
pub mod nfnetlink;
pub mod nftables;
pub mod node;
pub mod owners;
pub mod rule_changes;
pub mod sockets;

use std::collections::HashMap;

use crate::model::{Listener, ProcessInfo, RuleSource};

pub use node::{IpvsTraces, KubeProxyHealth, NodeSysctls};

/// Everything read from one node.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// One entry per netfilter dump read (backend × family).
    pub sources: Vec<RuleSource>,
    /// Listening TCP and bound UDP sockets.
    pub listeners: Vec<Listener>,
    /// Socket inode → owning process, where it could be found.
    pub owners: HashMap<u64, ProcessInfo>,
    /// The kernel's local port sysctls, when either file was read.
    pub sysctls: Option<NodeSysctls>,
    /// What kube-proxy's `/healthz` said, when it answered.
    pub kube_proxy_health: Option<KubeProxyHealth>,
    /// The mode kube-proxy's `/proxyMode` named (`iptables`, `ipvs`, `nftables`), when
    /// it answered.
    pub kube_proxy_mode: Option<String>,
    /// IPVS mode's traces outside netfilter, when `/proc/net/dev` or `/proc/net/ip_vs`
    /// was read.
    pub ipvs: Option<IpvsTraces>,
}
