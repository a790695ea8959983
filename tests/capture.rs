//! The shipped bundles are real: each one is captured again from its sources, in a
//! private network namespace with the real iptables-restore / nft / sockets, and the
//! fresh capture gives exactly the expected findings. Needs root (CI runs as root and
//! must not skip this).

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::process::Command;

#[test]
fn every_bundle_recaptured_from_real_netfilter_gives_its_expected_findings() {
    if !support::require_root("bundle recapture") {
        return;
    }
    let testdata = support::root().join("testdata");
    let mut bundles: Vec<_> = std::fs::read_dir(&testdata)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| support::built_from_sources(p))
        .collect();
    bundles.sort();
    assert!(bundles.len() >= 8, "found {} bundles with sources", bundles.len());
    let scratch = tempfile::TempDir::new().unwrap();
    let mut failures = Vec::new();
    for bundle in &bundles {
        let name = bundle.file_name().unwrap();
        let copy = scratch.path().join(name);
        // Only the inputs: the captured files must come from this run.
        std::fs::create_dir_all(&copy).unwrap();
        for input in ["source", "cluster.json", "node", "expected.json"] {
            let status = Command::new("cp")
                .arg("-r")
                .arg(bundle.join(input))
                .arg(copy.join(input))
                .status();
            assert!(
                status.is_ok_and(|s| s.success()),
                "copying {input} of {}",
                bundle.display()
            );
        }
        let out = Command::new("bash")
            .arg(support::root().join("scripts/capture-testdata.sh"))
            .arg(&copy)
            .output()
            .expect("the capture script runs");
        assert!(
            out.status.success(),
            "capturing {}: {}\n{}",
            name.to_string_lossy(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let (_, report) = support::scan_json(&copy, &[]);
        if let Err(e) = support::compare_with_expected(&copy, &report) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
