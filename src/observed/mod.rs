//! Observed state: what the node's kernel actually holds.

pub mod iptables;
pub mod sockets;
