//! What this crate's unit tests share with the integration tests: the core's nf_tables
//! messages, and the real `promtool`. Compiled for the unit tests alone.
//!
//! Architecture Invariant: from `portdrift_test_support` only what carries none of this
//! crate's own types. That crate links the library's non-test build, a second copy of
//! `agent`, `scan`, `sources` and `cli` whose types are not these; the core's types
//! (`heart`, `decode`) are one copy.

pub use portdrift_core::testing::nf_messages;
pub use portdrift_test_support::promtool;
