//! Every finding portdrift calls critical pages someone: a `promtool test rules` file is
//! generated from the finding kinds the code knows (`Kind::ALL`), holding each kind's
//! `portdrift_findings_by_severity{severity="critical"}` for 45 minutes, and the real
//! promtool must see exactly one alert fire for it, with its `kind` and
//! `severity="critical"` labels: the kind's own alert where one names it, else
//! `PortdriftCriticalFinding`. So a kind added to the code that no alert pages for, or
//! one that pages twice, fails here. Warnings and info findings never page through the
//! generic alert.
//!
//! The negative cases run the same check on rules with a gap made on purpose, and it
//! must fail naming the kind.
//!
//! Needs promtool (Debian package `prometheus`); with `CI` set it is not skipped.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use portdrift::heart::finding::Kind;
use serde_json::{Value, json};
use tempfile::TempDir;

/// The alert that pages for a critical finding of any kind without an alert of its own.
const GENERIC: &str = "PortdriftCriticalFinding";

/// The rules file as shipped.
fn shipped_rules() -> Value {
    let path = support::root().join("deploy/prometheus/portdrift-alerts.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every alerting rule of `rules`, mutable.
fn alert_rules(rules: &mut Value) -> Vec<&mut Value> {
    rules["groups"]
        .as_array_mut()
        .expect("groups")
        .iter_mut()
        .flat_map(|g| g["rules"].as_array_mut().expect("rules").iter_mut())
        .filter(|r| r.get("alert").is_some())
        .collect()
}

/// The kinds an alert's expression names with `kind="..."` (an alert of their own).
fn kinds_named(expr: &str) -> Vec<String> {
    expr.split("kind=\"")
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(kind, _)| kind.to_string()))
        .collect()
}

/// Which alert must page for a critical finding of each kind, as `rules` says: the one
/// alert whose expression names the kind, else the generic one.
fn expected_pages(rules: &Value, kinds: &[&str]) -> BTreeMap<String, String> {
    let mut own: BTreeMap<String, String> = BTreeMap::new();
    let mut rules = rules.clone();
    for rule in alert_rules(&mut rules) {
        let alert = rule["alert"].as_str().unwrap().to_string();
        for kind in kinds_named(rule["expr"].as_str().unwrap_or_default()) {
            if let Some(other) = own.insert(kind.clone(), alert.clone()) {
                panic!("{kind} has two alerts of its own: {other} and {alert}");
            }
        }
    }
    kinds
        .iter()
        .map(|kind| {
            let alert = own.get(*kind).cloned().unwrap_or_else(|| GENERIC.to_string());
            (kind.to_string(), alert)
        })
        .collect()
}

/// The `promtool test rules` file for `kinds` against `rules_file`: per kind, its
/// critical series for an hour, and at 45 minutes every alert of `alerts` evaluated:
/// the expected one fires with the series' labels, every other stays silent. Then one
/// group with every kind's warning and info series, where the generic alert never fires.
fn generated_test(rules_file: &Path, alerts: &[String], pages: &BTreeMap<String, String>) -> String {
    let labels = |kind: &str, severity: &str| {
        format!(
            "portdrift_findings_by_severity{{job=\"portdrift\",instance=\"node-a:9741\",node=\"node-a\",kind=\"{kind}\",severity=\"{severity}\"}}"
        )
    };
    // A scraped target, so that the agent's own alerts (PortdriftAgentAbsent) stay quiet.
    let up =
        json!({"series": "up{job=\"portdrift\",instance=\"node-a:9741\",node=\"node-a\"}", "values": "1x60"});
    let mut groups = Vec::new();
    for (kind, paging) in pages {
        let cases: Vec<Value> = alerts
            .iter()
            .map(|alert| {
                let fired = if alert == paging {
                    json!([{"exp_labels": {
                        "job": "portdrift", "instance": "node-a:9741", "node": "node-a",
                        "kind": kind, "severity": "critical",
                    }}])
                } else {
                    json!([])
                };
                json!({"eval_time": "45m", "alertname": alert, "exp_alerts": fired})
            })
            .collect();
        groups.push(json!({
            "name": format!("a critical {kind} finding pages through {paging} alone"),
            "interval": "1m",
            "input_series": [up.clone(), {"series": labels(kind, "critical"), "values": "1x60"}],
            "alert_rule_test": cases,
        }));
    }
    let mut quiet = vec![up];
    for kind in pages.keys() {
        for severity in ["warning", "info"] {
            quiet.push(json!({"series": labels(kind, severity), "values": "1x60"}));
        }
    }
    groups.push(json!({
        "name": "warnings and info findings do not page through the generic alert",
        "interval": "1m",
        "input_series": quiet,
        "alert_rule_test": [{"eval_time": "45m", "alertname": GENERIC, "exp_alerts": []}],
    }));
    let test = json!({
        "rule_files": [rules_file.to_str().expect("a UTF-8 path")],
        "evaluation_interval": "1m",
        "tests": groups,
    });
    serde_yaml_ng::to_string(&test).unwrap()
}

/// Runs the generated test for every kind of the code against `rules` (with its
/// annotations left out: which alert fires, with which labels, is what is checked;
/// the annotations have their own cases in deploy/prometheus/portdrift-alerts_test.yaml).
/// Whether promtool passed it, and what it said.
fn check_pages(rules: &Value, kinds: &[&str]) -> (bool, String) {
    let mut rules = rules.clone();
    let mut alerts = Vec::new();
    for rule in alert_rules(&mut rules) {
        rule.as_object_mut().unwrap().remove("annotations");
        alerts.push(rule["alert"].as_str().unwrap().to_string());
    }
    let pages = expected_pages(&rules, kinds);
    let scratch = TempDir::new().unwrap();
    let rules_file = scratch.path().join("rules.yaml");
    std::fs::write(&rules_file, serde_yaml_ng::to_string(&rules).unwrap()).unwrap();
    let test_file = scratch.path().join("pages_test.yaml");
    std::fs::write(&test_file, generated_test(&rules_file, &alerts, &pages)).unwrap();
    support::promtool::run(&["test", "rules", test_file.to_str().unwrap()])
}

fn every_kind() -> Vec<&'static str> {
    Kind::ALL.iter().map(|k| k.as_str()).collect()
}

/// The generic alert's expression, to make a gap in it on purpose.
fn generic_expr(rules: &mut Value) -> &mut Value {
    alert_rules(rules)
        .into_iter()
        .find(|r| r["alert"] == GENERIC)
        .map(|r| &mut r["expr"])
        .expect("the generic alert")
}

#[test]
fn every_kind_of_critical_finding_pages_exactly_once() {
    if !support::require_tool("promtool", "the generated paging test") {
        return;
    }
    let kinds = every_kind();
    assert!(kinds.len() >= 14, "{kinds:?}");
    let rules = shipped_rules();
    let pages = expected_pages(&rules, &kinds);
    // The issue's three kinds page through the generic alert.
    for kind in ["missing-endpoint", "hostport-conflict", "nodeport-collision"] {
        assert_eq!(pages[kind], GENERIC, "{kind}");
    }
    let (ok, said) = check_pages(&rules, &kinds);
    assert!(ok, "a critical finding that does not page exactly once:\n{said}");
}

/// The check bites: a kind the generic alert leaves out, as a new kind would be left out
/// by an alert that lists the kinds it pages for, fails it, naming the kind.
#[test]
fn a_kind_that_pages_nobody_fails_the_check() {
    if !support::require_tool("promtool", "the generated paging test") {
        return;
    }
    let mut rules = shipped_rules();
    let expr = generic_expr(&mut rules);
    let gap = expr.as_str().unwrap().replace(
        "severity=\"critical\",",
        "severity=\"critical\",kind!=\"hostport-conflict\",",
    );
    *expr = Value::String(gap);
    let (ok, said) = check_pages(&rules, &every_kind());
    assert!(
        !ok,
        "the check passed though hostport-conflict pages nobody:\n{said}"
    );
    assert!(
        said.contains("a critical hostport-conflict finding pages"),
        "{said}"
    );
    // A kind the code does not know yet, and that no alert of its own names, is paged
    // by the shipped rules all the same.
    let mut kinds = every_kind();
    kinds.push("a-kind-added-later");
    let (ok, said) = check_pages(&shipped_rules(), &kinds);
    assert!(ok, "{said}");
}

/// And twice is as wrong as never: a generic alert that also takes the kinds with an
/// alert of their own pages them twice.
#[test]
fn a_kind_that_pages_twice_fails_the_check() {
    if !support::require_tool("promtool", "the generated paging test") {
        return;
    }
    let mut rules = shipped_rules();
    *generic_expr(&mut rules) =
        json!("portdrift_findings_by_severity{job=\"portdrift\",severity=\"critical\"} > 0");
    let (ok, said) = check_pages(&rules, &every_kind());
    assert!(!ok, "the check passed though stale-endpoint pages twice:\n{said}");
    assert!(said.contains("a critical stale-endpoint finding pages"), "{said}");
}

#[test]
fn kinds_named_reads_the_kind_matchers() {
    assert_eq!(
        kinds_named(r#"x{job="portdrift",kind="stale-endpoint",severity!="info"} > 0"#),
        ["stale-endpoint"]
    );
    assert!(kinds_named(r#"x{kind!~"a|b",severity="critical"}"#).is_empty());
}
