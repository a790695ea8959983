//! Test support: synthetic nodes and the fuzz targets' glue. Compiled for tests and
//! with the `test-support` feature only, never into the release binary.

pub mod files;
pub mod fuzzing;
pub mod nf_messages;
pub mod synth;

#[cfg(test)]
#[path = "../../tests/support/promtool.rs"]
pub mod promtool;
