use super::*;
use crate::heart::finding::Kind;
use crate::heart::model::Protocol;

fn finding(kind: Kind, severity: Severity, port: Option<u16>) -> Finding {
    let mut f = Finding::new(kind, severity, "x");
    f.port = port;
    f.protocol = port.map(|_| Protocol::Tcp);
    f
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

#[test]
fn only_critical_findings_raise_the_condition() {
    let quiet = summarize(&[
        finding(Kind::MissingEndpoint, Severity::Warning, Some(30080)),
        finding(Kind::OrphanChain, Severity::Info, None),
    ]);
    assert!(!quiet.drift);
    assert_eq!((quiet.status(), quiet.reason()), ("False", "NoNodePortDrift"));
    let drift = summarize(&[
        finding(Kind::StaleEndpoint, Severity::Critical, Some(30080)),
        finding(Kind::StaleEndpoint, Severity::Critical, Some(30080)),
        finding(Kind::MissingRule, Severity::Critical, Some(30090)),
        finding(Kind::MissingEndpoint, Severity::Warning, Some(30100)),
    ]);
    assert_eq!((drift.status(), drift.reason()), ("True", "NodePortDrift"));
    assert_eq!(
        drift.message,
        "3 critical NodePort findings: 1 missing-rule, 2 stale-endpoint; ports tcp/30080, tcp/30090"
    );
}

#[test]
fn the_summary_names_at_most_five_ports() {
    let many: Vec<Finding> = (0..8)
        .map(|i| finding(Kind::MissingRule, Severity::Critical, Some(30000 + i)))
        .collect();
    let s = summarize(&many);
    assert!(s.message.ends_with("tcp/30004 and 3 more"), "{}", s.message);
    assert!(!s.message.contains('\n'));
}

#[test]
fn patches_when_the_status_changes_and_not_for_a_new_message() {
    let drift = ConditionSummary {
        drift: true,
        message: "1 critical".into(),
    };
    let mut t = ConditionTracker::default();
    let first = t.due(&drift, at(0)).expect("nothing published yet");
    assert_eq!(first.last_transition_time, Some(Time(at(0))));
    t.accepted(&drift, &first);
    assert!(t.due(&drift, at(10)).is_none(), "unchanged");
    assert!(t.due(&drift, at(3600)).is_none(), "no heartbeat");

    // A new message with the same status and reason: no patch.
    let worse = ConditionSummary {
        drift: true,
        message: "2 critical".into(),
    };
    assert!(t.due(&worse, at(301)).is_none());

    let clear = summarize(&[]);
    let cleared = t.due(&clear, at(400)).expect("status changed");
    assert_eq!(
        (cleared.status.as_str(), cleared.reason.as_deref()),
        ("False", Some(REASON_NO_DRIFT))
    );
    assert_eq!(cleared.last_transition_time, Some(Time(at(400))));
    assert_eq!(cleared.message.as_deref(), Some(clear.message.as_str()));
    t.accepted(&clear, &cleared);
    assert_eq!(t.drift(), Some(false));
}

#[test]
fn a_restart_patches_nothing_while_status_and_reason_hold() {
    let existing = NodeCondition {
        type_: CONDITION_TYPE.into(),
        status: "False".into(),
        reason: Some(REASON_NO_DRIFT.into()),
        message: Some("an older wording".into()),
        last_transition_time: Some(Time(at(-1000))),
        last_heartbeat_time: Some(Time(at(-10))),
    };
    let other = NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        ..existing.clone()
    };
    let mut t = ConditionTracker::default();
    t.seed(&[other, existing.clone()]);
    assert!(t.due(&summarize(&[]), at(0)).is_none(), "same status and reason");
    assert!(
        t.due(&summarize(&[]), at(7200)).is_none(),
        "and no heartbeat later"
    );

    // A reason another version wrote, same status: patched, the transition kept.
    let mut t = ConditionTracker::default();
    t.seed(&[NodeCondition {
        reason: Some("SomethingElse".into()),
        ..existing
    }]);
    let patched = t.due(&summarize(&[]), at(0)).expect("the reason differs");
    assert_eq!(patched.last_transition_time, Some(Time(at(-1000))));
}
