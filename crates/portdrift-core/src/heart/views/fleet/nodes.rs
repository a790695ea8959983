//! The fleet from the Nodes' `NodePortDrift` conditions, as the agents set them with
//! `--node-condition`: which nodes drifted, which are clean, and which are unknown (no
//! condition, or a clean one that no ready agent stands behind), and so which agents to
//! ask for details.
//!
//! The agents patch the condition only when its status changes, so its age says
//! nothing. What says a `False` is current is the agent itself being ready (its API
//! watch synced and fresh, a scan within three intervals): a node is clean only when
//! its condition says so and an agent pod on it is Running and Ready
//! ([`confirm_clean`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use serde::Serialize;

/// The condition's `type`, as the agents write it.
pub const CONDITION_TYPE: &str = "NodePortDrift";

/// What a node's condition says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// `True`: critical findings at the agent's last scan.
    Drift,
    /// `False`, with a ready agent on the node: no critical finding at its last scan.
    Clean,
    /// No condition, status `Unknown`, or `False` without a ready agent to stand by it.
    Unknown,
}

/// One node, by its condition.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct NodeStatus {
    pub node: String,
    pub state: NodeState,
    /// The condition's reason; null without one.
    pub reason: Option<String>,
    /// The condition's message, or why the state is unknown.
    pub message: String,
    /// `lastTransitionTime`: since when the status holds; null without a condition.
    #[schemars(extend("format" = "date-time"))]
    pub since: Option<String>,
}

/// The node's status as its `NodePortDrift` condition says, before any agent's
/// readiness is known: a `False` here is clean only once [`confirm_clean`] finds a
/// ready agent on the node.
pub fn node_status(node: &Node) -> NodeStatus {
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
    let state = match c.status.as_str() {
        "True" => NodeState::Drift,
        "False" => NodeState::Clean,
        other => {
            return unknown(name, format!("NodePortDrift condition is {other:?}"));
        }
    };
    NodeStatus {
        node: name,
        state,
        reason: c.reason.clone(),
        message: c.message.clone().unwrap_or_default(),
        since: c.last_transition_time.as_ref().map(|t| t.0.to_string()),
    }
}

/// The agents' pods by node: the nodes with a ready agent, and for the others with a
/// pod, why none of their pods is ready.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentReadiness {
    pub ready: BTreeSet<String>,
    pub not_ready: BTreeMap<String, String>,
}

impl AgentReadiness {
    /// From the listed pods: a node has a ready agent when any of its pods is.
    pub fn of(pods: &[Pod]) -> AgentReadiness {
        let mut readiness = AgentReadiness::default();
        for pod in pods {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            match pod_ready(pod) {
                Ok(()) => {
                    readiness.not_ready.remove(&node);
                    readiness.ready.insert(node);
                }
                Err(why) if !readiness.ready.contains(&node) => {
                    let entry = readiness.not_ready.entry(node).or_default();
                    if !entry.is_empty() {
                        entry.push_str("; ");
                    }
                    entry.push_str(&why);
                }
                Err(_) => {}
            }
        }
        readiness
    }
}

/// Whether an agent's pod is Running with its `Ready` condition `True` (its `/readyz`
/// passes); if not, why, naming the pod.
pub fn pod_ready(pod: &Pod) -> Result<(), String> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("unknown");
    if pod.metadata.deletion_timestamp.is_some() {
        return Err(format!("pod {name}: terminating"));
    }
    if phase != "Running" {
        return Err(format!("pod {name}: phase {phase}"));
    }
    let ready = status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == "Ready");
    match ready {
        Some(c) if c.status == "True" => Ok(()),
        Some(c) => Err(match &c.reason {
            Some(reason) => format!("pod {name}: not ready ({reason})"),
            None => format!("pod {name}: not ready"),
        }),
        None => Err(format!("pod {name}: no Ready condition")),
    }
}

/// The statuses with every clean node that no ready agent stands behind demoted to
/// unknown, saying why. `agents` is the agents' readiness, or why it could not be read
/// (then no clean node is confirmed).
pub fn confirm_clean(statuses: Vec<NodeStatus>, agents: Result<&AgentReadiness, &str>) -> Vec<NodeStatus> {
    statuses
        .into_iter()
        .map(|s| {
            if s.state != NodeState::Clean {
                return s;
            }
            let why = match agents {
                Ok(a) if a.ready.contains(&s.node) => return s,
                Ok(a) => match a.not_ready.get(&s.node) {
                    Some(why) => why.clone(),
                    None => "no agent pod".to_string(),
                },
                Err(e) => format!("the agents' pods could not be listed: {e}"),
            };
            let message = format!(
                "NodePortDrift says no drift, but no ready agent on this node ({why}): the condition may be out of date"
            );
            unknown(s.node, message)
        })
        .collect()
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
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
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
