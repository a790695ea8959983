//! Cluster-wide views: what the API server holds across every node, rather than what
//! one node's plumbing does.
//!
//! - [`claims`]: the nodePorts each Service holds in the API server's allocation
//!   (pure; shared by the table and the lint);
//! - [`ports`]: the NodePort allocation table, collisions and free ports (pure);
//! - [`cluster_services`]: every Service, from a cluster state file or the API server;
//! - [`manifest`]: the Services a manifest declares, each value with its line (read by
//!   `decode::manifests` from YAML, Lists and JSON);
//! - [`lint`]: the pre-deploy check of manifests (pure);
//! - [`fleet`]: every agent's findings grouped by node (pure), and [`fleet_client`],
//!   which asks the agents through the API server's pod proxy.

pub mod claims;
pub mod fleet;
pub mod lint;
pub mod manifest;
pub mod ports;
