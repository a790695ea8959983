//! Asks every portdrift agent for its `/findings` through the API server's pod proxy
//! (`GET /api/v1/namespaces/NS/pods/NAME:PORT/proxy/findings`): the cluster's own path
//! to pods, with the caller's credentials, so no new network path and no new secret.
//! Needs `get` on `pods/proxy` and `list` on `pods` in the agents' namespace.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};

use crate::heart::views::fleet::AgentAnswer;
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

/// Asks every agent matching `query`; one answer per pod.
pub fn ask_fleet(query: &FleetQuery) -> Result<Vec<AgentAnswer>, FleetError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(FleetError::Runtime)?;
    runtime.block_on(async {
        let mut config = query.api.config().await?;
        // A 503 from the pod proxy is an agent that cannot be reached: the view says
        // so. kube's default retries of it would only spend the agent's timeout.
        config.default_retry = false;
        let client = kube_client::kube_client(config)?;
        let pods = list_agents(client.clone(), query).await?;
        let asked = futures::stream::iter(pods)
            .map(|pod| ask_agent(client.clone(), query, pod))
            .buffer_unordered(query.concurrency.max(1));
        Ok(asked.collect().await)
    })
}

async fn list_agents(client: Client, query: &FleetQuery) -> Result<Vec<Pod>, FleetError> {
    let api = Api::<Pod>::namespaced(client, &query.namespace);
    let params = ListParams::default().labels(&query.selector);
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
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_else(|| name.clone());
    let status = pod.status.as_ref();
    let outcome = if status.and_then(|s| s.pod_ip.as_ref()).is_none() {
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("unknown");
        Err(format!("not running (phase {phase}, no pod IP)"))
    } else {
        fetch_findings(client, query, &name).await
    };
    AgentAnswer {
        node,
        pod: name,
        outcome,
    }
}

async fn fetch_findings(client: Client, query: &FleetQuery, pod: &str) -> Result<serde_json::Value, String> {
    let path = format!(
        "/api/v1/namespaces/{}/pods/{pod}:{}/proxy/findings",
        query.namespace, query.port
    );
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    let text = match tokio::time::timeout(query.timeout, client.request_text(request)).await {
        Err(_) => return Err(format!("no answer within {:?}", query.timeout)),
        Ok(Err(kube::Error::Api(status))) => {
            return Err(format!("{} from the pod proxy: {}", status.code, status.message));
        }
        Ok(Err(e)) => return Err(e.to_string()),
        Ok(Ok(text)) => text,
    };
    serde_json::from_str(&text).map_err(|e| format!("answered, but not with findings JSON: {e}"))
}
