//! The fleet view from what Prometheus holds (`portdrift fleet --prometheus URL`): the
//! answers to a few instant queries (`up`, `portdrift_coverage_complete`,
//! `portdrift_findings_by_severity`, `portdrift_finding`,
//! `portdrift_findings_not_detailed`) grouped by the `node` label (else `instance`).
//! A target that is down, or up without a scan, is never shown as clean.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::nodes::{NodeState, NodeStatus, NodesSummary};
use super::{AgentAnswer, FleetView, fleet_view};

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

/// Reads the body of `/api/v1/query` for an instant vector: its samples, or what is
/// wrong with it (an `error` answer, another result type, a value that is no number).
pub fn parse_vector(body: &[u8]) -> Result<Vec<Sample>, String> {
    let answer: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    if answer["status"] != "success" {
        return Err(format!(
            "{}: {}",
            answer["errorType"].as_str().unwrap_or("error"),
            answer["error"].as_str().unwrap_or("status is not success")
        ));
    }
    let data = &answer["data"];
    if data["resultType"] != "vector" {
        return Err(format!("result type {} is not a vector", data["resultType"]));
    }
    let result = data["result"].as_array().ok_or("no result list")?;
    result
        .iter()
        .map(|s| {
            let labels = s["metric"]
                .as_object()
                .ok_or("a sample without labels")?
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect();
            let text = s["value"][1].as_str().ok_or("a sample without a value")?;
            let value = text
                .parse()
                .map_err(|_| format!("sample value {text:?} is not a number"))?;
            Ok(Sample { labels, value })
        })
        .collect()
}

/// What each node's series say, node by node.
#[derive(Default)]
struct PerNode {
    up: Option<bool>,
    instance: String,
    complete: Option<bool>,
    serious: f64,
    total: f64,
    details: Vec<Value>,
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
        n.details.push(finding_of(s));
    }
    for s in &answers.not_detailed {
        nodes.entry(s.node()).or_default().not_detailed += s.value;
    }

    let mut agent_answers = Vec::new();
    let mut statuses = Vec::new();
    let mut notes = Vec::new();
    let mut unresolved = BTreeSet::new();
    for (node, n) in &nodes {
        let pod = n.instance.clone();
        let (state, message) = if n.up == Some(false) {
            agent_answers.push(AgentAnswer {
                node: node.clone(),
                pod,
                outcome: Err("Prometheus cannot scrape it (up 0)".into()),
                unready: None,
            });
            (NodeState::Unknown, "not scraped: up 0".to_string())
        } else if n.complete.is_none() {
            agent_answers.push(AgentAnswer {
                node: node.clone(),
                pod,
                outcome: Err("scraped, but no scan reported yet (no portdrift_coverage_complete)".into()),
                unready: None,
            });
            (NodeState::Unknown, "no scan reported yet".to_string())
        } else {
            agent_answers.push(AgentAnswer {
                node: node.clone(),
                pod,
                outcome: Ok(json!({"findings": n.details})),
                unready: None,
            });
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
            match (n.serious > 0.0, complete) {
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
            }
        };
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

/// A detail series as the finding fields the view groups by.
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
