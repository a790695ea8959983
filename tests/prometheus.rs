//! The Prometheus side: the alert rules in `deploy/prometheus/` pass `promtool check
//! rules` and their own `promtool test rules` cases; and a real Prometheus server,
//! scraping the real agent inside a bundle's node (real rules in a private network
//! namespace, by `scripts/capture-testdata.sh --exec`, with the bundle's cluster state
//! served by the fake API server) and evaluating those alert rules, sees the findings
//! the bundle's `expected.json` gives, the target up, and the matching alerts pending.
//!
//! Needs promtool and prometheus (Debian package `prometheus`), and root and curl for
//! the server test; with `CI` set none of them is skipped.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

const PORTDRIFT: &str = env!("CARGO_BIN_EXE_portdrift");

fn rules_dir() -> PathBuf {
    support::root().join("deploy/prometheus")
}

#[test]
fn the_alert_rules_pass_promtool_check_rules() {
    if !support::require_tool("promtool", "the alert rules check") {
        return;
    }
    let rules = rules_dir().join("portdrift-alerts.yaml");
    let (ok, said) = support::promtool::run(&["check", "rules", "--lint-fatal", rules.to_str().unwrap()]);
    assert!(ok, "promtool check rules: {said}");
    assert!(said.contains("SUCCESS"), "{said}");
}

#[test]
fn the_alert_rules_pass_their_unit_tests() {
    if !support::require_tool("promtool", "the alert rules' unit tests") {
        return;
    }
    let tests = rules_dir().join("portdrift-alerts_test.yaml");
    let (ok, said) = support::promtool::run(&["test", "rules", tests.to_str().unwrap()]);
    assert!(ok, "promtool test rules: {said}");
}

/// Every alert the rules file defines is exercised by its unit tests, and at least one
/// case shows it firing with its annotations, its `runbook_url` among them (promtool
/// compares the annotations a case lists with the alert's, all of them).
#[test]
fn every_alert_has_a_unit_test_that_fires_it() {
    let yaml = |name: &str| -> Value {
        let text = std::fs::read_to_string(rules_dir().join(name)).unwrap();
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let rules = yaml("portdrift-alerts.yaml");
    let tests = yaml("portdrift-alerts_test.yaml");
    let alerts: Vec<&str> = rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert!(alerts.len() >= 10, "{alerts:?}");
    let cases: Vec<&Value> = tests["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["alert_rule_test"].as_array().into_iter().flatten())
        .collect();
    for alert in alerts {
        let fires = cases.iter().any(|case| {
            case["alertname"] == alert
                && case["exp_alerts"].as_array().is_some_and(|expected| {
                    !expected.is_empty()
                        && expected
                            .iter()
                            .all(|a| a["exp_annotations"]["runbook_url"].is_string())
                })
        });
        assert!(
            fires,
            "{alert} has no promtool test case that fires it and checks its runbook_url"
        );
    }
}

/// Inside the namespace: the fake API server, the agent, and Prometheus scraping the
/// agent every second and evaluating the alert rules. Polls Prometheus's query API
/// until it sees `want` stale-endpoint findings and the alert for them pending, then
/// saves what Prometheus answers to a few queries, and stops everything.
const SCRIPT: &str = r#"
pd=$1; fake=$2; dir=$3; node=$4; rules=$5; want=$6; max_series=$7
api=http://127.0.0.1:9090/api/v1
(sleep 60 | "$fake" --objects "$BUNDLE/cluster.json" --dir "$dir" 2>"$dir/server.log") &
for _ in $(seq 100); do [ -f "$dir/kubeconfig" ] && break; sleep 0.1; done
"$pd" run --node "$node" --listen 127.0.0.1:9741 --interval 1s --kubeconfig "$dir/kubeconfig" \
  --kube-proxy-healthz off --startup-jitter 0s --metrics-max-series "$max_series" --log-format json 2>"$dir/agent.log" &
agent=$!
cat >"$dir/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["$rules"]
scrape_configs:
  - job_name: portdrift
    static_configs: [{targets: ["127.0.0.1:9741"]}]
EOF
prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/tsdb" \
  --web.listen-address=127.0.0.1:9090 2>"$dir/prometheus.log" &
prom=$!
q() { curl -s -G --data-urlencode "query=$1" "$api/query"; }
seen=no
for _ in $(seq 200); do
  q 'portdrift_findings{kind="stale-endpoint"}' >"$dir/stale.json"
  q 'ALERTS{alertname="PortdriftStaleEndpoint"}' >"$dir/pending.json"
  if grep -q "\"$want\"\]" "$dir/stale.json" && grep -q '"alertstate":"pending"' "$dir/pending.json"; then
    seen=yes
    break
  fi
  sleep 0.1
done
echo "$seen" >"$dir/seen"
# Two more evaluations, so every rule group has seen the scraped series (an alert like
# "no target at all" is pending from the evaluation before the first scrape).
sleep 2
q 'portdrift_findings' >"$dir/findings.json"
q 'portdrift_findings_by_backend' >"$dir/by_backend.json"
q 'up{job="portdrift"}' >"$dir/up.json"
q 'count(portdrift_finding)' >"$dir/detail_count.json"
q 'sum(portdrift_finding) + sum(portdrift_findings_not_detailed)' >"$dir/detail_total.json"
curl -s "$api/alerts" >"$dir/alerts.json"
curl -s "$api/rules" >"$dir/rules.json"
kill -TERM "$agent" "$prom"
wait "$agent" "$prom"
exit 0
"#;

/// Prometheus's answer to an instant query: each sample's labels and value.
fn samples(dir: &Path, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let answer: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {text}"));
    assert_eq!(answer["status"], "success", "{name}: {text}");
    answer["data"]["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{name}: no result: {text}"))
        .iter()
        .map(|s| {
            let labels = s["metric"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            let value = s["value"][1].as_str().unwrap().parse().unwrap();
            (labels, value)
        })
        .collect()
}

/// The one value of a query that answers with one sample.
fn scalar(dir: &Path, name: &str) -> f64 {
    let all = samples(dir, name);
    assert_eq!(all.len(), 1, "{name}: {all:?}");
    all[0].1
}

/// How many of the bundle's expected findings have each value of `fields`.
fn expected_counts(bundle: &Path, fields: &[&str]) -> BTreeMap<Vec<String>, usize> {
    let text = std::fs::read_to_string(bundle.join("expected.json")).unwrap();
    let expected: Value = serde_json::from_str(&text).unwrap();
    let mut counts = BTreeMap::new();
    for f in expected["findings"].as_array().unwrap() {
        let key = fields
            .iter()
            .map(|k| match &f[*k] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            })
            .collect();
        *counts.entry(key).or_default() += 1;
    }
    counts
}

#[test]
fn a_real_prometheus_scrapes_the_agent_and_evaluates_the_alerts() {
    if !support::require_root("Prometheus scraping the agent in a bundle's node")
        || !support::require_tool("prometheus", "Prometheus scraping the agent")
    {
        return;
    }
    let started = Instant::now();
    let bundle = "iptables-backend-split";
    let bundle_dir = support::root().join("testdata").join(bundle);
    let node = std::fs::read_to_string(bundle_dir.join("node"))
        .unwrap()
        .trim()
        .to_string();
    let by_kind = expected_counts(&bundle_dir, &["kind"]);
    let stale = by_kind
        .get(&vec!["stale-endpoint".to_string()])
        .copied()
        .unwrap_or(0);
    assert!(stale > 0, "{bundle} is chosen for its stale endpoints");
    // Fewer than the bundle's findings, so the overflow is seen in a real scrape.
    let max_series = 2;

    let scratch = TempDir::new().unwrap();
    let dir = scratch.path();
    let rules = rules_dir().join("portdrift-alerts.yaml");
    let out = Command::new("bash")
        .arg(support::root().join("scripts/capture-testdata.sh"))
        .args(["--exec", bundle, "--", "/bin/sh", "-c", SCRIPT, "sh", PORTDRIFT])
        .arg(support::fake_apiserver_bin())
        .arg(dir)
        .arg(&node)
        .arg(&rules)
        .arg(stale.to_string())
        .arg(max_series.to_string())
        .output()
        .expect("the capture script runs");
    let logs = || {
        format!(
            "agent log:\n{}\nprometheus log:\n{}",
            std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default(),
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        )
    };
    assert!(
        out.status.success(),
        "{:?}\nstdout: {}\nstderr: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        logs()
    );
    let seen = std::fs::read_to_string(dir.join("seen")).unwrap_or_default();
    assert_eq!(
        seen.trim(),
        "yes",
        "Prometheus never answered {stale} stale-endpoint findings with the alert pending; last answers: {} {}\n{}",
        std::fs::read_to_string(dir.join("stale.json")).unwrap_or_default(),
        std::fs::read_to_string(dir.join("pending.json")).unwrap_or_default(),
        logs()
    );

    // The target is up, and every kind's gauge holds the bundle's count.
    let up = samples(dir, "up.json");
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0].1, 1.0, "{up:?}");
    let findings = samples(dir, "findings.json");
    assert_eq!(
        findings.len(),
        portdrift::heart::finding::Kind::ALL.len(),
        "a gauge for every kind: {findings:?}"
    );
    for (labels, value) in &findings {
        let want = by_kind.get(&vec![labels["kind"].clone()]).copied().unwrap_or(0);
        assert_eq!(*value, want as f64, "{labels:?}\n{}", logs());
    }

    // By kind and backend: exactly the bundle's non-zero combinations.
    let want: BTreeMap<Vec<String>, usize> = expected_counts(&bundle_dir, &["kind", "backend"])
        .into_iter()
        .map(|(mut k, n)| {
            if k[1].is_empty() {
                k[1] = "none".into();
            }
            (k, n)
        })
        .collect();
    let have: BTreeMap<Vec<String>, usize> = samples(dir, "by_backend.json")
        .into_iter()
        .map(|(l, v)| (vec![l["kind"].clone(), l["backend"].clone()], v as usize))
        .collect();
    assert_eq!(have, want);

    // The per-finding series stop at the cap; the rest are counted.
    let distinct = expected_counts(
        &bundle_dir,
        &["kind", "severity", "protocol", "port", "service", "backend"],
    )
    .len();
    assert_eq!(scalar(dir, "detail_count.json"), distinct.min(max_series) as f64);
    let total: usize = by_kind.values().sum();
    assert_eq!(scalar(dir, "detail_total.json"), total as f64);

    // The alert rules evaluate without errors against the real series, the finding
    // alerts are pending, and a healthy agent trips none of the agent alerts.
    let rules: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("rules.json")).unwrap()).unwrap();
    let mut evaluated = 0;
    for group in rules["data"]["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            assert_eq!(rule["health"], "ok", "{rule}");
            evaluated += 1;
        }
    }
    assert!(evaluated >= 10, "{rules}");
    let alerts: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("alerts.json")).unwrap()).unwrap();
    let alerts: Vec<&str> = alerts["data"]["alerts"]
        .as_array()
        .unwrap_or_else(|| panic!("no alerts in {alerts}"))
        .iter()
        .map(|a| a["labels"]["alertname"].as_str().unwrap())
        .collect();
    for alert in [
        "PortdriftStaleEndpoint",
        "PortdriftBackendSplit",
        "PortdriftStaleNodePortRule",
    ] {
        assert!(alerts.contains(&alert), "{alert} not pending: {alerts:?}");
    }
    for alert in [
        "PortdriftAgentDown",
        "PortdriftAPINotSynced",
        "PortdriftScansStalled",
        "PortdriftAgentAbsent",
    ] {
        assert!(!alerts.contains(&alert), "{alert} is pending: {alerts:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the test took {:?}",
        started.elapsed()
    );
}
