//! Cluster-wide views: what the API server holds across every node, rather than what
//! one node's plumbing does.
//!
//! - [`claims`]: the nodePorts each Service holds (shared by the table and the lint);
//! - [`ports`]: the NodePort allocation table, collisions and free ports;
//! - [`cluster_services`](crate::scan::cluster_services): every Service, from a file
//!   or the API server;
//! - [`manifest`]: the Services a manifest declares, each value with its line;
//! - [`lint`]: the pre-deploy check of manifests;
//! - [`fleet`]: the nodes by their `NodePortDrift` condition and the asked agents'
//!   findings grouped by node, read by [`fleet_client`](crate::sources::fleet_client)
//!   (one Node list, then the pod proxy), or from Prometheus by
//!   [`fleet_prometheus`](crate::sources::fleet_prometheus).

pub mod claims;
pub mod fleet;
pub mod lint;
pub mod manifest;
pub mod ports;
