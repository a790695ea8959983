use super::*;

fn kinds(report: &AgentReport) -> Vec<Result<&str, &str>> {
    report
        .findings
        .iter()
        .map(|f| f.as_ref().map(|f| f.kind.as_str()).map_err(String::as_str))
        .collect()
}

#[test]
fn a_document_is_its_findings_each_read_on_its_own() {
    let text = r#"{"apiVersion": "portdrift.io/v1", "kind": "ScanReport", "later": {"x": 1},
        "findings": [{"kind": "squatter", "severity": "warning", "port": 30080},
                     {"kind": "port-hijack", "severity": "critical"},
                     {"kind": "orphan-chain"},
                     7],
        "coverage": {"complete": true, "not_checked": []}}"#;
    let report = agent_report(text).unwrap();
    assert_eq!(
        kinds(&report),
        [
            Ok("squatter"),
            Err("kind \"port-hijack\""),
            Err("no severity"),
            Err("no kind")
        ]
    );
    assert_eq!(report.incomplete, None);
}

#[test]
fn an_incomplete_coverage_says_why() {
    let read = |coverage: &str| {
        agent_report(&format!(r#"{{"findings": [], "coverage": {coverage}}}"#))
            .unwrap()
            .incomplete
    };
    assert_eq!(
        read(r#"{"complete": false, "not_checked": ["no sockets", "no nat"]}"#).as_deref(),
        Some("no sockets")
    );
    assert_eq!(
        read(r#"{"complete": false, "not_checked": [3]}"#).as_deref(),
        Some("coverage.complete is false")
    );
    assert_eq!(
        read(r#"{"complete": false}"#).as_deref(),
        Some("coverage.complete is false")
    );
    // What is not a `false` says nothing of the check.
    for coverage in [
        r#"{"complete": "no"}"#,
        "null",
        "[false]",
        r#"{"complete": null}"#,
    ] {
        assert_eq!(read(coverage), None, "{coverage}");
    }
    assert_eq!(agent_report(r#"{"findings": []}"#).unwrap().incomplete, None);
}

#[test]
fn json_without_a_findings_list_and_what_is_not_json_are_no_answer() {
    for text in [
        r#"{"status": "not findings"}"#,
        r#"{"findings": 5}"#,
        r#"{"findings": null}"#,
        r#"{"findings": {"kind": "squatter"}}"#,
        "[]",
        r#"[[{"kind": "squatter", "severity": "warning"}]]"#,
        r#""findings""#,
        "null",
    ] {
        assert_eq!(agent_report(text), Err(NoAnswer::NoFindingsList), "{text}");
    }
    for (text, said) in [
        ("<html>", "expected value at line 1 column 1"),
        (
            r#"{"findings": []} trailing"#,
            "trailing characters at line 1 column 18",
        ),
        (r#"{"findings": [}"#, "expected value at line 1 column 15"),
    ] {
        assert_eq!(
            agent_report(text),
            Err(NoAnswer::NotJson(said.to_string())),
            "{text}"
        );
    }
}
