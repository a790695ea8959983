//! The fleet's drift at a glance (`portdrift fleet`): every agent's `/findings`,
//! grouped by finding, with the nodes that have each, and the agents that did not
//! answer. Pure: answers in, a view out.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;
use serde_json::Value;

/// What one agent answered.
#[derive(Debug, Clone)]
pub struct AgentAnswer {
    /// The node the agent's pod runs on (its `spec.nodeName`; the pod name without one).
    pub node: String,
    pub pod: String,
    /// The `/findings` document, or why there is none.
    pub outcome: Result<Value, String>,
}

/// The fields that make two nodes' findings the same finding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct FindingKey {
    pub kind: String,
    pub severity: String,
    pub protocol: Option<String>,
    pub port: Option<u64>,
    pub service: Option<String>,
    pub target: Option<String>,
}

/// One finding and the nodes that have it.
#[derive(Debug, Clone, Serialize)]
pub struct FleetFinding {
    #[serde(flatten)]
    pub key: FindingKey,
    /// Sorted, each once (a finding in two backends of one node counts once).
    pub nodes: Vec<String>,
    /// One node's message for it.
    pub message: String,
}

/// An agent that did not answer with findings.
#[derive(Debug, Clone, Serialize)]
pub struct Unanswered {
    pub node: String,
    pub pod: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetView {
    /// Agents found (pods matching the selector).
    pub agents: usize,
    pub answered: usize,
    /// Most widespread first, then most severe, then by port.
    pub findings: Vec<FleetFinding>,
    pub unanswered: Vec<Unanswered>,
}

impl FleetView {
    /// 1 when a warning or critical finding is on some node, or an agent did not
    /// answer (the view is incomplete); else 0.
    pub fn exit_code(&self) -> u8 {
        let serious = self
            .findings
            .iter()
            .any(|f| matches!(f.key.severity.as_str(), "critical" | "warning"));
        u8::from(serious || !self.unanswered.is_empty())
    }
}

/// Groups the answers into the fleet view.
pub fn fleet_view(answers: &[AgentAnswer]) -> FleetView {
    let mut groups: BTreeMap<FindingKey, (Vec<String>, String)> = BTreeMap::new();
    let mut unanswered = Vec::new();
    for answer in answers {
        let findings = match &answer.outcome {
            Ok(document) => match document.get("findings").and_then(Value::as_array) {
                Some(findings) => findings,
                None => {
                    unanswered.push(unanswered_of(answer, "answered without a findings list".into()));
                    continue;
                }
            },
            Err(reason) => {
                unanswered.push(unanswered_of(answer, reason.clone()));
                continue;
            }
        };
        for finding in findings {
            let Some(key) = key_of(finding) else { continue };
            let entry = groups.entry(key).or_insert_with(|| {
                let message = finding["message"].as_str().unwrap_or_default().to_string();
                (Vec::new(), message)
            });
            entry.0.push(answer.node.clone());
        }
    }
    let mut findings: Vec<FleetFinding> = groups
        .into_iter()
        .map(|(key, (mut nodes, message))| {
            nodes.sort();
            nodes.dedup();
            FleetFinding { key, nodes, message }
        })
        .collect();
    findings.sort_by(|a, b| {
        b.nodes
            .len()
            .cmp(&a.nodes.len())
            .then(severity_rank(&a.key.severity).cmp(&severity_rank(&b.key.severity)))
            .then(a.key.cmp(&b.key))
    });
    unanswered.sort_by(|a, b| a.node.cmp(&b.node));
    FleetView {
        agents: answers.len(),
        answered: answers.len() - unanswered.len(),
        findings,
        unanswered,
    }
}

fn unanswered_of(answer: &AgentAnswer, reason: String) -> Unanswered {
    Unanswered {
        node: answer.node.clone(),
        pod: answer.pod.clone(),
        reason,
    }
}

fn severity_rank(severity: &str) -> u8 {
    match severity {
        "critical" => 0,
        "warning" => 1,
        "info" => 2,
        _ => 3,
    }
}

/// A finding's key; None when it has no kind (not a finding).
fn key_of(finding: &Value) -> Option<FindingKey> {
    let text = |field: &str| finding.get(field).and_then(Value::as_str).map(str::to_string);
    Some(FindingKey {
        kind: text("kind")?,
        severity: text("severity").unwrap_or_else(|| "unknown".into()),
        protocol: text("protocol"),
        port: finding.get("port").and_then(Value::as_u64),
        service: text("service"),
        target: text("target"),
    })
}

/// `severity kind proto/port service → target: K of N nodes: a, b` per finding, then
/// the agents that did not answer.
pub fn render_fleet(view: &FleetView) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} of {} agents answered; {} distinct findings",
        view.answered,
        view.agents,
        view.findings.len()
    );
    for f in &view.findings {
        let k = &f.key;
        let mut what = format!("{} {}", k.severity, k.kind);
        if let (Some(protocol), Some(port)) = (&k.protocol, k.port) {
            let _ = write!(what, " {protocol}/{port}");
        }
        if let Some(service) = &k.service {
            let _ = write!(what, " {service}");
        }
        if let Some(target) = &k.target {
            let _ = write!(what, " → {target}");
        }
        let _ = writeln!(
            out,
            "{what}: {} of {} nodes: {}",
            f.nodes.len(),
            view.agents,
            f.nodes.join(", ")
        );
    }
    if !view.unanswered.is_empty() {
        let _ = writeln!(out, "\nno answer from {} agents:", view.unanswered.len());
        for u in &view.unanswered {
            let _ = writeln!(out, "  {} ({}): {}", u.node, u.pod, u.reason);
        }
    }
    out
}

#[cfg(test)]
mod tests;
