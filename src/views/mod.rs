//! Cluster-wide views: what the API server holds across every node, rather than what
//! one node's plumbing does.
//!
//! - [`claims`]: the nodePorts each Service holds in the API server's allocation
//!   (pure; shared by the table and the lint);
//! - [`ports`]: the NodePort allocation table, collisions and free ports (pure);
//! - [`cluster_services`]: every Service, from a cluster state file or the API server.

pub mod claims;
pub mod cluster_services;
pub mod ports;
