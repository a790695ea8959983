use super::*;
use crate::heart::acceptance::Origin;
use crate::heart::finding::Kind;
use crate::heart::outcome::{ScanInput, run_scan};

fn at(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

#[test]
fn a_bad_file_keeps_the_last_good_acceptances_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("accept.json");
    std::fs::write(
        &path,
        br#"{"accept": [{"kind": "squatter", "port": "tcp/30080", "reason": "edge proxy"}]}"#,
    )
    .unwrap();
    let mut file = AcceptanceFile::open(path.clone());
    assert_eq!(file.current().accept.len(), 1);
    assert_eq!(file.status().status, InputState::Ok);
    assert!(!file.reload(), "an unchanged file is not a change");

    std::fs::write(&path, br#"{"accept": [{"kind": "squatter"}]}"#).unwrap();
    assert!(file.reload());
    assert_eq!(
        file.current().accept.len(),
        1,
        "the last good entries still apply"
    );
    let status = file.status();
    assert_eq!(status.status, InputState::Error);
    assert!(status.notes[0].contains("reason"), "{:?}", status.notes);
    assert!(status.notes[1].contains("still applies"), "{:?}", status.notes);

    std::fs::remove_file(&path).unwrap();
    assert!(file.reload());
    assert_eq!(file.current().accept.len(), 1);
    assert!(file.status().notes[0].contains("cannot be read"));

    std::fs::write(&path, br#"{"accept": []}"#).unwrap();
    assert!(file.reload());
    assert!(
        file.current().accept.is_empty(),
        "a good file replaces the last one"
    );
    assert_eq!(file.status().status, InputState::Ok);
}

#[test]
fn a_file_bad_from_the_start_applies_nothing_and_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("accept.json");
    std::fs::write(&path, b"accept: everything").unwrap();
    let file = AcceptanceFile::open(path);
    assert!(file.current().accept.is_empty());
    let status = file.status();
    assert_eq!(status.status, InputState::Error);
    assert!(status.notes[1].contains("counts"), "{:?}", status.notes);
}

fn report_using(acceptance: &Acceptance, matched: bool) -> ScanReport {
    let mut report = run_scan(ScanInput::default(), &Default::default());
    report.acceptance_use = vec![(acceptance.clone(), matched)];
    report
}

#[test]
fn an_acceptance_that_accepts_nothing_for_a_week_becomes_an_info_finding() {
    let acceptance = Acceptance {
        kind: Some(Kind::Squatter),
        reason: "edge proxy".into(),
        origin: Origin::File(1),
        ..Acceptance::default()
    };
    let mut memory = AcceptanceMemory::default();
    let idle = |report: &ScanReport| {
        report
            .findings
            .iter()
            .filter(|f| f.kind == Kind::IdleAcceptance)
            .count()
    };

    let mut report = report_using(&acceptance, false);
    memory.after_scan(&mut report, at("2026-12-01T00:00:00Z"));
    assert_eq!(idle(&report), 0);
    let mut report = report_using(&acceptance, false);
    memory.after_scan(&mut report, at("2026-12-07T23:00:00Z"));
    assert_eq!(idle(&report), 0, "six days and 23 hours is not a week");
    let mut report = report_using(&acceptance, false);
    memory.after_scan(&mut report, at("2026-12-08T00:00:00Z"));
    assert_eq!(idle(&report), 1);
    assert_eq!(report.summary.info, 1);
    assert!(report.findings[0].message.contains("acceptances entry 1"));

    // Accepting something restarts the clock.
    let mut report = report_using(&acceptance, true);
    memory.after_scan(&mut report, at("2026-12-09T00:00:00Z"));
    assert_eq!(idle(&report), 0);
    let mut report = report_using(&acceptance, false);
    memory.after_scan(&mut report, at("2026-12-10T00:00:00Z"));
    assert_eq!(idle(&report), 0);
}

#[test]
fn an_expired_acceptance_is_not_reported_idle() {
    let acceptance = Acceptance {
        kind: Some(Kind::Squatter),
        reason: "migration".into(),
        expires: Some(at("2026-12-02T00:00:00Z")),
        ..Acceptance::default()
    };
    let mut memory = AcceptanceMemory::default();
    for day in ["2026-12-01T00:00:00Z", "2026-12-20T00:00:00Z"] {
        let mut report = report_using(&acceptance, false);
        memory.after_scan(&mut report, at(day));
        assert!(report.findings.is_empty(), "{:?}", report.findings);
    }
}
