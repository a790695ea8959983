use super::*;
use crate::heart::model::ProcessInfo;

fn squatter(port: u16, name: &str) -> Finding {
    let mut f = Finding::new(Kind::Squatter, Severity::Critical, format!("{name} holds {port}"));
    f.protocol = Some(Protocol::Tcp);
    f.port = Some(port);
    f.process = Some(ProcessInfo {
        pid: 7,
        name: name.into(),
        container: None,
        pod: None,
        exe: None,
        uid: None,
        cmdline: None,
    });
    f
}

fn at(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

#[test]
fn an_entry_accepts_only_what_all_its_fields_match() {
    let list = Acceptances::parse(
        br#"{"accept": [{"kind": "squatter", "port": "tcp/30080", "process": "haproxy",
             "reason": "the edge proxy listens here by design"}]}"#,
    )
    .unwrap();
    let mut findings = vec![
        squatter(30080, "haproxy"),
        squatter(30080, "nc"),
        squatter(30081, "haproxy"),
    ];
    let expired = list.apply(&mut findings, at("2026-12-05T00:00:00Z"));
    assert!(expired.is_empty());
    let accepted: Vec<bool> = findings.iter().map(|f| f.accepted.is_some()).collect();
    assert_eq!(accepted, [true, false, false]);
    assert_eq!(
        findings[0].accepted.as_ref().unwrap().reason,
        "the edge proxy listens here by design"
    );
    assert!(!counts(&findings[0]) && counts(&findings[1]));
}

#[test]
fn an_expired_entry_accepts_nothing_and_says_so() {
    let list = Acceptances::parse(
        br#"{"accept": [{"port": "30080", "reason": "migration", "expires": "2026-12-01T00:00:00Z"}]}"#,
    )
    .unwrap();
    let mut findings = vec![squatter(30080, "haproxy")];
    assert!(
        list.apply(&mut findings.clone(), at("2026-11-30T00:00:00Z"))
            .is_empty()
    );
    let expired = list.apply(&mut findings, at("2026-12-02T00:00:00Z"));
    assert!(findings[0].accepted.is_none());
    assert_eq!(expired.len(), 1);
    assert!(
        expired[0].contains("migration") && expired[0].contains("counts again"),
        "{expired:?}"
    );
}

#[test]
fn a_file_that_could_hide_too_much_or_say_nothing_is_refused() {
    for (text, says) in [
        (
            &br#"{"accept": [{"reason": "everything"}]}"#[..],
            "matches every finding",
        ),
        (
            br#"{"accept": [{"kind": "squatter", "reason": " "}]}"#,
            "empty reason",
        ),
        (br#"{"accept": [{"kind": "squatter"}]}"#, "reason"),
        (
            br#"{"accept": [{"kind": "squater", "reason": "typo"}]}"#,
            "not an acceptances file",
        ),
        (
            br#"{"accept": [{"port": "tcp/99999", "reason": "x"}]}"#,
            "not a port",
        ),
        (
            br#"{"accept": [{"prot": "tcp/30080", "reason": "x"}]}"#,
            "unknown field",
        ),
    ] {
        let err = Acceptances::parse(text).unwrap_err().to_string();
        assert!(err.contains(says), "{err}");
    }
}
