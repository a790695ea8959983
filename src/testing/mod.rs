//! Test support: synthetic nodes and the fuzz targets' glue. Compiled for tests and
//! with the `test-support` feature only, never into the release binary.

pub mod files;
pub mod fuzzing;
pub use portdrift_core::testing::{nf_messages, synth};

#[cfg(test)]
#[path = "../../tests/support/promtool.rs"]
pub mod promtool;
