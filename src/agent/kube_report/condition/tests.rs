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

const BEAT: Duration = Duration::from_secs(300);

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
fn patches_on_change_and_heartbeat_and_keeps_the_transition_time() {
    let drift = ConditionSummary {
        drift: true,
        message: "1 critical".into(),
    };
    let mut t = ConditionTracker::default();
    let first = t.due(&drift, at(0), BEAT).expect("nothing published yet");
    assert_eq!(first.last_transition_time, Some(Time(at(0))));
    t.accepted(&drift, &first);
    assert!(
        t.due(&drift, at(10), BEAT).is_none(),
        "unchanged, heartbeat not due"
    );
    assert_eq!(t.until_heartbeat(at(10), BEAT), Duration::from_secs(290));

    let beat = t.due(&drift, at(300), BEAT).expect("heartbeat due");
    assert_eq!(beat.last_transition_time, Some(Time(at(0))));
    assert_eq!(beat.last_heartbeat_time, Some(Time(at(300))));
    t.accepted(&drift, &beat);

    // A new message with the same status: patched at once, the transition kept.
    let worse = ConditionSummary {
        drift: true,
        message: "2 critical".into(),
    };
    let changed = t.due(&worse, at(301), BEAT).expect("message changed");
    assert_eq!(changed.last_transition_time, Some(Time(at(0))));
    t.accepted(&worse, &changed);

    let clear = summarize(&[]);
    let cleared = t.due(&clear, at(400), BEAT).expect("status changed");
    assert_eq!(cleared.status, "False");
    assert_eq!(cleared.last_transition_time, Some(Time(at(400))));
}

#[test]
fn a_restart_keeps_the_nodes_transition_time() {
    let existing = NodeCondition {
        type_: CONDITION_TYPE.into(),
        status: "False".into(),
        reason: Some(REASON_NO_DRIFT.into()),
        message: Some(summarize(&[]).message),
        last_transition_time: Some(Time(at(-1000))),
        last_heartbeat_time: Some(Time(at(-10))),
    };
    let other = NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        ..existing.clone()
    };
    let mut t = ConditionTracker::default();
    t.seed(&[other, existing]);
    assert!(
        t.due(&summarize(&[]), at(0), BEAT).is_none(),
        "fresh and unchanged"
    );
    let beat = t.due(&summarize(&[]), at(290), BEAT).expect("heartbeat");
    assert_eq!(beat.last_transition_time, Some(Time(at(-1000))));
}
