//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the built `portdrift` binary with `args`.
pub fn portdrift(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_portdrift"))
        .args(args)
        .output()
        .expect("the portdrift binary runs")
}

/// `portdrift scan --from DIR --format json`, parsed; with the exit status.
pub fn scan_json(dir: &Path, extra: &[&str]) -> (i32, serde_json::Value) {
    let dir = dir.to_str().expect("utf-8 path");
    let mut args = vec!["scan", "--from", dir, "--format", "json"];
    args.extend_from_slice(extra);
    let out = portdrift(&args);
    let code = out
        .status
        .code()
        .expect("portdrift exited (no signal, no panic abort)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "scan of {dir} printed no JSON ({e}); exit {code}\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, json)
}
