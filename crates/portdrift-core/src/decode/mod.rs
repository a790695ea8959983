//! Pure decoders: rule dumps (iptables-save and `-S` text, nft JSON and text), the
//! kernel's `/proc/net` tables and sysctls, IPVS tables (`/proc/net/ip_vs`, `ipvsadm
//! -Ln`), cluster JSON and manifests, Cilium's service BPF maps, the agents' and
//! Prometheus's answers to the fleet view, into the heart's values. Bytes or readers
//! in, values out.

pub mod cilium;
pub mod cluster;
pub mod explain;
pub mod fleet;
pub mod iptables;
pub mod ipvs;
pub mod lines;
pub mod manifests;
pub(crate) mod name_index;
pub mod netlink;
pub mod nftables;
pub mod node;
pub mod proc_process;
pub mod prometheus;
pub mod ruleset;
pub mod sockets;
