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
    let applied = list.apply(&mut findings, at("2026-12-05T00:00:00Z"), None);
    assert!(applied.expired.is_empty());
    assert_eq!(applied.matched, [true]);
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
        list.apply(&mut findings.clone(), at("2026-11-30T00:00:00Z"), None)
            .expired
            .is_empty()
    );
    let expired = list
        .apply(&mut findings, at("2026-12-02T00:00:00Z"), None)
        .expired;
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

#[test]
fn a_node_selector_scopes_an_entry_to_the_nodes_it_selects() {
    let list = Acceptances::parse(
        br#"{"accept": [{"kind": "squatter", "node_selector": "node-role.kubernetes.io/edge,zone!=b",
             "reason": "edge nodes run haproxy on 30080"}]}"#,
    )
    .unwrap();
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let accepted_on = |node: Option<&BTreeMap<String, String>>| {
        let mut findings = vec![squatter(30080, "haproxy")];
        let applied = list.apply(&mut findings, at("2026-12-05T00:00:00Z"), node);
        (findings[0].accepted.is_some(), applied.notes)
    };
    let edge = labels(&[("node-role.kubernetes.io/edge", ""), ("zone", "a")]);
    assert_eq!(accepted_on(Some(&edge)), (true, vec![]));
    let edge_b = labels(&[("node-role.kubernetes.io/edge", ""), ("zone", "b")]);
    assert!(!accepted_on(Some(&edge_b)).0);
    let worker = labels(&[("zone", "a")]);
    assert!(!accepted_on(Some(&worker)).0);
    // Unknown labels: not applied, and said.
    let (accepted, notes) = accepted_on(None);
    assert!(!accepted);
    assert!(notes[0].contains("labels are not known"), "{notes:?}");

    let err = Acceptances::parse(
        br#"{"accept": [{"kind": "squatter", "node_selector": "a in (b)", "reason": "x"}]}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("not a node selector"), "{err}");
}

#[test]
fn a_services_annotation_accepts_only_its_own_findings_and_needs_a_reason() {
    let annotations = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let stated = service_acceptances(
        "shop",
        "web",
        Some(&annotations(&[
            (ANNOTATION_ACCEPT, "missing-endpoint, squatter"),
            (ANNOTATION_REASON, "kept broken until the migration"),
        ])),
    )
    .unwrap();
    assert_eq!(stated.len(), 2);
    let list = Acceptances { accept: stated };
    let mut own = squatter(30080, "nc");
    own.service = Some("shop/web".into());
    let mut other = squatter(30081, "nc");
    other.service = Some("shop/cart".into());
    let mut findings = vec![own, other];
    list.apply(&mut findings, at("2026-12-05T00:00:00Z"), None);
    assert!(findings[0].accepted.is_some() && findings[1].accepted.is_none());
    assert!(
        findings[0]
            .accepted
            .as_ref()
            .unwrap()
            .by
            .contains("Service shop/web")
    );

    for (pairs, says) in [
        (&[(ANNOTATION_ACCEPT, "squatter")][..], "without a"),
        (
            &[(ANNOTATION_ACCEPT, "squater"), (ANNOTATION_REASON, "typo")][..],
            "not a finding kind",
        ),
        (
            &[
                (ANNOTATION_ACCEPT, "squatter"),
                (ANNOTATION_REASON, "x"),
                ("portdrift.io/accept-expires", "next week"),
            ][..],
            "RFC 3339",
        ),
    ] {
        let err = service_acceptances("shop", "web", Some(&annotations(pairs))).unwrap_err();
        assert!(err.contains(says), "{err}");
    }
    assert!(service_acceptances("shop", "web", None).unwrap().is_empty());
}
