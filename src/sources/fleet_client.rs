//! The fleet's state in a few requests: every Node's `NodePortDrift` condition in one
//! list (from the API server's cache, `resourceVersion=0`), the agents' pods in another
//! (a `False` condition counts as clean only where an agent pod is ready), then
//! `/findings` from the agents on the nodes that need a closer look, through the API
//! server's pod proxy (`GET /api/v1/namespaces/NS/pods/NAME:PORT/proxy/findings`): the
//! cluster's own path to pods, with the caller's credentials, so no new network path
//! and no new secret. Needs `list` on `nodes`; `list` on `pods` (without it no clean
//! node is confirmed) and `get` on `pods/proxy` in the agents' namespace for the
//! details. Without the Node list it asks every agent.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus as K8sNodeStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, ListParams};
use serde::Deserialize;

use crate::decode::fleet::agent_report;
use crate::heart::views::fleet::nodes::{
    AgentReadiness, NodeState, NodeStatus, confirm_clean, node_status, nodes_to_ask, pod_ready,
};
use crate::heart::views::fleet::{AgentAnswer, AgentReport, NoAnswer};
use crate::sources::kube_client::{self, WatchError};

/// Which agents to ask, and how.
#[derive(Debug, Clone)]
pub struct FleetQuery {
    pub api: kube_client::KubeTarget,
    pub namespace: String,
    /// A label selector for the agents' pods.
    pub selector: String,
    /// The agents' HTTP port (their `--listen`).
    pub port: u16,
    /// How long one agent may take to answer.
    pub timeout: Duration,
    /// How many agents are asked at once.
    pub concurrency: usize,
    /// Ask every agent, not only those on nodes that drifted or are unknown.
    pub all: bool,
}

/// What the fleet said.
#[derive(Debug, Clone)]
pub struct FleetAnswers {
    /// Every node by its condition; None when the Nodes could not be listed.
    pub nodes: Option<Vec<NodeStatus>>,
    /// The answers of the agents asked.
    pub answers: Vec<AgentAnswer>,
    /// What could not be checked, and why.
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("cannot start the API client: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Config(#[from] WatchError),
    #[error("cannot list the agents' pods in {namespace} ({selector}): {source}")]
    ListPods {
        namespace: String,
        selector: String,
        #[source]
        source: kube::Error,
    },
    #[error("the pods of {namespace} were not listed within {timeout:?}")]
    ListTimeout { namespace: String, timeout: Duration },
}

/// Reads the Nodes' conditions and asks the agents that `query` calls for.
pub fn ask_fleet(query: &FleetQuery) -> Result<FleetAnswers, FleetError> {
    crate::sources::block_on(async {
        let mut config = query.api.config().await?;
        // A 503 from the pod proxy is an agent that cannot be reached: the view says
        // so. kube's default retries of it would only spend the agent's timeout.
        config.default_retry = false;
        let client = kube_client::kube_client(config)?;
        let mut notes = Vec::new();
        let nodes = match list_node_statuses(client.clone(), query).await {
            Ok(nodes) => Some(nodes),
            Err(why) => {
                notes.push(format!(
                    "cannot list the Nodes ({why}): every agent was asked instead"
                ));
                None
            }
        };
        // The agents' pods, always: they say which clean conditions stand.
        let pods = match list_agents(client.clone(), query).await {
            Ok(pods) => pods,
            // With the conditions in hand, they are worth showing without details.
            Err(e) if nodes.is_some() => {
                let why = e.to_string();
                let unconfirmed = nodes.as_deref().map_or(0, |statuses| {
                    statuses.iter().filter(|s| s.state == NodeState::Clean).count()
                });
                let nodes = nodes.map(|statuses| confirm_clean(statuses, Err(&why)));
                let wanted = nodes.as_deref().map(|s| nodes_to_ask(s, query.all));
                notes.push(format!("no agent was asked: {why}"));
                if unconfirmed > 0 {
                    notes.push(format!(
                        "no agent's readiness was read: the {unconfirmed} nodes whose NodePortDrift \
                         condition says no drift were not confirmed clean"
                    ));
                }
                return Ok(FleetAnswers {
                    answers: not_asked(wanted.unwrap_or_default(), &NoAnswer::NotAsked(why)),
                    nodes,
                    notes,
                });
            }
            Err(e) => return Err(e),
        };
        let readiness = AgentReadiness::of(&pods);
        let nodes = nodes.map(|statuses| confirm_clean(statuses, Ok(&readiness)));
        // The listed nodes to ask (all of them with --all); None: every agent's pod.
        let wanted: Option<BTreeSet<String>> =
            nodes.as_ref().map(|statuses| nodes_to_ask(statuses, query.all));
        // Every listed node is confirmed clean: nothing to ask. (No Node listed at all:
        // the agents' pods, if any, are on nodes the list did not have, and are asked.)
        let listed_any = nodes.as_ref().is_some_and(|n| !n.is_empty());
        if listed_any && wanted.as_ref().is_some_and(BTreeSet::is_empty) {
            return Ok(FleetAnswers {
                nodes,
                answers: Vec::new(),
                notes,
            });
        }
        let (asked, missing) = select_pods(pods, wanted.as_ref(), nodes.as_deref());
        let answered: Vec<AgentAnswer> = futures::stream::iter(asked)
            .map(|pod| ask_agent(client.clone(), query, pod))
            .buffer_unordered(query.concurrency.max(1))
            .collect()
            .await;
        let reason = NoAnswer::NoAgentPod {
            namespace: query.namespace.clone(),
            selector: query.selector.clone(),
        };
        let mut answers = not_asked(missing, &reason);
        answers.extend(answered);
        Ok(FleetAnswers {
            nodes,
            answers,
            notes,
        })
    })
    .map_err(FleetError::Runtime)?
}

/// An unanswered entry for each of `nodes`.
fn not_asked(nodes: impl IntoIterator<Item = String>, reason: &NoAnswer) -> Vec<AgentAnswer> {
    nodes
        .into_iter()
        .map(|node| AgentAnswer {
            node,
            pod: String::new(),
            outcome: Err(reason.clone()),
            unready: None,
        })
        .collect()
}

/// The pods to ask (those on `wanted` nodes, or all), and the wanted nodes without an
/// agent's pod. A pod on a node the list did not have is asked too: nothing else says
/// what its node is like.
fn select_pods(
    pods: Vec<Pod>,
    wanted: Option<&BTreeSet<String>>,
    listed: Option<&[NodeStatus]>,
) -> (Vec<Pod>, Vec<String>) {
    let Some(wanted) = wanted else {
        return (pods, Vec::new());
    };
    let listed: BTreeSet<&str> = listed
        .unwrap_or_default()
        .iter()
        .map(|s| s.node.as_str())
        .collect();
    let mut covered = BTreeSet::new();
    let asked = pods
        .into_iter()
        .filter(|pod| {
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .unwrap_or_default();
            covered.insert(node.to_string());
            wanted.contains(node) || !listed.contains(node)
        })
        .collect();
    let missing = wanted.iter().filter(|n| !covered.contains(*n)).cloned().collect();
    (asked, missing)
}

/// A Node as far as the view reads it: its name and conditions (a Node's images and
/// the rest are skipped while parsing, which at thousands of nodes is most of it).
#[derive(Deserialize)]
struct SlimNode {
    metadata: SlimMeta,
    status: Option<SlimStatus>,
}

#[derive(Deserialize)]
struct SlimMeta {
    name: Option<String>,
}

#[derive(Deserialize)]
struct SlimStatus {
    conditions: Option<Vec<NodeCondition>>,
}

#[derive(Deserialize)]
struct SlimNodeList {
    items: Vec<SlimNode>,
}

/// Every Node's status by its condition, in one list served from the API server's
/// cache; the error says why not (e.g. a 403 when `list` on `nodes` is not allowed).
async fn list_node_statuses(client: Client, query: &FleetQuery) -> Result<Vec<NodeStatus>, String> {
    let params = ListParams::default().match_any();
    let request = kube::core::Request::new("/api/v1/nodes")
        .list(&params)
        .map_err(|e| e.to_string())?;
    let listed = tokio::time::timeout(query.timeout, client.request::<SlimNodeList>(request))
        .await
        .map_err(|_| format!("no answer within {:?}", query.timeout))?;
    let list = listed.map_err(|e| match e {
        kube::Error::Api(status) => format!("{} {}", status.code, status.message),
        e => e.to_string(),
    })?;
    Ok(list
        .items
        .into_iter()
        .map(|slim| {
            let node = Node {
                metadata: ObjectMeta {
                    name: slim.metadata.name,
                    ..ObjectMeta::default()
                },
                status: Some(K8sNodeStatus {
                    conditions: slim.status.and_then(|s| s.conditions),
                    ..K8sNodeStatus::default()
                }),
                ..Node::default()
            };
            node_status(&node)
        })
        .collect())
}

async fn list_agents(client: Client, query: &FleetQuery) -> Result<Vec<Pod>, FleetError> {
    let api = Api::<Pod>::namespaced(client, &query.namespace);
    let params = ListParams::default().labels(&query.selector).match_any();
    let listed = tokio::time::timeout(query.timeout, api.list(&params))
        .await
        .map_err(|_| FleetError::ListTimeout {
            namespace: query.namespace.clone(),
            timeout: query.timeout,
        })?;
    listed
        .map(|list| list.items)
        .map_err(|source| FleetError::ListPods {
            namespace: query.namespace.clone(),
            selector: query.selector.clone(),
            source,
        })
}

/// One agent's answer, or why there is none.
async fn ask_agent(client: Client, query: &FleetQuery, pod: Pod) -> AgentAnswer {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let unready = pod_ready(&pod).err();
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_else(|| name.clone());
    let status = pod.status.as_ref();
    let outcome = if status.and_then(|s| s.pod_ip.as_ref()).is_none() {
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("unknown");
        Err(NoAnswer::NotRunning {
            phase: phase.to_string(),
        })
    } else {
        fetch_findings(client, query, &name).await
    };
    AgentAnswer {
        node,
        pod: name,
        outcome,
        unready,
    }
}

async fn fetch_findings(client: Client, query: &FleetQuery, pod: &str) -> Result<AgentReport, NoAnswer> {
    let path = format!(
        "/api/v1/namespaces/{}/pods/{pod}:{}/proxy/findings",
        query.namespace, query.port
    );
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| NoAnswer::Request(e.to_string()))?;
    let text = match tokio::time::timeout(query.timeout, client.request_text(request)).await {
        Err(_) => return Err(NoAnswer::Timeout(query.timeout)),
        // The agent's own 404 for a /findings it keeps off the node's network.
        Ok(Err(kube::Error::Api(status)))
            if status.code == 404 && status.message.contains("--findings-listen") =>
        {
            return Err(NoAnswer::LoopbackOnly);
        }
        Ok(Err(kube::Error::Api(status))) => {
            return Err(NoAnswer::Proxy {
                code: status.code,
                message: status.message,
            });
        }
        Ok(Err(e)) => return Err(NoAnswer::Request(e.to_string())),
        Ok(Ok(text)) => text,
    };
    agent_report(&text)
}
