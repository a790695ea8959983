//! `portdrift run`, end to end: inside a bundle's node (real rules in a private network
//! namespace, by `scripts/capture-testdata.sh --exec`) with the bundle's cluster state
//! served by the fake API server, the agent becomes ready, `/findings` holds the
//! bundle's expected findings, `/metrics` passes promtool and counts them, the fake API
//! server receives the finding's Event and the Node's `NodePortDrift` condition
//! (`--events --node-condition`), and SIGTERM stops it cleanly within 5 s.
//!
//! Needs root (CI runs as root and must not skip it), and curl inside the namespace.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tempfile::TempDir;

const PORTDRIFT: &str = env!("CARGO_BIN_EXE_portdrift");

fn fake_apiserver_bin() -> PathBuf {
    let bin = Path::new(PORTDRIFT)
        .parent()
        .unwrap()
        .join("examples/fake_apiserver");
    assert!(bin.is_file(), "{} is built by cargo test", bin.display());
    bin
}

/// Inside the namespace: the fake API server, then the agent; poll /readyz, fetch the
/// endpoints into files, SIGTERM the agent and time its exit.
const SCRIPT: &str = r#"
pd=$1; fake=$2; dir=$3; node=$4
url=http://127.0.0.1:9741
(sleep 60 | "$fake" --objects "$BUNDLE/cluster.json" --node "$node" --dir "$dir" 2>"$dir/server.log") &
for _ in $(seq 100); do [ -f "$dir/kubeconfig" ] && break; sleep 0.1; done
server=$(sed -n 's/^ *server: //p' "$dir/kubeconfig")
"$pd" run --node "$node" --listen 127.0.0.1:9741 --interval 1s --kubeconfig "$dir/kubeconfig" \
  --kube-proxy-healthz off --log-format json --events --node-condition 2>"$dir/agent.log" &
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
# The Event and the condition are written after the scan, on tasks of their own.
for _ in $(seq 50); do
  curl -s "$server/apis/events.k8s.io/v1/events" >"$dir/events.json"
  curl -s "$server/api/v1/nodes/$node" >"$dir/node.json"
  grep -q StaleEndpointRule "$dir/events.json" && grep -q NodePortDrift "$dir/node.json" &&
    curl -s "$url/metrics" | grep -q 'portdrift_events_total{result="sent"} 1' && break
  sleep 0.1
done
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
    let fake = fake_apiserver_bin();
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

    // The finding's Event, on its Service (with the UID the cluster state gives it).
    let events: serde_json::Value = serde_json::from_str(&read(dir, "events.json"))
        .unwrap_or_else(|e| panic!("the Event list is not JSON ({e}); agent log:\n{log}"));
    let items = events["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "{events:#}\nagent log:\n{log}");
    let event = &items[0];
    assert_eq!(event["reason"], "StaleEndpointRule", "{event:#}");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reportingInstance"], node.as_str());
    assert_eq!(event["metadata"]["namespace"], "logging");
    assert_eq!(event["regarding"]["name"], "syslog-ingest");
    assert_eq!(event["regarding"]["uid"], "f77cb922-9475-5a55-a9d6-7133bfa4b88f");
    assert!(
        metrics.contains("portdrift_events_total{result=\"sent\"} 1"),
        "{metrics}"
    );
    // The condition: True, naming the port.
    let node_json: serde_json::Value = serde_json::from_str(&read(dir, "node.json")).unwrap_or_default();
    let condition = node_json["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "NodePortDrift"))
        .unwrap_or_else(|| panic!("no NodePortDrift condition: {node_json:#}\nagent log:\n{log}"));
    assert_eq!(condition["status"], "True", "{condition:#}");
    assert_eq!(condition["reason"], "NodePortDrift");
    assert!(
        condition["message"]
            .as_str()
            .unwrap_or_default()
            .contains("udp/30514"),
        "{condition:#}"
    );

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
