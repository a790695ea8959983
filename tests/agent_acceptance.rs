//! Accepting a finding in a running agent (`run --accept FILE`), end to end: inside a
//! bundle's node (real rules in a private network namespace) with the bundle's cluster
//! state served by the fake API server. The bundle has one critical finding, a stale
//! endpoint on udp/30514. Accepted, it stays in `/findings` marked with its reason and
//! leaves the Node condition, the Events and the alerting series; a bad edit of the
//! file keeps the last good acceptances and says so; removing the entry makes the
//! finding count again, and the condition and an Event follow. Each `/findings` body
//! is validated against the JSON contract's schema.
//!
//! Needs root (CI runs as root and must not skip it).

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::path::Path;
use std::time::Duration;

use support::agent_node::{assert_ran, in_node, read_raw, sample};
use tempfile::TempDir;

/// Inside the namespace. The file is replaced the way kubelet updates a mounted
/// ConfigMap: written aside, then renamed over, so no read sees half of it.
const ACCEPT_THEN_EDIT: &str = r#"
put() { printf '%s' "$1" >"$dir/accept.json.new" && mv "$dir/accept.json.new" "$dir/accept.json"; }
put '{"accept": [{"kind": "stale-endpoint", "port": "udp/30514", "reason": "syslog pods drained on purpose (OPS-42)"}]}'
start_api
agent_flags="--events --node-condition --accept $dir/accept.json" start_agent
wait_for 15 ready || fail "the agent never became ready"
reported() {
  curl -s -m 2 "http://$api/apis/events.k8s.io/v1/events" >"$dir/$1-events.json"
  curl -s -m 2 "http://$api/api/v1/nodes/$node" >"$dir/$1-node.json"
}
accepted() { get /findings | grep -q 'OPS-42'; }
wait_for 15 accepted || fail "the finding was never accepted"
# Several scans (1 s apart) and their reporting pass.
condition_written() { reported accepted && grep -q NodePortDrift "$dir/accepted-node.json"; }
wait_for 10 condition_written || fail "no NodePortDrift condition was written"
sleep 3
get /findings >"$dir/accepted.json"
get /metrics >"$dir/accepted-metrics.txt"
reported accepted

put 'accept: everything'
kept() { get /findings | grep -q 'still applies'; }
wait_for 25 kept || fail "the bad file was never noticed"
get /findings >"$dir/bad.json"
get /metrics >"$dir/bad-metrics.txt"

put '{"accept": []}'
counted() { reported counted && grep -q StaleEndpointRule "$dir/counted-events.json" && grep -q '"status": *"True"' "$dir/counted-node.json"; }
wait_for 25 counted || fail "the finding never counted again"
get /findings >"$dir/counted.json"
stop_agent
"#;

fn json(dir: &Path, name: &str) -> serde_json::Value {
    let text = read_raw(dir, name);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} is not JSON ({e}): {text}"))
}

/// The stale endpoint on udp/30514.
fn stale_endpoint(report: &serde_json::Value) -> &serde_json::Value {
    report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["kind"] == "stale-endpoint" && f["port"] == 30514)
        .unwrap_or_else(|| panic!("no stale-endpoint on 30514: {report:#}"))
}

fn node_condition(node: &serde_json::Value) -> Option<&serde_json::Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "NodePortDrift")
}

fn stale_endpoint_events(events: &serde_json::Value) -> usize {
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "StaleEndpointRule")
        .count()
}

#[test]
fn an_accepted_finding_leaves_the_condition_and_events_until_the_acceptance_goes() {
    if !support::require_root("the agent in a bundle's node") {
        return;
    }
    let scratch = TempDir::new().unwrap();
    let dir = scratch.path();
    let out = in_node(
        "udp-stale-endpoint",
        ACCEPT_THEN_EDIT,
        &[],
        dir,
        Duration::from_secs(90),
    );
    assert_ran(&out, dir);
    let log = read_raw(dir, "agent.log");

    // Every /findings body follows the JSON contract's schema (docs/schema).
    let bodies = ["accepted.json", "bad.json", "counted.json"].map(|name| dir.join(name));
    let bodies: Vec<&Path> = bodies.iter().map(|p| p.as_path()).collect();
    if let Some(result) = support::schema::check("scan-report", &bodies) {
        result.unwrap_or_else(|said| panic!("/findings does not follow the schema: {said}"));
    }

    // Accepted: in /findings with its reason and where it was stated, counted apart.
    let accepted = json(dir, "accepted.json");
    let finding = stale_endpoint(&accepted);
    assert_eq!(finding["severity"], "critical", "its severity is kept");
    assert_eq!(
        finding["accepted"]["reason"],
        "syslog pods drained on purpose (OPS-42)"
    );
    assert_eq!(finding["accepted"]["by"], "acceptances entry 1");
    assert_eq!(accepted["summary"]["critical"], 0, "{:#}", accepted["summary"]);
    assert_eq!(accepted["summary"]["accepted"], 1);
    let source = support::source(&accepted, "acceptances");
    assert_eq!((&source["status"], &source["items"]), (&"ok".into(), &1.into()));
    // Not in the condition, the Events or what alerts read; in its own gauge.
    let node = json(dir, "accepted-node.json");
    let condition = node_condition(&node).unwrap_or_else(|| panic!("no condition: {node:#}"));
    assert_eq!(condition["status"], "False", "{condition:#}\nagent log:\n{log}");
    assert_eq!(stale_endpoint_events(&json(dir, "accepted-events.json")), 0);
    let metrics = read_raw(dir, "accepted-metrics.txt");
    assert_eq!(
        sample(&metrics, "portdrift_findings_accepted{kind=\"stale-endpoint\"}"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "portdrift_findings{kind=\"stale-endpoint\"}"),
        Some(0.0),
        "{metrics}"
    );
    assert!(
        !metrics.contains("severity=\"critical\""),
        "an accepted finding is in an alerting series:\n{metrics}"
    );
    if let Some((ok, said)) = support::promtool::check(&metrics) {
        assert!(ok, "promtool check metrics: {said}\n{metrics}");
    }

    // A bad edit: the last good acceptances still apply, and the file is an error.
    let bad = json(dir, "bad.json");
    assert_eq!(
        stale_endpoint(&bad)["accepted"]["reason"],
        "syslog pods drained on purpose (OPS-42)"
    );
    let source = support::source(&bad, "acceptances");
    assert_eq!(source["status"], "error", "{source:#}");
    let metrics = read_raw(dir, "bad-metrics.txt");
    assert_eq!(
        sample(&metrics, "portdrift_source_up{source=\"acceptances\"}"),
        Some(0.0),
        "{metrics}"
    );
    assert!(
        log.contains("the acceptances file cannot be used; the last good one"),
        "{log}"
    );

    // The entry removed: the finding counts again, and the condition and an Event say so.
    let counted = json(dir, "counted.json");
    assert!(stale_endpoint(&counted)["accepted"].is_null());
    assert_eq!(counted["summary"]["critical"], 1);
    assert_eq!(stale_endpoint_events(&json(dir, "counted-events.json")), 1);
    let lines = support::json_log_lines(&log);
    assert!(
        lines.iter().any(|l| l["port"] == 30514
            && l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("finding no longer accepted"))
            && l["level"] == "WARN"),
        "{log}"
    );
}
