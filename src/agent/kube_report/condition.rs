//! The `NodePortDrift` Node condition, decided without I/O: its status and one-line
//! summary from a scan's findings, and when to patch it (on a change, or a heartbeat)
//! with which `lastTransitionTime`, as node-problem-detector keeps its conditions.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::heart::finding::{Finding, Severity};

/// The condition's `type`.
pub const CONDITION_TYPE: &str = "NodePortDrift";
/// `reason` while critical findings exist.
pub const REASON_DRIFT: &str = "NodePortDrift";
/// `reason` otherwise.
pub const REASON_NO_DRIFT: &str = "NoNodePortDrift";
/// How many ports the summary names.
const TOP_PORTS: usize = 5;

/// What the condition should say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionSummary {
    /// `True`: critical findings exist on this node.
    pub drift: bool,
    pub message: String,
}

impl ConditionSummary {
    pub fn status(&self) -> &'static str {
        if self.drift { "True" } else { "False" }
    }

    pub fn reason(&self) -> &'static str {
        if self.drift { REASON_DRIFT } else { REASON_NO_DRIFT }
    }
}

/// The condition for one scan's findings: `True` while any is critical, with their
/// counts by kind and the ports with the most of them, e.g. `2 critical NodePort
/// findings: 1 missing-rule, 1 stale-endpoint; ports tcp/30080, udp/30053`.
pub fn summarize(findings: &[Finding]) -> ConditionSummary {
    let critical: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.severity == Severity::Critical)
        .collect();
    if critical.is_empty() {
        return ConditionSummary {
            drift: false,
            message: "no critical NodePort drift on this node".into(),
        };
    }
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    let mut by_port: BTreeMap<String, usize> = BTreeMap::new();
    for f in &critical {
        *by_kind.entry(f.kind.as_str()).or_default() += 1;
        if let Some(port) = f.port {
            let protocol = f.protocol.map(|p| p.as_str()).unwrap_or("any");
            *by_port.entry(format!("{protocol}/{port}")).or_default() += 1;
        }
    }
    let kinds: Vec<String> = by_kind.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let mut message = format!(
        "{} critical NodePort finding{}: {}",
        critical.len(),
        if critical.len() == 1 { "" } else { "s" },
        kinds.join(", ")
    );
    let mut ports: Vec<(String, usize)> = by_port.into_iter().collect();
    // Most findings first; equal counts in port order (the map's), so the message is
    // stable from scan to scan and does not cause patches by itself.
    ports.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    if !ports.is_empty() {
        let shown: Vec<&str> = ports.iter().take(TOP_PORTS).map(|(p, _)| p.as_str()).collect();
        message.push_str(&format!("; ports {}", shown.join(", ")));
        if ports.len() > TOP_PORTS {
            message.push_str(&format!(" and {} more", ports.len() - TOP_PORTS));
        }
    }
    ConditionSummary { drift: true, message }
}

/// What the API holds (or was last sent).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Published {
    summary: ConditionSummary,
    transition: Timestamp,
    heartbeat: Timestamp,
}

/// Tracks the condition as last written, to decide the next patch.
#[derive(Debug, Default, Clone)]
pub struct ConditionTracker {
    published: Option<Published>,
}

impl ConditionTracker {
    /// Starts from the condition the Node already carries (from an earlier run of the
    /// agent), so that a restart keeps its `lastTransitionTime` and skips a patch that
    /// would change nothing.
    pub fn seed(&mut self, existing: &[NodeCondition]) {
        let Some(c) = existing.iter().find(|c| c.type_ == CONDITION_TYPE) else {
            return;
        };
        let (Some(transition), Some(heartbeat)) = (&c.last_transition_time, &c.last_heartbeat_time) else {
            return;
        };
        self.published = Some(Published {
            summary: ConditionSummary {
                drift: c.status == "True",
                message: c.message.clone().unwrap_or_default(),
            },
            transition: transition.0,
            heartbeat: heartbeat.0,
        });
    }

    /// The condition to patch now, if any: when there is none yet, when it changed,
    /// or when the last one is `heartbeat` old. `lastTransitionTime` moves only when
    /// the status does.
    pub fn due(&self, want: &ConditionSummary, now: Timestamp, heartbeat: Duration) -> Option<NodeCondition> {
        let transition = match &self.published {
            Some(p) if p.summary == *want && since(p.heartbeat, now) < heartbeat => return None,
            Some(p) if p.summary.drift == want.drift => p.transition,
            _ => now,
        };
        Some(NodeCondition {
            type_: CONDITION_TYPE.into(),
            status: want.status().into(),
            reason: Some(want.reason().into()),
            message: Some(want.message.clone()),
            last_transition_time: Some(Time(transition)),
            last_heartbeat_time: Some(Time(now)),
        })
    }

    /// Records a condition the API accepted.
    pub fn accepted(&mut self, want: &ConditionSummary, sent: &NodeCondition) {
        let time = |t: &Option<Time>| t.as_ref().map(|t| t.0).unwrap_or_else(Timestamp::now);
        self.published = Some(Published {
            summary: want.clone(),
            transition: time(&sent.last_transition_time),
            heartbeat: time(&sent.last_heartbeat_time),
        });
    }

    /// The status last written: `Some(true)` for `True`.
    pub fn drift(&self) -> Option<bool> {
        self.published.as_ref().map(|p| p.summary.drift)
    }

    /// How long until the next heartbeat is due (zero: now, or nothing published yet).
    pub fn until_heartbeat(&self, now: Timestamp, heartbeat: Duration) -> Duration {
        match &self.published {
            Some(p) => heartbeat.saturating_sub(since(p.heartbeat, now)),
            None => Duration::ZERO,
        }
    }
}

/// Time from `then` to `now`; zero if the clock went back.
fn since(then: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(then)).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
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
}
