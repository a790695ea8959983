//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use portdrift::heart::finding::{Finding, FindingId, Severity};

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

/// Whether a bundle's node is built from its `source/` (and so can be captured again, or
/// built live). IPVS virtual servers cannot be built on a kernel without IPVS (this
/// one): such a bundle's `proc/net/ip_vs` is written in the kernel's format instead.
pub fn built_from_sources(bundle: &Path) -> bool {
    bundle.join("source").is_dir()
        && bundle.join("expected.json").is_file()
        && !bundle.join("proc/net/ip_vs").is_file()
}

/// What decides whether a finding is the right one: its identity and its severity.
pub type FindingKey = (FindingId, Severity);

/// The status of source `name` in a report's `sources` (a scan's JSON, `/findings`).
pub fn source<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["sources"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["source"] == name))
        .unwrap_or_else(|| panic!("no source {name} in {:#}", report["sources"]))
}

/// Findings as a multiset of their keys.
pub fn finding_multiset(findings: &[serde_json::Value]) -> std::collections::BTreeMap<FindingKey, usize> {
    let mut out = std::collections::BTreeMap::new();
    for f in findings {
        let finding: Finding = serde_json::from_value(f.clone())
            .unwrap_or_else(|e| panic!("a finding that does not read back ({e}): {f}"));
        *out.entry((finding.identity(), finding.severity)).or_default() += 1;
    }
    out
}

/// Compares a scan's findings with a bundle's `expected.json`; the difference, if any.
pub fn compare_with_expected(bundle: &Path, report: &serde_json::Value) -> Result<(), String> {
    let text = std::fs::read_to_string(bundle.join("expected.json")).map_err(|e| e.to_string())?;
    let expected: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("bad expected.json: {e}"))?;
    let want = finding_multiset(expected["findings"].as_array().map(Vec::as_slice).unwrap_or(&[]));
    let have = finding_multiset(report["findings"].as_array().map(Vec::as_slice).unwrap_or(&[]));
    if want == have {
        return Ok(());
    }
    let missing: Vec<_> = want.keys().filter(|k| want.get(*k) != have.get(*k)).collect();
    let extra: Vec<_> = have.keys().filter(|k| want.get(*k) != have.get(*k)).collect();
    Err(format!(
        "{}:\n  expected but not (as often) found: {missing:#?}\n  found but not (as often) expected: {extra:#?}",
        bundle.display()
    ))
}

/// Whether tests that need root and the kernel may run; with `CI` set, a missing
/// privilege is a failure, never a skip.
pub fn require_root(test: &str) -> bool {
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !root {
        skip_unless_ci(test, "root");
    }
    root
}

/// Reports a test skipped for want of `need`; with `CI` set, fails it instead.
fn skip_unless_ci(test: &str, need: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} needs {need}, and CI must not skip it"
    );
    eprintln!("skipping {test}: needs {need} (CI has it)");
}

/// Runs an API scenario under a bound, so that a broken client or server fails the test
/// rather than hanging it.
pub async fn scenario(body: impl std::future::Future<Output = ()>) {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    tokio::time::timeout(std::time::Duration::from_secs(60), body)
        .await
        .expect("the scenario finished within 60 s");
}

/// Reads an HTTP request from `stream` up to the blank line that ends its head (the
/// stand-in servers answer GETs, which have no body); None if it ends or fails first.
pub async fn read_request_head(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    Some(request)
}

/// Waits until `condition` holds, or panics after `within`.
pub async fn eventually(what: &str, within: std::time::Duration, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A stand-in for kube-proxy's health endpoint, in Python: the class `Healthz` answers
/// every GET with kube-proxy's `/healthz` body, synced just now. The including script
/// serves it (`HTTPServer((addr, port), Healthz)`).
pub const KUBE_PROXY_HEALTHZ_PY: &str = r#"
import datetime, json
from http.server import BaseHTTPRequestHandler, HTTPServer

class Healthz(BaseHTTPRequestHandler):
    def do_GET(self):
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = json.dumps({"lastUpdated": now, "currentTime": now, "nodeEligible": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass
"#;

pub mod agent_node;
pub mod bpf_lab;

/// Bash helpers for the scenarios run inside a node's namespace: `fail MESSAGE`,
/// `now_ms`, and `wait_for SECONDS CMD...` (runs CMD every 0.1 s until it succeeds;
/// false after SECONDS).
pub const SHELL_HELPERS: &str = r#"
fail() { echo "FAILED: $*" >&2; exit 1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
wait_for() {
  local deadline=$(( $(now_ms) + $1 * 1000 )); shift
  until "$@"; do
    (( $(now_ms) < deadline )) || return 1
    sleep 0.1
  done
}
"#;

pub mod fake_apiserver;
pub mod netns;
pub mod promtool;
pub mod schema;

/// The fake API server (`examples/fake_apiserver`), as a program the namespaces of the
/// live tests can run. `cargo test` builds it; a run of one test target alone needs
/// `cargo build --example fake_apiserver` first.
pub fn fake_apiserver_bin() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_portdrift"))
        .parent()
        .expect("the binary is in a directory")
        .join("examples/fake_apiserver");
    assert!(
        bin.is_file(),
        "{} is built by cargo test (or cargo build --example fake_apiserver)",
        bin.display()
    );
    bin
}

/// Whether `tool` (a command on `PATH`) is installed; with `CI` set, a missing tool is
/// a failure, never a skip.
pub fn require_tool(tool: &str, test: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()));
    if !found {
        skip_unless_ci(test, tool);
    }
    found
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
            env!("CARGO_BIN_EXE_portdrift"),
            cluster.display(),
            out(via)
        ));
    }
}

/// Runs a shell script in a fresh network namespace of its own; panics with what it
/// printed when it fails.
pub fn run_in_fresh_netns(what: &str, shell: &str) {
    let run = Command::new("unshare")
        .args(["-n", "sh", "-c", shell])
        .output()
        .expect("unshare runs");
    assert!(
        run.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    // What the inner test printed, for `--nocapture`.
    eprint!("{}", String::from_utf8_lossy(&run.stderr));
}

/// Every line of a `--log-format json` log, parsed: each must be one flat JSON object
/// (no nested `fields`) with no key twice, which serde_json alone would let pass,
/// keeping the last, as jq and Loki do.
pub fn json_log_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut de = serde_json::Deserializer::from_str(line);
            let value = serde::Deserialize::deserialize(&mut de)
                .map(|Unique(v)| v)
                .unwrap_or_else(|e| panic!("not a JSON log line without repeated keys ({e}): {line}"));
            assert!(
                value.is_object() && value.get("fields").is_none(),
                "not one flat JSON object: {line}"
            );
            value
        })
        .collect()
}

/// A JSON value whose objects repeat no key.
struct Unique(serde_json::Value);

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Unique;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Unique, E> {
                Ok(Unique(v.into()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Unique, E> {
                Ok(Unique(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Unique, E> {
                Ok(Unique(v.into()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Unique, E> {
                Ok(Unique(v.into()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Unique, E> {
                Ok(Unique(v.into()))
            }
            fn visit_unit<E>(self) -> Result<Unique, E> {
                Ok(Unique(serde_json::Value::Null))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
                let mut out = Vec::new();
                while let Some(Unique(v)) = seq.next_element()? {
                    out.push(v);
                }
                Ok(Unique(out.into()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
                let mut out = serde_json::Map::new();
                while let Some((key, Unique(v))) = map.next_entry::<String, Unique>()? {
                    if out.insert(key.clone(), v).is_some() {
                        return Err(serde::de::Error::custom(format!("the key {key:?} twice")));
                    }
                }
                Ok(Unique(out.into()))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// Runs promtool with `args`: whether it passed, and what it said.
pub fn promtool(args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(root())
        .output()
        .expect("promtool runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}
pub mod trace_lab;
