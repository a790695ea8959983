//! `portdrift run`, end to end: inside a bundle's node (real rules in a private network
//! namespace, by `scripts/capture-testdata.sh --exec`) with the bundle's cluster state
//! served by the fake API server (`examples/fake_apiserver`):
//!
//! - the agent becomes ready, `/findings` holds the bundle's expected findings,
//!   `/metrics` passes promtool and counts them, the fake API server receives the
//!   finding's Event and the Node's `NodePortDrift` condition (`--events
//!   --node-condition`), and SIGTERM stops it cleanly within 5 s;
//! - drift made with the real `iptables` (or `nft`) command while it runs shows in
//!   `/findings` and `/metrics` and is logged once, and once more when it clears;
//! - `/readyz` follows the API server: unready while it is gone, ready once it is back,
//!   with `/healthz` and `/metrics` served throughout.
//!
//! Needs root (CI runs as root and must not skip it), and curl inside the namespace.
//! Every scenario runs under `timeout`, and everything it starts lives in the bundle's
//! PID namespace, which dies with it, so nothing outlives a failed test.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::agent_node::{assert_ran, in_node, node_of, read, read_raw, sample};
use tempfile::TempDir;

/// Inside the namespace: poll /readyz, fetch the endpoints into files, SIGTERM the
/// agent and time its exit.
const SERVE_AND_STOP: &str = r#"
start_api
agent_flags="--events --node-condition" start_agent
wait_for 15 ready
status /readyz >"$dir/readyz"
status /healthz >"$dir/healthz"
get /findings >"$dir/findings.json"
# Not on the node's network: the public listener answers 404 for it.
curl -s -m 2 -o /dev/null -w '%{http_code}' "$url/findings" >"$dir/public-findings"
# The Event and the condition are written after the scan, on tasks of their own.
reported() {
  curl -s -m 2 "http://$api/apis/events.k8s.io/v1/events" >"$dir/events.json"
  curl -s -m 2 "http://$api/api/v1/nodes/$node" >"$dir/node.json"
  grep -q StaleEndpointRule "$dir/events.json" && grep -q NodePortDrift "$dir/node.json" &&
    get /metrics | grep -q 'portdrift_events_total{result="sent"} 1'
}
wait_for 5 reported
get /metrics >"$dir/metrics.txt"
curl -s -m 2 -o /dev/null -w '%{http_code}' -X POST "$url/metrics" >"$dir/post"
stop_agent
"#;

/// A JSON file the script wrote (a `/findings` body).
fn read_json(dir: &Path, name: &str) -> serde_json::Value {
    let text = read_raw(dir, name);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} is not JSON ({e}): {text}"))
}

/// The agent stopped on SIGTERM with status 0 within 5 s.
fn assert_stopped_cleanly(dir: &Path) {
    assert_eq!(
        read(dir, "exit"),
        "0",
        "agent log:\n{}",
        read_raw(dir, "agent.log")
    );
    let stop_ms: u64 = read(dir, "stop_ms").parse().unwrap();
    assert!(stop_ms < 5000, "took {stop_ms} ms to stop after SIGTERM");
}

#[test]
fn the_agent_serves_a_bundles_findings_and_stops_on_sigterm() {
    if !support::require_root("the agent in a bundle's node") {
        return;
    }
    let started = Instant::now();
    let bundle = "udp-stale-endpoint";
    let node = node_of(bundle);
    let scratch = TempDir::new().unwrap();
    let dir = scratch.path();
    let out = in_node(bundle, SERVE_AND_STOP, &[], dir, Duration::from_secs(60));
    assert_ran(&out, dir);
    let log = read_raw(dir, "agent.log");
    assert_eq!(read(dir, "readyz"), "200", "never ready; agent log:\n{log}");
    assert_eq!(read(dir, "healthz"), "200");
    assert_eq!(read(dir, "post"), "405");
    // By default /findings is served on the loopback listener only, not on --listen.
    assert_eq!(read(dir, "public-findings"), "404");

    let findings = read_json(dir, "findings.json");
    assert_eq!(findings["node"], node.as_str());
    let bundle_dir = support::root().join("testdata").join(bundle);
    if let Err(e) = support::compare_with_expected(&bundle_dir, &findings) {
        panic!("/findings: {e}\nagent log:\n{log}");
    }

    let metrics = read_raw(dir, "metrics.txt");
    let stale = sample(&metrics, "portdrift_findings{kind=\"stale-endpoint\"}")
        .unwrap_or_else(|| panic!("no stale-endpoint gauge in:\n{metrics}"));
    assert!(stale > 0.0, "{metrics}");
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
    // No kube-proxy runs in the bundle's node: its metrics server, asked by default,
    // does not answer, which is a 0 rather than a missing series; its health endpoint,
    // turned off, is not asked and has no series.
    assert!(
        metrics.contains("portdrift_kube_proxy_reachable{source=\"kube-proxy-mode.txt\"} 0"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("portdrift_kube_proxy_reachable{source=\"kube-proxy-healthz.json\"}"),
        "{metrics}"
    );
    // One name for the source: the report's sources and portdrift_source_up use it too.
    assert!(
        metrics.contains("portdrift_source_up{source=\"kube-proxy-mode.txt\"}"),
        "{metrics}"
    );
    support::source(&findings, "kube-proxy-mode.txt");

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

    // The finding was logged once when it appeared, and the condition when it was set:
    // every line one flat JSON object, no key twice.
    let lines = support::json_log_lines(&log);
    assert!(
        lines.iter().any(|l| l["kind"] == "stale-endpoint"
            && l["message"].as_str().is_some_and(|m| m.starts_with("finding"))),
        "{log}"
    );
    assert!(
        lines.iter().any(|l| l["message"] == "NodePortDrift condition set"
            && l["condition_message"]
                .as_str()
                .is_some_and(|m| m.contains("udp/30514"))),
        "{log}"
    );

    // Everything was checked, and /findings, /metrics and the log say so (the log once,
    // however many scans ran).
    assert_eq!(
        findings["coverage"]["complete"], true,
        "{:#}",
        findings["coverage"]
    );
    assert_eq!(findings["coverage"]["proxy_mode"], "iptables");
    assert_eq!(findings["coverage"]["cluster_state"], true);
    assert!(metrics.contains("portdrift_coverage_complete 1"), "{metrics}");
    assert!(
        metrics.contains("portdrift_proxy_mode_info{mode=\"iptables\"} 1"),
        "{metrics}"
    );
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("coverage: every check ran on complete inputs"))
            .count(),
        1,
        "{log}"
    );

    assert_stopped_cleanly(dir);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the test took {:?}",
        started.elapsed()
    );
}

/// Inside the namespace, with the drift's add and delete commands and its port as
/// arguments: once the agent is ready, add the drift, wait for it in /findings, let
/// three more scans pass, delete it, wait until it leaves /findings, let three more
/// scans pass. The endpoints are saved at each step.
const DRIFT: &str = r#"
add=$1; del=$2; port=$3
start_api
start_agent
wait_for 20 ready || fail "the agent never became ready"
get /findings >"$dir/before.json"
scans() { get /metrics | sed -n 's/^portdrift_scans_total //p'; }
# A 200 /findings that does (or does not) hold a finding for the port.
with_port() { local f; f=$(get /findings) && grep -q "\"port\": $port\b" <<<"$f"; }
without_port() { local f; f=$(get /findings) && [ -n "$f" ] && ! grep -q "\"port\": $port\b" <<<"$f"; }
three_more_scans() { awk -v now="$(scans)" -v then="$1" 'BEGIN { exit !(now >= then + 3) }'; }
# Waits for three more scans than now (which must be known for that to mean anything).
three_more() {
  local n
  n=$(scans)
  [ -n "$n" ] || fail "no portdrift_scans_total in /metrics"
  wait_for 15 three_more_scans "$n" || fail "the agent stopped scanning"
}

eval "$add" || fail "cannot add the drift: $add"
wait_for 15 with_port || fail "the drift never showed in /findings"
get /findings >"$dir/drift.json"
get /metrics >"$dir/drift-metrics.txt"
three_more
get /findings >"$dir/drift-later.json"

eval "$del" || fail "cannot delete the drift: $del"
wait_for 15 without_port || fail "the drift never left /findings"
get /findings >"$dir/cleared.json"
get /metrics >"$dir/cleared-metrics.txt"
three_more
get /metrics >"$dir/cleared-later-metrics.txt"
stop_agent
"#;

/// Inside the namespace: a stale rule added while `run --repair` watches; the agent
/// repairs it, and the ruleset is what it was before.
const REPAIR: &str = r#"
add=$1; port=$2
rules() { iptables-nft-save -t nat | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//'; }
rules >"$dir/rules-before.txt"
start_api
agent_flags="--repair --repair-min-age 2s --events" start_agent
wait_for 20 ready || fail "the agent never became ready"
eval "$add" || fail "cannot add the drift: $add"
without_rule() { ! iptables-nft-save -t nat | grep -q -- "--dport $port "; }
wait_for 30 without_rule || fail "the stale rule was never removed"
without_port() { local f; f=$(get /findings) && [ -n "$f" ] && ! grep -q "\"port\": $port\b" <<<"$f"; }
wait_for 15 without_port || fail "the finding never cleared"
rules >"$dir/rules-after.txt"
get /metrics >"$dir/metrics.txt"
# The Event is written on a task of its own, after the cycle.
recorded() {
  curl -s -m 2 "http://$api/apis/events.k8s.io/v1/events" >"$dir/events.json"
  grep -q NodePortRuleRemoved "$dir/events.json"
}
wait_for 5 recorded
stop_agent
"#;

/// Adds a stale DNAT for shop/web's NodePort to a pod that is gone.
const STALE_DNAT_30080: &str = "iptables-nft -w -t nat -A KUBE-NODEPORTS -p tcp -m comment --comment shop/web:http \
                                -m tcp --dport 30080 -j DNAT --to-destination 10.244.2.17:8080";

/// Runs `script` in clean-iptables' node with [`STALE_DNAT_30080`] and its port as
/// arguments, within `limit` seconds; its scratch directory, or None without root.
fn with_stale_dnat(script: &str, limit: u64) -> Option<TempDir> {
    if !support::require_root("the agent in a bundle's node") {
        return None;
    }
    let scratch = TempDir::new().unwrap();
    let out = in_node(
        "clean-iptables",
        script,
        &[STALE_DNAT_30080, "30080"],
        scratch.path(),
        Duration::from_secs(limit),
    );
    assert_ran(&out, scratch.path());
    Some(scratch)
}

#[test]
fn run_repair_removes_a_stale_rule_and_nothing_else() {
    let Some(scratch) = with_stale_dnat(REPAIR, 90) else {
        return;
    };
    let dir = scratch.path();
    let log = read_raw(dir, "agent.log");
    assert_eq!(
        read_raw(dir, "rules-before.txt"),
        read_raw(dir, "rules-after.txt"),
        "the ruleset after repair differs from before the drift; agent log:\n{log}"
    );
    let metrics = read_raw(dir, "metrics.txt");
    assert_eq!(
        sample(&metrics, "portdrift_repairs_total{result=\"applied\"}"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "portdrift_repairs_total{result=\"failed\"}"),
        Some(0.0)
    );
    // The audit trail: the exact command before, the result after.
    let applying = log.lines().filter(|l| l.contains("repair: applying")).count();
    let applied = log.lines().filter(|l| l.contains("repair: applied")).count();
    assert_eq!((applying, applied), (1, 1), "agent log:\n{log}");
    // With --events the action is also recorded on the Node.
    let events = read_json(dir, "events.json");
    let removed: Vec<_> = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "NodePortRuleRemoved")
        .collect();
    assert_eq!(removed.len(), 1, "{events:#}");
    assert_eq!(removed[0]["type"], "Normal");
    assert_eq!(removed[0]["regarding"]["kind"], "Node");
    assert!(
        removed[0]["note"]
            .as_str()
            .unwrap_or_default()
            .contains("--dport 30080"),
        "{:#}",
        removed[0]
    );
    assert_stopped_cleanly(dir);
}

/// The drift one scenario makes, and the finding it must give.
struct Drift<'a> {
    bundle: &'a str,
    add: &'a str,
    delete: &'a str,
    port: u16,
    kind: &'a str,
    service: &'a str,
}

/// Findings that are `warning` or `critical` (what a clean node must not have).
fn actionable(report: &serde_json::Value) -> Vec<&serde_json::Value> {
    report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["severity"] == "warning" || f["severity"] == "critical")
        .collect()
}

/// The findings of a report about `port`.
fn about(report: &serde_json::Value, port: u16) -> Vec<&serde_json::Value> {
    report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["port"] == port)
        .collect()
}

fn drift_appears_once_and_clears(drift: &Drift<'_>) {
    let started = Instant::now();
    let scratch = TempDir::new().unwrap();
    let dir = scratch.path();
    let port = drift.port.to_string();
    let out = in_node(
        drift.bundle,
        DRIFT,
        &[drift.add, drift.delete, &port],
        dir,
        Duration::from_secs(60),
    );
    assert_ran(&out, dir);
    let log = read_raw(dir, "agent.log");

    let before = read_json(dir, "before.json");
    assert!(
        actionable(&before).is_empty(),
        "the clean node has findings before any drift: {before:#}"
    );

    // The drift is one finding, in /findings and in the gauge, and it stays.
    let gauge = format!("portdrift_findings{{kind=\"{}\"}}", drift.kind);
    for name in ["drift.json", "drift-later.json"] {
        let report = read_json(dir, name);
        let found = about(&report, drift.port);
        assert_eq!(found.len(), 1, "{name}: {report:#}");
        assert_eq!(found[0]["kind"], drift.kind, "{name}: {:#}", found[0]);
        assert_eq!(found[0]["service"], drift.service, "{name}: {:#}", found[0]);
    }
    let metrics = read_raw(dir, "drift-metrics.txt");
    assert_eq!(sample(&metrics, &gauge), Some(1.0), "{metrics}");

    // Deleted, it leaves both, and the node is as clean as before.
    let cleared = read_json(dir, "cleared.json");
    assert!(about(&cleared, drift.port).is_empty(), "{cleared:#}");
    assert!(actionable(&cleared).is_empty(), "{cleared:#}");
    for name in ["cleared-metrics.txt", "cleared-later-metrics.txt"] {
        let metrics = read_raw(dir, name);
        assert_eq!(sample(&metrics, &gauge), Some(0.0), "{name}:\n{metrics}");
    }

    // The log tells the story in two lines, whatever the number of scans in between:
    // `kubectl logs ds/portdrift | grep PORT` finds the finding once and its clearing once.
    let lines: Vec<serde_json::Value> = support::json_log_lines(&log)
        .into_iter()
        .filter(|l| l["port"] == drift.port)
        .collect();
    let messages: Vec<&str> = lines
        .iter()
        .map(|l| l["message"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(lines.len(), 2, "{messages:#?}\nagent log:\n{log}");
    assert!(messages[0].starts_with("finding: "), "{messages:#?}");
    assert!(
        messages[1].starts_with("finding cleared: ") && messages[1].contains(&port),
        "{messages:#?}"
    );
    let drifted = read_json(dir, "drift.json");
    let backend = &about(&drifted, drift.port)[0]["backend"];
    for line in &lines {
        assert_eq!(line["kind"], drift.kind, "{line}");
        assert_eq!(line["service"], drift.service, "{line}");
        // Named as /findings names it, so that one grep finds both.
        assert_eq!(&line["backend"], backend, "{line}");
    }
    assert_eq!(lines[0]["level"], "WARN", "{}", lines[0]);

    assert_stopped_cleanly(dir);
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "the test took {:?}",
        started.elapsed()
    );
}

/// A hand-written DNAT for 30080, left behind by a deleted Service, in `KUBE-NODEPORTS`
/// of a clean iptables-mode node.
#[test]
fn iptables_drift_is_logged_once_and_clears() {
    if !support::require_root("the agent in a bundle's node") {
        return;
    }
    let rule = "KUBE-NODEPORTS -p tcp -m comment --comment shop/web:http -m tcp --dport 30080 \
                -j DNAT --to-destination 10.244.2.17:8080";
    drift_appears_once_and_clears(&Drift {
        bundle: "clean-iptables",
        add: &format!("iptables-nft -w -t nat -A {rule}"),
        delete: &format!("iptables-nft -w -t nat -D {rule}"),
        port: 30080,
        kind: "stale-nodeport",
        service: "shop/web",
    });
}

/// A `service-nodeports` element for 30080 that no Service owns, in kube-proxy's own
/// form, pointing at another Service's chain, in a clean nftables-mode node.
#[test]
fn nftables_drift_is_logged_once_and_clears() {
    if !support::require_root("the agent in a bundle's node") {
        return;
    }
    let set = "ip kube-proxy service-nodeports";
    drift_appears_once_and_clears(&Drift {
        bundle: "clean-nftables",
        add: &format!(
            "nft add element {set} '{{ tcp . 30080 : goto external-XVAFOOW3-analytics/exporter/tcp/http }}'"
        ),
        delete: &format!("nft delete element {set} '{{ tcp . 30080 }}'"),
        port: 30080,
        kind: "stale-nodeport",
        service: "analytics/exporter",
    });
}

/// Inside the namespace: once the agent is ready, kill the API server, wait for
/// /readyz to turn 503, check it stays so, start the server again on the same address
/// and wait for /readyz to be 200 again. A monitor records every /healthz and /metrics
/// answer throughout; the times are saved.
const API_OUTAGE: &str = r#"
start_api
log_format=text start_agent
wait_for 20 ready || fail "the agent never became ready"
monitor() {
  while :; do
    echo "/healthz $(status /healthz)" >>"$dir/served"
    echo "/metrics $(status /metrics)" >>"$dir/served"
    sleep 0.2
  done
}
monitor &
monitor_pid=$!
unready() { [ "$(status /readyz)" = 503 ]; }

kill -KILL "$api_pid"
wait "$api_pid" 2>/dev/null
down=$(now_ms)
wait_for 20 unready || fail "/readyz stayed ready with the API server gone"
echo $(( $(now_ms) - down )) >"$dir/unready_ms"
get /metrics >"$dir/outage-metrics.txt"
status /findings >"$dir/outage-findings"
# Not a blip: it stays unready while the API server is away.
sleep 2
status /readyz >"$dir/outage-readyz"

up=$(now_ms)
start_api
wait_for 30 ready || fail "/readyz did not come back with the API server"
echo $(( $(now_ms) - up )) >"$dir/ready_again_ms"
get /metrics >"$dir/back-metrics.txt"
kill "$monitor_pid"
wait "$monitor_pid" 2>/dev/null
stop_agent
"#;

#[test]
fn readiness_follows_the_api_server() {
    if !support::require_root("the agent in a bundle's node") {
        return;
    }
    let started = Instant::now();
    let scratch = TempDir::new().unwrap();
    let dir = scratch.path();
    let out = in_node("clean-iptables", API_OUTAGE, &[], dir, Duration::from_secs(90));
    assert_ran(&out, dir);
    let log = read_raw(dir, "agent.log");

    let unready_ms: u64 = read(dir, "unready_ms").parse().unwrap();
    assert!(
        unready_ms < 10_000,
        "unready only {unready_ms} ms after the API server died"
    );
    assert_eq!(
        read(dir, "outage-readyz"),
        "503",
        "ready again with no API server:\n{log}"
    );
    let outage = read_raw(dir, "outage-metrics.txt");
    assert_eq!(sample(&outage, "portdrift_api_fresh"), Some(0.0), "{outage}");
    assert_eq!(sample(&outage, "portdrift_api_synced"), Some(1.0), "{outage}");
    // The last report is still served: what the node looked like is still worth seeing.
    assert_eq!(read(dir, "outage-findings"), "200");

    let ready_again_ms: u64 = read(dir, "ready_again_ms").parse().unwrap();
    assert!(
        ready_again_ms < 20_000,
        "ready {ready_again_ms} ms after the API server came back"
    );
    let back = read_raw(dir, "back-metrics.txt");
    assert_eq!(sample(&back, "portdrift_api_fresh"), Some(1.0), "{back}");

    let served = read_raw(dir, "served");
    let answers: Vec<&str> = served.lines().collect();
    assert!(answers.len() >= 20, "the monitor hardly ran:\n{served}");
    let failed: Vec<&&str> = answers.iter().filter(|l| !l.ends_with(" 200")).collect();
    assert!(
        failed.is_empty(),
        "/healthz or /metrics failed during the outage: {failed:?}\n{log}"
    );

    // The text log, as `kubectl logs` shows it: plain text, without a terminal's colours.
    assert!(log.contains("portdrift agent started"), "{log}");
    assert!(!log.contains('\x1b'), "escape codes in the log:\n{log}");

    assert_stopped_cleanly(dir);
    eprintln!(
        "unready {unready_ms} ms after the API server died, ready {ready_again_ms} ms after it came back; {:?} in all",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "the test took {:?}",
        started.elapsed()
    );
}

/// Inside the namespace, with the agent reading iptables-nft through the tool
/// (`--iptables-via save`): `iptables-nft-save` on the agent's PATH is a stand-in that
/// runs the real tool, or hangs, floods (an endless dump, far past 1 GB if let run),
/// prints binary garbage, or fails, as `$dir/mode` says. A stale rule is added while it
/// misbehaves. Each fault in turn: the agent keeps serving, /metrics shows the source
/// down, and repair does nothing; once the tool is sound again, repair removes the
/// rule.
const BROKEN_TOOL: &str = r#"
add=$1; port=$2
real=$(command -v iptables-nft-save) || fail "no iptables-nft-save"
mkdir -p "$dir/bin"
cat >"$dir/bin/iptables-nft-save" <<STUB
#!/bin/bash
case "\$(cat "$dir/mode")" in
  hang) exec sleep 600 ;;
  flood) yes -- '-A KUBE-NODEPORTS -p tcp -m tcp --dport 30080 -j DNAT --to-destination 10.9.9.9:80'; exit 0 ;;
  garbage) head -c 300000 /dev/urandom; exit 0 ;;
  fail) echo "iptables-nft-save: cannot open socket: Permission denied" >&2; exit 4 ;;
  *) exec "$real" "\$@" ;;
esac
STUB
chmod +x "$dir/bin/iptables-nft-save"
echo ok >"$dir/mode"
start_api
# The tool, not the netlink reader: the faults are the tool's.
PATH="$dir/bin:$PATH" agent_flags="--repair --repair-min-age 1s --tool-timeout 2s --tool-max-output 1M --iptables-via save" start_agent
wait_for 20 ready || fail "the agent never became ready"
scans() { get /metrics | sed -n 's/^portdrift_scans_total //p'; }
more_scans() { awk -v now="$(scans)" -v then="$1" -v n="$2" 'BEGIN { exit !(now >= then + n) }'; }
with_rule() { iptables-nft-save -t nat | grep -q -- "--dport $port "; }
for mode in hang flood garbage fail; do
  echo "$mode" >"$dir/mode"
  n=$(scans)
  # The first fault comes with the drift, whose rule change makes the agent read again.
  if [ "$mode" = hang ]; then eval "$add" || fail "cannot add the drift: $add"; fi
  wait_for 40 more_scans "$n" 3 || fail "$mode: the agent stopped scanning"
  [ "$(status /healthz)" = 200 ] || fail "$mode: /healthz is not 200"
  get /metrics >"$dir/metrics-$mode.txt" || fail "$mode: /metrics is not served"
  get /findings >"$dir/findings-$mode.json" || fail "$mode: /findings is not served"
  with_rule || fail "$mode: repair removed the rule while the tool was $mode"
done
echo ok >"$dir/mode"
without_rule() { ! with_rule; }
wait_for 30 without_rule || fail "the stale rule was never removed once the tool was sound"
get /metrics >"$dir/metrics-ok.txt"
stop_agent
"#;

#[test]
fn a_hung_flooding_garbled_or_failing_dump_tool_is_reported_and_repair_waits() {
    let Some(scratch) = with_stale_dnat(BROKEN_TOOL, 240) else {
        return;
    };
    let dir = scratch.path();
    let up = "portdrift_source_up{source=\"iptables-nft-save.txt\"}";
    for mode in ["hang", "flood", "garbage", "fail"] {
        let metrics = read_raw(dir, &format!("metrics-{mode}.txt"));
        // Binary garbage is no dump: refused whole, as a failed read is, never read
        // as lines not understood.
        assert_eq!(sample(&metrics, up), Some(0.0), "{mode}: {metrics}");
        if mode == "garbage" {
            let unparsed = sample(&metrics, "portdrift_findings{kind=\"unparsed-rule\"}");
            assert!(unparsed.unwrap_or(0.0) == 0.0, "{mode}: {metrics}");
        }
        assert_eq!(
            sample(&metrics, "portdrift_repairs_total{result=\"applied\"}").unwrap_or(0.0),
            0.0,
            "{mode}: {metrics}"
        );
        let findings = read_json(dir, &format!("findings-{mode}.json"));
        let source = findings["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| {
                s["source"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("iptables-nft-save"))
            })
            .unwrap_or_else(|| panic!("{mode}: no iptables-nft-save status: {findings:#}"));
        let want = match mode {
            "hang" => "timed-out",
            "flood" => "too-large",
            "garbage" => "error",
            _ => "failed",
        };
        assert_eq!(source["status"], want, "{mode}: {source:#}");
    }
    let metrics = read_raw(dir, "metrics-ok.txt");
    assert_eq!(sample(&metrics, up), Some(1.0), "{metrics}");
    assert_eq!(
        sample(&metrics, "portdrift_repairs_total{result=\"applied\"}"),
        Some(1.0),
        "{metrics}"
    );
    assert_stopped_cleanly(dir);
}
