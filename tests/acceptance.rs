//! Accepting a finding (`scan --accept FILE`): the exception stays visible, marked with
//! its reason, and stops counting; nothing else on the node is hidden.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

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
    let source = support::source(&report, "acceptances");
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
    let source = support::source(&report, "acceptances");
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

/// udp-stale-endpoint (one critical stale endpoint of logging/syslog-ingest on
/// udp/30514) copied, with `edit` applied to its cluster state, scanned with `accept`
/// (None: no acceptances file).
fn scan_edited(edit: impl FnOnce(&mut serde_json::Value), accept: Option<&str>) -> (i32, serde_json::Value) {
    let dir = TempDir::new().unwrap();
    let bundle = dir.path().join("bundle");
    let from = support::root().join("testdata/udp-stale-endpoint");
    let copied = std::process::Command::new("cp")
        .args(["-a", from.to_str().unwrap(), bundle.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(copied.success());
    let path = bundle.join("cluster.json");
    let mut cluster: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    edit(&mut cluster);
    fs::write(&path, serde_json::to_vec(&cluster).unwrap()).unwrap();
    let file = dir.path().join("accept.json");
    let mut args = vec!["scan", "--from", bundle.to_str().unwrap(), "--format", "json"];
    if let Some(accept) = accept {
        fs::write(&file, accept).unwrap();
        args.extend(["--accept", file.to_str().unwrap()]);
    }
    let out = support::portdrift(&args);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), report)
}

fn annotate(cluster: &mut serde_json::Value, namespace: &str, name: &str, annotations: serde_json::Value) {
    let service = cluster["items"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|i| {
            i["kind"] == "Service" && i["metadata"]["namespace"] == namespace && i["metadata"]["name"] == name
        })
        .unwrap();
    service["metadata"]["annotations"] = annotations;
}

fn the_stale_endpoint(report: &serde_json::Value) -> &serde_json::Value {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "stale-endpoint" && f["port"] == 30514)
        .unwrap_or_else(|| panic!("{report:#}"))
}

#[test]
fn a_service_accepts_its_own_findings_with_an_annotation_and_a_reason() {
    let (code, report) = scan_edited(
        |c| {
            annotate(
                c,
                "logging",
                "syslog-ingest",
                serde_json::json!({
                    "portdrift.io/accept": "stale-endpoint",
                    "portdrift.io/accept-reason": "collector pods drained for the upgrade (OPS-7)",
                }),
            )
        },
        None,
    );
    let finding = the_stale_endpoint(&report);
    assert_eq!(
        finding["accepted"]["reason"],
        "collector pods drained for the upgrade (OPS-7)"
    );
    assert_eq!(
        finding["accepted"]["by"],
        "Service logging/syslog-ingest (portdrift.io/accept)"
    );
    assert_eq!(report["summary"]["critical"], 0, "{:#}", report["summary"]);
    assert_ne!(code, 1, "an accepted finding is not drift");

    // Another Service cannot accept it, and an annotation without a reason is not
    // applied, and says why.
    let (code, report) = scan_edited(
        |c| {
            annotate(
                c,
                "logging",
                "loki-gateway",
                serde_json::json!({"portdrift.io/accept": "stale-endpoint", "portdrift.io/accept-reason": "not ours"}),
            );
            annotate(
                c,
                "logging",
                "syslog-ingest",
                serde_json::json!({"portdrift.io/accept": "stale-endpoint"}),
            );
        },
        None,
    );
    assert_eq!(code, 1);
    assert!(the_stale_endpoint(&report)["accepted"].is_null());
    let notes = support::source(&report, "acceptances")["notes"].to_string();
    assert!(
        notes.contains(
            "Service logging/syslog-ingest: portdrift.io/accept without a portdrift.io/accept-reason"
        ),
        "{notes}"
    );
}

#[test]
fn a_node_selector_applies_an_entry_on_the_nodes_it_selects_only() {
    let accept = r#"{"accept": [{"kind": "stale-endpoint", "node_selector": "pool=syslog",
        "reason": "the syslog pool is being drained"}]}"#;
    let with_node = |pool: &'static str| {
        move |c: &mut serde_json::Value| {
            c["items"].as_array_mut().unwrap().push(serde_json::json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "worker-2", "labels": {"pool": pool}},
            }))
        }
    };
    let (_, selected) = scan_edited(with_node("syslog"), Some(accept));
    assert!(
        !the_stale_endpoint(&selected)["accepted"].is_null(),
        "{selected:#}"
    );
    let (_, other) = scan_edited(with_node("web"), Some(accept));
    assert!(the_stale_endpoint(&other)["accepted"].is_null());
    // Without the Node in the cluster state its labels are unknown: not applied, said.
    let (_, unknown) = scan_edited(|_| {}, Some(accept));
    assert!(the_stale_endpoint(&unknown)["accepted"].is_null());
    assert!(
        support::source(&unknown, "acceptances")["notes"]
            .to_string()
            .contains("labels are not known"),
        "{unknown:#}"
    );
}
