//! Helpers shared by the integration tests. The reusable ones are the
//! `portdrift-test-support` crate's, brought in here under the names the tests use; what
//! is left here finds the built binary, which `env!("CARGO_BIN_EXE_portdrift")` names in
//! integration tests alone.
// Each test uses some of these.
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use portdrift_test_support::bundles::{
    FindingKey, built_from_sources, compare_with_expected, finding_multiset, source,
};
pub use portdrift_test_support::json_log::json_log_lines;
pub use portdrift_test_support::requirements::{require_root, require_tool};
pub use portdrift_test_support::scenario::{eventually, read_request_head, scenario};
pub use portdrift_test_support::shell::{KUBE_PROXY_HEALTHZ_PY, SHELL_HELPERS, run_in_fresh_netns};
pub use portdrift_test_support::{bpf_lab, fake_apiserver, netns, promtool, root, schema, trace_lab};

pub mod agent_node;

/// The built `portdrift` binary.
pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_portdrift"))
}

/// Runs the built `portdrift` binary with `args`.
pub fn portdrift(args: &[&str]) -> Output {
    Command::new(bin())
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

/// The fake API server (`examples/fake_apiserver`), as a program the namespaces of the
/// live tests can run. `cargo test` builds it; a run of one test target alone needs
/// `cargo build --example fake_apiserver` first.
pub fn fake_apiserver_bin() -> PathBuf {
    let fake = bin()
        .parent()
        .expect("the binary is in a directory")
        .join("examples/fake_apiserver");
    assert!(
        fake.is_file(),
        "{} is built by cargo test (or cargo build --example fake_apiserver)",
        fake.display()
    );
    fake
}

/// Appends to a shell script a live JSON scan against `cluster` for each way of reading
/// the rules (`--FLAG VIA`), each report written to `out(via)`. Exit 1 (findings) is a
/// fine answer.
pub fn push_scans(
    shell: &mut String,
    cluster: &Path,
    flag: &str,
    vias: &[&str],
    out: impl Fn(&str) -> String,
) {
    for via in vias {
        shell.push_str(&format!(
            " {} scan --format json --kube-proxy-healthz off --node worker-1 \
             --cluster-state {} --{flag} {via} > {} || case $? in 1|3) ;; *) false ;; esac;",
            bin().display(),
            cluster.display(),
            out(via)
        ));
    }
}
