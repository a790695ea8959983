//! Desired state: Services and EndpointSlices → what this node's NodePorts should be,
//! with kube-proxy's exact semantics.
//!
//! - [`desired_state`] computes it from API objects (the watch calls this);
//! - [`DesiredBuilder`] does the same one object at a time;
//! - [`read_cluster_state`](crate::decode::cluster::read_cluster_state) streams a bundle's `cluster.json` into it;
//! - [`watch`](crate::agent::watch) keeps it current from the API server (and lists it once for `scan`).

pub mod build;
pub mod model;
pub mod record;
pub mod slices;
pub mod topology;
pub mod trim;

pub use build::{DesiredBuilder, desired_state};
pub use model::*;

#[cfg(test)]
pub(crate) mod tests;
