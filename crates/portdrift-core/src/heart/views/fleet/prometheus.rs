//! The fleet view from what Prometheus holds (`portdrift fleet --prometheus URL`): the
//! answers to a few instant queries (`up`, `portdrift_coverage_complete`,
//! `portdrift_findings_by_severity`, `portdrift_finding`,
//! `portdrift_findings_not_detailed`) grouped by the `node` label (else `instance`).
//! A target that is down, or up without a scan, is never shown as clean.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::heart::finding::Finding;

use super::nodes::{NodeState, NodeStatus, NodesSummary};
use super::{AgentAnswer, AgentReport, FleetView, NoAnswer, fleet_view, read_finding};

/// One sample of an instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    /// The node a sample is about: its `node` label, else its `instance`.
    fn node(&self) -> String {
        self.labels
            .get("node")
            .or_else(|| self.labels.get("instance"))
            .cloned()
            .unwrap_or_default()
    }

    fn label(&self, name: &str) -> &str {
        self.labels.get(name).map(String::as_str).unwrap_or_default()
    }
}

/// The queries' answers.
#[derive(Debug, Clone, Default)]
pub struct PromAnswers {
    /// `up` of the agents' scrape job.
    pub up: Vec<Sample>,
    pub coverage_complete: Vec<Sample>,
    pub by_severity: Vec<Sample>,
    /// `portdrift_finding`: one series per distinct finding, capped per agent.
    pub details: Vec<Sample>,
    pub not_detailed: Vec<Sample>,
}

/// What each node's series say, node by node.
#[derive(Default)]
struct PerNode {
    up: Option<bool>,
    instance: String,
    complete: Option<bool>,
    serious: f64,
    total: f64,
    details: Vec<Result<Finding, String>>,
    detailed: f64,
    not_detailed: f64,
}

/// The fleet view from `answers`, read from `source` (for the header).
pub fn prometheus_view(answers: &PromAnswers, source: String) -> FleetView {
    let mut nodes: BTreeMap<String, PerNode> = BTreeMap::new();
    for s in &answers.up {
        let n = nodes.entry(s.node()).or_default();
        // One target down among several for a node: not all of it was seen.
        n.up = Some(n.up.unwrap_or(true) && s.value == 1.0);
        n.instance = s.label("instance").to_string();
    }
    for s in &answers.coverage_complete {
        let n = nodes.entry(s.node()).or_default();
        n.complete = Some(n.complete.unwrap_or(true) && s.value == 1.0);
    }
    for s in &answers.by_severity {
        let n = nodes.entry(s.node()).or_default();
        n.total += s.value;
        if matches!(s.label("severity"), "critical" | "warning") {
            n.serious += s.value;
        }
    }
    for s in &answers.details {
        let n = nodes.entry(s.node()).or_default();
        n.detailed += s.value;
        n.details.push(read_finding(&finding_of(s)));
    }
    for s in &answers.not_detailed {
        nodes.entry(s.node()).or_default().not_detailed += s.value;
    }

    let mut agent_answers = Vec::new();
    let mut statuses = Vec::new();
    let mut notes = Vec::new();
    let mut unresolved = BTreeSet::new();
    for (node, n) in nodes {
        let (outcome, state, message) = if n.up == Some(false) {
            let unknown = "not scraped: up 0".to_string();
            (Err(NoAnswer::NotScraped), NodeState::Unknown, unknown)
        } else if n.complete.is_none() {
            let unknown = "no scan reported yet".to_string();
            (Err(NoAnswer::NoScanYet), NodeState::Unknown, unknown)
        } else {
            if n.not_detailed > 0.0 || n.detailed < n.total {
                let missing = n.not_detailed.max(n.total - n.detailed);
                notes.push(format!(
                    "{node}: {missing} findings not in portdrift_finding (the agent's \
                     --metrics-max-series): its /findings has them all"
                ));
            }
            let complete = n.complete == Some(true);
            if !complete {
                unresolved.insert(node.clone());
            }
            let (state, message) = match (n.serious > 0.0, complete) {
                (true, _) => (
                    NodeState::Drift,
                    format!(
                        "{} critical or warning finding{}",
                        n.serious,
                        if n.serious == 1.0 { "" } else { "s" }
                    ),
                ),
                (false, true) => (NodeState::Clean, String::new()),
                (false, false) => (
                    NodeState::Unknown,
                    "the agent's check is incomplete (portdrift_coverage_complete 0)".into(),
                ),
            };
            let report = AgentReport {
                findings: n.details,
                incomplete: None,
            };
            (Ok(report), state, message)
        };
        agent_answers.push(AgentAnswer {
            node: node.clone(),
            pod: n.instance,
            outcome,
            unready: None,
        });
        statuses.push(NodeStatus {
            node: node.clone(),
            state,
            reason: None,
            message,
            since: None,
        });
    }
    let mut view = fleet_view(&agent_answers);
    for node in &unresolved {
        view.answered_nodes.remove(node);
    }
    view.with_nodes(Some(source), Some(NodesSummary::of(&statuses)), notes)
}

/// A detail series as the finding fields the view groups by, in an agent's JSON: read
/// as an agent's finding is, a spelling this portdrift does not know is named.
fn finding_of(s: &Sample) -> Value {
    let text = |name: &str| {
        let v = s.label(name);
        (!v.is_empty()).then(|| v.to_string())
    };
    json!({
        "kind": s.label("kind"),
        "severity": text("severity"),
        "protocol": text("protocol"),
        "port": s.label("port").parse::<u64>().ok(),
        "service": text("service"),
        "message": "",
    })
}
