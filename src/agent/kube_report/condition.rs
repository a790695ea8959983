//! The `NodePortDrift` Node condition, decided without I/O: its status and one-line
//! summary from a scan's findings, and when to patch it (when its status or reason
//! changes) with which `lastTransitionTime`.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::heart::finding::{Finding, Severity};
use crate::heart::words::count_of;

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
        .filter(|f| f.severity == Severity::Critical && f.accepted.is_none())
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
        "{}: {}",
        count_of(critical.len(), "critical NodePort finding"),
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
    status: String,
    reason: String,
    transition: Option<Timestamp>,
}

/// Tracks the condition as last written, to decide the next patch.
#[derive(Debug, Default, Clone)]
pub struct ConditionTracker {
    published: Option<Published>,
}

impl ConditionTracker {
    /// Starts from the condition the Node already carries (from an earlier run of the
    /// agent), so that a restart patches nothing while the status and reason hold.
    pub fn seed(&mut self, existing: &[NodeCondition]) {
        let Some(c) = existing.iter().find(|c| c.type_ == CONDITION_TYPE) else {
            return;
        };
        self.published = Some(Published {
            status: c.status.clone(),
            reason: c.reason.clone().unwrap_or_default(),
            transition: c.last_transition_time.as_ref().map(|t| t.0),
        });
    }

    /// The condition to patch now, if any: when there is none yet, or its status or
    /// reason changed. A new message alone waits for the next such change, so that a
    /// drifted node's changing counts cost the API server nothing; `/findings` has them.
    /// `lastTransitionTime` moves only when the status does.
    pub fn due(&self, want: &ConditionSummary, now: Timestamp) -> Option<NodeCondition> {
        let transition = match &self.published {
            Some(p) if p.status == want.status() && p.reason == want.reason() => return None,
            Some(p) if p.status == want.status() => p.transition.unwrap_or(now),
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
        self.published = Some(Published {
            status: want.status().into(),
            reason: want.reason().into(),
            transition: sent.last_transition_time.as_ref().map(|t| t.0),
        });
    }

    /// The status last written: `Some(true)` for `True`.
    pub fn drift(&self) -> Option<bool> {
        self.published.as_ref().map(|p| p.status == "True")
    }
}

#[cfg(test)]
mod tests;
