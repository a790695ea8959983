//! Desired state: Services and EndpointSlices → what this node's NodePorts should be,
//! with kube-proxy's exact semantics.
//!
//! - [`desired_state`] computes it from API objects (the watch calls this);
//! - [`DesiredBuilder`] does the same one object at a time;
//! - [`read_cluster_state`] streams a bundle's `cluster.json` into it;
//! - [`watch`] keeps it current from the API server (and lists it once for `scan`).

mod build;
mod cluster_file;
mod list_stream;
mod model;
mod probe;
mod slices;
mod topology;
pub mod watch;

pub use build::{DesiredBuilder, desired_state};
pub use cluster_file::{ClusterFileError, ServiceList, read_cluster_state, read_services};
pub use model::*;

#[cfg(test)]
mod tests;
