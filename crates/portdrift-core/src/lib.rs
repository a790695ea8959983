//! portdrift's pure core: what a node's NodePorts should be and are, and where they
//! differ. Two of portdrift's six layers (see `ARCHITECTURE.md`): [`decode`] above
//! [`heart`], imports pointing down only.
//!
//! Architecture Invariant: pure. Values in (bytes, readers, API objects, the time),
//! values out: no files, processes, sockets, threads, environment, clock, async runtime
//! or logging. The crate's dependencies cannot do I/O, and `clippy.toml` bans the
//! standard library's ways to; the `portdrift` crate above does the reading.
#![forbid(unsafe_code)]

pub mod decode;
pub mod heart;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
