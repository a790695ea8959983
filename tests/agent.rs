//! `portdrift run`, end to end: inside a bundle's node (real rules in a private network
//! namespace, by `scripts/capture-testdata.sh --exec`) with the bundle's cluster state
//! served by the fake API server, the agent becomes ready, `/findings` holds the
//! bundle's expected findings, `/metrics` passes promtool and counts them, and SIGTERM
//! stops it cleanly within 5 s.
//!
//! Needs root (CI runs as root and must not skip it), and curl inside the namespace.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tempfile::TempDir;

const PORTDRIFT: &str = env!("CARGO_BIN_EXE_portdrift");

/// Inside the namespace: the fake API server, then the agent; poll /readyz, fetch the
/// endpoints into files, SIGTERM the agent and time its exit.
const SCRIPT: &str = r#"
pd=$1; fake=$2; dir=$3; node=$4
url=http://127.0.0.1:9741
(sleep 60 | "$fake" --objects "$BUNDLE/cluster.json" --dir "$dir" 2>"$dir/server.log") &
for _ in $(seq 100); do [ -f "$dir/kubeconfig" ] && break; sleep 0.1; done
"$pd" run --node "$node" --listen 127.0.0.1:9741 --interval 1s --kubeconfig "$dir/kubeconfig" \
  --kube-proxy-healthz off --log-format json 2>"$dir/agent.log" &
pid=$!
code=000
for _ in $(seq 150); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "$url/readyz")
  [ "$code" = 200 ] && break
  sleep 0.1
done
echo "$code" >"$dir/readyz"
curl -s -o /dev/null -w '%{http_code}' "$url/healthz" >"$dir/healthz"
curl -s "$url/findings" >"$dir/findings.json"
curl -s "$url/metrics" >"$dir/metrics.txt"
curl -s -o /dev/null -w '%{http_code}' -X POST "$url/metrics" >"$dir/post"
start=$(date +%s%N)
kill -TERM "$pid"
# A watchdog: an agent that ignores SIGTERM is killed after 10 s (and the test fails).
(sleep 10; kill -KILL "$pid" 2>/dev/null) &
wait "$pid"
echo $? >"$dir/exit"
end=$(date +%s%N)
echo $(( (end - start) / 1000000 )) >"$dir/stop_ms"
exit 0
"#;

/// A file the script wrote, as is.
fn read_raw(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

/// A one-line file the script wrote, without its newline.
fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name))
        .unwrap_or_default()
        .trim_end()
        .to_string()
}

#[test]
fn the_agent_serves_a_bundles_findings_and_stops_on_sigterm() {
    if !support::require_root("the agent in a bundle's node") {
        return;
    }
    let started = Instant::now();
    let bundle = "udp-stale-endpoint";
    let node = std::fs::read_to_string(support::root().join("testdata").join(bundle).join("node"))
        .unwrap()
        .trim()
        .to_string();
    let scratch = TempDir::new().unwrap();
    let dir = scratch.path();
    let fake = support::fake_apiserver_bin();
    let out = Command::new("bash")
        .arg(support::root().join("scripts/capture-testdata.sh"))
        .args(["--exec", bundle, "--", "/bin/sh", "-c", SCRIPT, "sh", PORTDRIFT])
        .arg(&fake)
        .arg(dir)
        .arg(&node)
        .output()
        .expect("the capture script runs");
    let log = read_raw(dir, "agent.log");
    assert!(
        out.status.success(),
        "{:?}\nstdout: {}\nstderr: {}\nagent: {log}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(read(dir, "readyz"), "200", "never ready; agent log:\n{log}");
    assert_eq!(read(dir, "healthz"), "200");
    assert_eq!(read(dir, "post"), "405");

    let findings: serde_json::Value = serde_json::from_str(&read(dir, "findings.json"))
        .unwrap_or_else(|e| panic!("/findings is not JSON ({e}): {}", read(dir, "findings.json")));
    assert_eq!(findings["node"], node.as_str());
    let bundle_dir = support::root().join("testdata").join(bundle);
    if let Err(e) = support::compare_with_expected(&bundle_dir, &findings) {
        panic!("/findings: {e}\nagent log:\n{log}");
    }

    let metrics = read_raw(dir, "metrics.txt");
    let stale = metrics
        .lines()
        .find_map(|l| l.strip_prefix("portdrift_findings{kind=\"stale-endpoint\"} "))
        .unwrap_or_else(|| panic!("no stale-endpoint gauge in:\n{metrics}"));
    assert!(stale.trim().parse::<f64>().unwrap() > 0.0, "{metrics}");
    for needle in [
        "portdrift_scans_total ",
        "portdrift_api_synced 1",
        "portdrift_build_info{",
        "portdrift_last_scan_timestamp_seconds ",
    ] {
        assert!(metrics.contains(needle), "no {needle:?} in:\n{metrics}");
    }
    if let Some((ok, said)) = support::promtool::check(&metrics) {
        assert!(ok, "promtool check metrics: {said}\n{metrics}");
    }

    // The finding was logged once when it appeared.
    assert!(
        log.lines()
            .any(|l| l.contains("stale-endpoint") && l.contains("finding")),
        "{log}"
    );

    assert_eq!(read(dir, "exit").trim(), "0", "agent log:\n{log}");
    let stop_ms: u64 = read(dir, "stop_ms").trim().parse().unwrap();
    assert!(stop_ms < 5000, "took {stop_ms} ms to stop after SIGTERM");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the test took {:?}",
        started.elapsed()
    );
}
