//! portdrift: finds where a Kubernetes node's NodePort plumbing has drifted from what
//! the cluster says.
//!
//! Six layers, imports pointing down only (see `ARCHITECTURE.md`): [`cli`] → [`agent`]
//! → [`scan`] → [`sources`] → [`decode`] → [`heart`]. The heart and decode are pure.
#![forbid(unsafe_code)]

pub mod agent;
pub mod cli;
pub mod decode;
pub mod heart;
pub mod scan;
pub mod sources;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
