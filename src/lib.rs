//! portdrift: finds where a Kubernetes node's NodePort plumbing has drifted from what
//! the cluster says.
//!
//! Six layers, imports pointing down only (see `ARCHITECTURE.md`): [`cli`] → [`agent`]
//! → [`scan`] → [`sources`] → [`decode`] → [`heart`]. The heart and decode are pure:
//! they are the `portdrift-core` crate, re-exported here under their names, so
//! `crate::heart::…` reads the same in either crate.
#![forbid(unsafe_code)]

/// The git revision this was built from (build.rs; "unknown" outside a checkout).
pub const REVISION: &str = env!("PORTDRIFT_REVISION");
/// The compiler's version.
pub const RUSTC_VERSION: &str = env!("PORTDRIFT_RUSTC");
/// What `--version` prints after the name.
pub const BUILD_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (revision ",
    env!("PORTDRIFT_REVISION"),
    ", rustc ",
    env!("PORTDRIFT_RUSTC"),
    ")"
);

pub mod agent;
pub mod cli;
pub use portdrift_core::{decode, heart};
pub mod scan;
pub mod sources;
#[cfg(any(test, feature = "test-support"))]
#[allow(clippy::unwrap_used, reason = "test support: a failure there is the test's")]
pub mod testing;
