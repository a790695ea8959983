//! Desired state: Services and EndpointSlices → what this node's NodePorts should be,
//! with kube-proxy's exact semantics.

mod model;

pub use model::*;
