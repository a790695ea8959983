//! The JSON contract (`portdrift.io/v1`, docs/scan.md): every document carries the
//! envelope, every finding every field, and a finding's id names the same drift in
//! every scan.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

const FINDING_FIELDS: [&str; 21] = [
    "id",
    "kind",
    "severity",
    "protocol",
    "port",
    "family",
    "backend",
    "service",
    "service_port",
    "services",
    "ports",
    "target",
    "rule",
    "rule_source",
    "process",
    "inode",
    "pending_seconds",
    "on_stale_cluster_state",
    "message",
    "evidence",
    "accepted",
];
const SOURCE_FIELDS: [&str; 8] = [
    "source", "status", "origin", "backend", "family", "items", "unparsed", "notes",
];

fn bundles() -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<_> = std::fs::read_dir(support::root().join("testdata"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("cluster.json").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn assert_envelope(doc: &Value, kind: &str) {
    assert_eq!(doc["apiVersion"], "portdrift.io/v1", "{doc:#}");
    assert_eq!(doc["kind"], kind, "{doc:#}");
    assert_eq!(doc["portdrift_version"], env!("CARGO_PKG_VERSION"));
    let at = doc["generated_at"].as_str().unwrap_or_else(|| panic!("{doc:#}"));
    assert!(at.parse::<jiff::Timestamp>().is_ok() && at.ends_with('Z'), "{at}");
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

#[test]
fn every_finding_of_every_bundle_has_every_field_and_a_stable_id() {
    let mut kinds = BTreeSet::new();
    for dir in bundles() {
        let (_, first) = support::scan_json(&dir, &[]);
        let (_, again) = support::scan_json(&dir, &[]);
        assert_envelope(&first, "ScanReport");
        let findings = first["findings"].as_array().unwrap();
        let mut ids: HashMap<&str, &Value> = HashMap::new();
        for f in findings {
            assert_eq!(
                keys(f),
                BTreeSet::from(FINDING_FIELDS),
                "{}: {f:#}",
                dir.display()
            );
            kinds.insert(f["kind"].as_str().unwrap().to_string());
            let id = f["id"].as_str().unwrap();
            assert!(
                id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()),
                "{id}"
            );
            if let Some(other) = ids.insert(id, f) {
                // Two findings may share an id only when they are the same drift.
                for k in [
                    "kind", "backend", "family", "protocol", "port", "service", "target",
                ] {
                    assert_eq!(other[k], f[k], "{}: id {id} names two drifts", dir.display());
                }
            }
        }
        let again_ids: Vec<&Value> = again["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| &f["id"])
            .collect();
        let first_ids: Vec<&Value> = findings.iter().map(|f| &f["id"]).collect();
        assert_eq!(
            first_ids,
            again_ids,
            "{}: ids differ between two scans",
            dir.display()
        );
        for s in first["sources"].as_array().unwrap() {
            assert_eq!(keys(s), BTreeSet::from(SOURCE_FIELDS), "{}: {s:#}", dir.display());
        }
    }
    assert!(kinds.len() >= 8, "the bundles cover {kinds:?}");
}

#[test]
fn ports_and_lint_documents_carry_the_envelope() {
    let cluster = support::root().join("testdata/views/cluster.json");
    let out = support::portdrift(&[
        "ports",
        "--cluster-state",
        cluster.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_envelope(&serde_json::from_slice(&out.stdout).unwrap(), "PortAllocation");
    let out = support::portdrift(&["lint", "--format", "json", cluster.to_str().unwrap()]);
    assert_envelope(&serde_json::from_slice(&out.stdout).unwrap(), "LintReport");
}
