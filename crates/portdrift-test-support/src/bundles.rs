//! A bundle's expected findings and the reports scanned from it: which bundles can be
//! built again from their sources, a report's sources, and findings compared as a
//! multiset of their identities and severities.

use std::path::Path;

use portdrift::heart::finding::{Finding, FindingId, Severity};

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
