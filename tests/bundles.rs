//! Every shipped incident bundle gives exactly the findings its `expected.json` lists,
//! through the real binary, in both output formats.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::path::Path;

fn bundles() -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<_> = std::fs::read_dir(support::root().join("testdata"))
        .expect("testdata/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("expected.json").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn check_bundle(dir: &Path) -> Result<(), String> {
    let (code, report) = support::scan_json(dir, &[]);
    support::compare_with_expected(dir, &report)?;
    let got = report["findings"].as_array().cloned().unwrap_or_default();
    let actionable = got
        .iter()
        .any(|f| f["severity"] == "critical" || f["severity"] == "warning");
    if code != i32::from(actionable) {
        return Err(format!(
            "{}: exit status {code}, expected {}",
            dir.display(),
            i32::from(actionable)
        ));
    }
    for f in &got {
        if f["message"].as_str().is_none_or(str::is_empty) {
            return Err(format!("{}: a finding without a message: {f}", dir.display()));
        }
    }
    Ok(())
}

#[test]
fn every_bundle_gives_exactly_its_expected_findings() {
    let dirs = bundles();
    assert!(
        dirs.len() >= 8,
        "expected the shipped incident bundles, found {}",
        dirs.len()
    );
    let failures: Vec<String> = dirs.iter().filter_map(|d| check_bundle(d).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_text_report_names_every_finding() {
    for dir in bundles() {
        let out = support::portdrift(&["scan", "--from", dir.to_str().unwrap()]);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{}: {:?}",
            dir.display(),
            out
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let (_, report) = support::scan_json(&dir, &[]);
        for f in report["findings"].as_array().unwrap() {
            let kind = f["kind"].as_str().unwrap();
            assert!(text.contains(kind), "{}: text report lacks {kind}", dir.display());
        }
        assert!(text.contains("sources:"), "{}", dir.display());
    }
}
