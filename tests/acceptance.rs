//! Accepting a finding (`scan --accept FILE`): the exception stays visible, marked with
//! its reason, and stops counting; nothing else on the node is hidden.

mod support;

use std::fs;

use tempfile::TempDir;

fn scan(accept: &str, format: &str) -> (i32, String, String) {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("accept.json");
    fs::write(&file, accept).unwrap();
    let bundle = support::root().join("testdata/haproxy-squatter");
    let out = support::portdrift(&[
        "scan",
        "--from",
        bundle.to_str().unwrap(),
        "--accept",
        file.to_str().unwrap(),
        "--format",
        format,
    ]);
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The report's status of the acceptances file.
fn acceptances_source(report: &serde_json::Value) -> &serde_json::Value {
    report["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == "acceptances")
        .unwrap_or_else(|| panic!("no acceptances source: {report:#}"))
}

const EDGE: &str = r#"{"accept": [{"kind": "squatter", "port": "tcp/30080",
    "reason": "the edge haproxy listens on 30080 by design (INFRA-123)"}]}"#;

#[test]
fn an_accepted_finding_is_shown_with_its_reason_and_no_longer_counts() {
    // Without it: a critical squatter on tcp/30080 and a warning on udp/31514, exit 1.
    let (code, json, _) = scan(r#"{"accept": []}"#, "json");
    let plain: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!((code, &plain["summary"]["critical"]), (1, &1.into()));

    let (code, json, stderr) = scan(EDGE, "json");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|_| panic!("{stderr}"));
    let summary = &report["summary"];
    assert_eq!(
        (&summary["critical"], &summary["warning"], &summary["accepted"]),
        (&0.into(), &1.into(), &1.into())
    );
    // The other squatter still counts: one exception hides nothing else.
    assert_eq!(code, 1);
    let edge = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["port"] == 30080)
        .unwrap();
    assert_eq!(edge["severity"], "critical", "its severity is kept");
    assert_eq!(
        edge["accepted"]["reason"],
        "the edge haproxy listens on 30080 by design (INFRA-123)"
    );
    let source = acceptances_source(&report);
    assert_eq!((&source["status"], &source["items"]), (&"ok".into(), &1.into()));

    let (_, text, _) = scan(EDGE, "text");
    assert!(
        text.contains("0 critical, 1 warning, 0 info, 1 accepted"),
        "{text}"
    );
    assert!(text.contains("ACCEPTED squatter"), "{text}");
    assert!(
        text.contains("accepted: the edge haproxy listens on 30080 by design (INFRA-123)"),
        "{text}"
    );

    // Both accepted, on a complete check: no drift left to report, exit 0.
    let both = r#"{"accept": [{"kind": "squatter", "reason": "both daemons are ours"}]}"#;
    let (code, _, _) = scan(both, "json");
    assert_eq!(code, 0);
}

#[test]
fn an_expired_acceptance_counts_again_and_says_so() {
    let lapsed = r#"{"accept": [{"port": "tcp/30080", "reason": "until the migration",
        "expires": "2020-01-01T00:00:00Z"}]}"#;
    let (code, json, _) = scan(lapsed, "json");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!((code, &report["summary"]["critical"]), (1, &1.into()));
    let source = acceptances_source(&report);
    assert!(
        source["notes"]
            .to_string()
            .contains("expired at 2020-01-01T00:00:00Z"),
        "{source}"
    );
}

#[test]
fn a_bad_acceptances_file_is_a_clear_error_not_a_silent_drop() {
    for (bad, says) in [
        (r#"{"accept": [{"kind": "squatter"}]}"#, "reason"),
        (
            r#"{"accept": [{"reason": "all of it"}]}"#,
            "matches every finding",
        ),
        ("accept: [", "not an acceptances file"),
    ] {
        let (code, _, stderr) = scan(bad, "json");
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains("cannot use the acceptances file") && stderr.contains(says),
            "{stderr}"
        );
    }
}
