//! The cluster's objects as JSON: a `List` of Services and EndpointSlices (a bundle's
//! `cluster.json`, or a one-shot list), read as a stream.

pub mod error;
pub mod file;
pub mod list_chunks;
pub mod list_stream;
pub mod probe;

pub use error::ClusterFileError;
pub use file::{ServiceList, read_cluster_state, read_services};

#[cfg(test)]
mod tests;
