//! portdrift's test support, shared by the `portdrift` crate's integration tests,
//! examples and benches and by the fuzz targets: the fake Kubernetes API server
//! ([`fake_apiserver`], the real list/watch protocol over real HTTP), private network
//! namespaces with real rules and packets ([`netns`], [`trace_lab`], [`bpf_lab`]), the
//! real `promtool` and `check-jsonschema` ([`promtool`], [`schema`]), the fuzz targets
//! ([`fuzzing`]), and the core's synthetic nodes and nf_tables messages ([`synth`],
//! [`nf_messages`]).
//!
//! Nothing here finds the built `portdrift` binary: `env!("CARGO_BIN_EXE_portdrift")`
//! exists in integration tests alone, so what runs the binary takes its path (the
//! tests' `tests/support/mod.rs` gives it).

#![allow(clippy::unwrap_used, reason = "test support: a failure there is the test's")]

use std::path::{Path, PathBuf};

pub use portdrift_core::testing::{nf_messages, synth};

pub mod bpf_lab;
pub mod bundles;
pub mod fake_apiserver;
pub mod files;
pub mod fuzzing;
pub mod json_log;
pub mod netns;
pub mod promtool;
pub mod requirements;
pub mod scenario;
pub mod schema;
pub mod shell;
pub mod trace_lab;

/// The root of the checkout (this crate is `crates/portdrift-test-support` in it).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the crate is two directories below the checkout's root")
        .to_path_buf()
}
