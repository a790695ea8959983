//! The JSON contract's schema (`docs/schema/scan-report.json`): generated from the
//! types that write the JSON, checked in, and every report the tool writes for the
//! shipped bundles validates against it with the real `check-jsonschema`; a report that
//! breaks the contract does not. (The agent's `/findings` is validated in
//! tests/agent_acceptance.rs, where a running agent serves it.)

mod support;

use std::path::{Path, PathBuf};

use tempfile::TempDir;

#[test]
fn the_checked_in_schema_is_what_the_types_generate() {
    let out = support::portdrift(&["dev", "scan-report-schema"]);
    assert!(out.status.success());
    let now = String::from_utf8(out.stdout).unwrap();
    let checked_in = std::fs::read_to_string(support::schema::schema_file("scan-report")).unwrap_or_default();
    assert!(
        now == checked_in,
        "docs/schema/scan-report.json is not what the types generate: run\n  cargo run --release -- dev scan-report-schema > docs/schema/scan-report.json"
    );
    let schema: serde_json::Value = serde_json::from_str(&now).unwrap();
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    // Enumerations are closed, and every key is required (present, null when it does
    // not apply).
    let finding = &schema["$defs"]["Finding"];
    for key in ["id", "kind", "severity", "backend", "accepted", "process"] {
        assert!(
            finding["required"].as_array().unwrap().contains(&key.into()),
            "{key} is not required: {finding:#}"
        );
    }
}

/// Every directory under testdata/ (and testdata/wild/) that `scan --from` reads.
fn bundles() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for top in ["testdata", "testdata/wild"] {
        for entry in std::fs::read_dir(support::root().join(top)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && path.file_name().is_some_and(|n| n != "wild" && n != "views") {
                dirs.push(path);
            }
        }
    }
    dirs.sort();
    dirs
}

#[test]
fn every_bundles_report_follows_the_schema() {
    let scratch = TempDir::new().unwrap();
    let mut written = Vec::new();
    for (i, bundle) in bundles().iter().enumerate() {
        let out = support::portdrift(&["scan", "--from", bundle.to_str().unwrap(), "--format", "json"]);
        // 2: a bundle refused whole (a wild paste that is no dump) prints no report.
        if out.status.code() == Some(2) {
            continue;
        }
        let path = scratch.path().join(format!("{i}.json"));
        std::fs::write(&path, &out.stdout).unwrap();
        written.push(path);
    }
    assert!(written.len() >= 40, "only {} bundles scanned", written.len());
    let documents: Vec<&Path> = written.iter().map(PathBuf::as_path).collect();
    if let Some(result) = support::schema::check("scan-report", &documents) {
        result.unwrap_or_else(|said| panic!("{said}"));
    }
}

/// How a test document breaks the contract.
type Breaks = fn(&mut serde_json::Value);

#[test]
fn a_report_that_breaks_the_contract_is_rejected() {
    let (_, report) = support::scan_json(&support::root().join("testdata/haproxy-squatter"), &[]);
    assert!(!report["findings"].as_array().unwrap().is_empty());
    let scratch = TempDir::new().unwrap();
    let broken: [(&str, Breaks); 4] = [
        ("an unknown severity", |r| {
            r["findings"][0]["severity"] = "urgent".into()
        }),
        ("no finding id", |r| {
            r["findings"][0].as_object_mut().unwrap().remove("id");
        }),
        ("a key left out", |r| {
            r["findings"][0].as_object_mut().unwrap().remove("backend");
        }),
        ("another contract", |r| r["apiVersion"] = "portdrift.io/v2".into()),
    ];
    for (what, breaks) in broken {
        let mut doc = report.clone();
        breaks(&mut doc);
        let path = scratch.path().join("broken.json");
        std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
        if let Some(result) = support::schema::check("scan-report", &[&path]) {
            assert!(result.is_err(), "{what} passed the schema");
        }
    }
}
