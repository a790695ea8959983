//! The fleet from the Nodes' `NodePortDrift` conditions, as the agents set them with
//! `--node-condition`: which nodes drifted, which are clean, and which are unknown
//! (no condition, or one too old to trust), and so which agents to ask for details.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use serde::Serialize;

/// The condition's `type`, as the agents write it.
pub const CONDITION_TYPE: &str = "NodePortDrift";

/// What a node's condition says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// `True`: critical findings at the agent's last scan.
    Drift,
    /// `False`: no critical finding at the agent's last scan.
    Clean,
    /// No condition, status `Unknown`, or a condition not renewed lately.
    Unknown,
}

/// One node, by its condition.
#[derive(Debug, Clone, Serialize)]
pub struct NodeStatus {
    pub node: String,
    pub state: NodeState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The condition's message, or why the state is unknown.
    pub message: String,
    /// `lastTransitionTime`: since when the status holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// The node's status from its `NodePortDrift` condition at `now`. A condition whose
/// `lastHeartbeatTime` is older than `stale_after` is unknown: its agent may be gone.
pub fn node_status(node: &Node, now: Timestamp, stale_after: Duration) -> NodeStatus {
    let name = node.metadata.name.clone().unwrap_or_default();
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref());
    let Some(c) = conditions
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == CONDITION_TYPE)
    else {
        return unknown(
            name,
            "no NodePortDrift condition (no agent reporting, or --node-condition off)".into(),
        );
    };
    let since = c.last_transition_time.as_ref().map(|t| t.0.to_string());
    let age = c
        .last_heartbeat_time
        .as_ref()
        .and_then(|t| now.duration_since(t.0).try_into().ok());
    let state = match c.status.as_str() {
        "True" => NodeState::Drift,
        "False" => NodeState::Clean,
        other => {
            return unknown(name, format!("NodePortDrift condition is {other:?}"));
        }
    };
    if let Some(age) = age.filter(|age: &Duration| *age > stale_after) {
        let said = if state == NodeState::Drift {
            "drift"
        } else {
            "no drift"
        };
        return unknown(
            name,
            format!(
                "NodePortDrift condition not renewed for {}s (said {said}): is the agent running?",
                age.as_secs()
            ),
        );
    }
    NodeStatus {
        node: name,
        state,
        reason: c.reason.clone(),
        message: c.message.clone().unwrap_or_default(),
        since,
    }
}

fn unknown(node: String, message: String) -> NodeStatus {
    NodeStatus {
        node,
        state: NodeState::Unknown,
        reason: None,
        message,
        since: None,
    }
}

/// The nodes whose agents are asked for details: those that drifted and those whose
/// state is unknown (nothing else says whether they are clean); every node with `all`.
pub fn nodes_to_ask(statuses: &[NodeStatus], all: bool) -> BTreeSet<String> {
    statuses
        .iter()
        .filter(|s| all || s.state != NodeState::Clean)
        .map(|s| s.node.clone())
        .collect()
}

/// The nodes by state, for the view: drifted and unknown ones named, clean ones too
/// (in JSON; the text counts them).
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodesSummary {
    pub total: usize,
    pub drift: Vec<NodeStatus>,
    pub unknown: Vec<NodeStatus>,
    pub clean: Vec<String>,
}

impl NodesSummary {
    pub fn of(statuses: &[NodeStatus]) -> NodesSummary {
        let mut summary = NodesSummary {
            total: statuses.len(),
            ..NodesSummary::default()
        };
        for s in statuses {
            match s.state {
                NodeState::Drift => summary.drift.push(s.clone()),
                NodeState::Unknown => summary.unknown.push(s.clone()),
                NodeState::Clean => summary.clean.push(s.node.clone()),
            }
        }
        summary.drift.sort_by(|a, b| a.node.cmp(&b.node));
        summary.unknown.sort_by(|a, b| a.node.cmp(&b.node));
        summary.clean.sort();
        summary
    }
}
