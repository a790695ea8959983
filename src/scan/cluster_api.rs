//! The one-shot commands' reads of the API server: the cluster state a live scan
//! compares the node with, and the objects a snapshot copies into its bundle.

use std::collections::HashMap;
use std::io::{self, Write};
use std::time::Duration;

use kube::Client;
use thiserror::Error;

use crate::heart::desired::DesiredState;
use crate::heart::input::Input;
use crate::heart::model::ProcessInfo;
use crate::heart::outcome::{InputState, InputStatus, ScanInput};
use crate::sources::block_on;
use crate::sources::kube_client::{self, KubeTarget, WatchError};

/// Why the cluster state could not be read from the API server.
#[derive(Debug, Error)]
pub enum ClusterApiError {
    /// No kubeconfig was named, and none was found (KUBECONFIG, ~/.kube/config, the
    /// in-cluster service account): there is no API server to ask.
    #[error(transparent)]
    Unconfigured(WatchError),
    /// An API server was configured, and reading from it failed.
    #[error(transparent)]
    Api(WatchError),
    /// The runtime the API client runs on could not start.
    #[error(transparent)]
    Runtime(io::Error),
}

/// A client of the API server `api` names (default: as kube finds one), and the
/// server's URL. Unconfigured when nothing is named and none is found.
async fn connect(api: &KubeTarget) -> Result<(Client, String), ClusterApiError> {
    let config = api.config().await.map_err(|e| match api.is_named() {
        false => ClusterApiError::Unconfigured(e),
        true => ClusterApiError::Api(e),
    })?;
    let url = config.cluster_url.to_string();
    let client = kube_client::kube_client(config).map_err(ClusterApiError::Api)?;
    Ok((client, url))
}

/// The cluster state as listed from the API server, before it joins a scan's input:
/// listed while the node is read, since on a large cluster each takes a good part of
/// a second.
pub struct ApiListing {
    loaded: Result<(DesiredState, String), ClusterApiError>,
}

/// Lists the cluster state, as `node` sees it, from the API server `api` names.
pub fn list_cluster_from_api(api: &KubeTarget, node: Option<&str>, timeout: Duration) -> ApiListing {
    let loaded = block_on(async {
        let (client, url) = connect(api).await?;
        let desired = kube_client::load_once(client, node, timeout)
            .await
            .map_err(ClusterApiError::Api)?;
        Ok((desired, url))
    })
    .unwrap_or_else(|e| Err(ClusterApiError::Runtime(e)));
    ApiListing { loaded }
}

/// Puts what [`list_cluster_from_api`] listed into `input`, naming the pods behind
/// squatters where the node read found some. An unreachable or unconfigured API is a
/// source status, not a failed scan: the checks that need no cluster state still run,
/// and the report says why the others did not.
pub fn add_api_listing(input: &mut ScanInput, listing: ApiListing, api: &KubeTarget, timeout: Duration) {
    let mut status = InputStatus::new(Input::Api, InputState::Ok);
    match listing.loaded {
        Ok((desired, url)) => {
            // Pods are listed (on this node only) just when a squatter runs in one.
            let squatters_in_pods = input.observed.owners.values().any(|p| p.pod.is_some());
            if let (Some(node), true) = (input.node.as_deref(), squatters_in_pods) {
                match list_pods(api, node, timeout) {
                    Ok(pods) => name_pods(&mut input.observed.owners, &pods),
                    Err(e) => status
                        .notes
                        .push(format!("cannot name the pods behind squatters: {e}")),
                }
            }
            status.origin = Some(url);
            let pod_notes = std::mem::take(&mut status.notes);
            status.describe_cluster_state(&desired);
            status.notes.extend(pod_notes);
            input.desired = Some(desired);
        }
        Err(ClusterApiError::Unconfigured(e)) => {
            status.status = InputState::Absent;
            status.notes.push(format!(
                "no cluster state: no --cluster-state or --kubeconfig, and {e}; only checks that need none ran"
            ));
        }
        Err(e) => {
            eprintln!("portdrift: cannot read the cluster state from the API server: {e}");
            status.status = InputState::Error;
            status
                .notes
                .push(format!("{e}; only checks that need no cluster state ran"));
        }
    }
    input.sources.push(status);
}

/// The pods on `node`, UID to `namespace/name`.
fn list_pods(api: &KubeTarget, node: &str, timeout: Duration) -> Result<HashMap<String, String>, String> {
    block_on(async {
        let (client, _) = connect(api).await.map_err(|e| e.to_string())?;
        kube_client::pods_on_node(client, node, timeout)
            .await
            .map_err(|e| e.to_string())
    })
    .map_err(|e| e.to_string())?
}

/// Replaces the pod UIDs read from cgroups with `namespace/name`, where the API knows them.
pub fn name_pods(owners: &mut HashMap<u64, ProcessInfo>, pods: &HashMap<String, String>) {
    for process in owners.values_mut() {
        if let Some(name) = process.pod.as_ref().and_then(|uid| pods.get(uid)) {
            process.pod = Some(name.clone());
        }
    }
}

/// Why the cluster's objects could not be listed into a file.
#[derive(Debug, Error)]
pub enum ListToFileError {
    /// The API server could not be asked or did not answer.
    #[error("cannot list the cluster state from the API server")]
    Api(#[source] ClusterApiError),
    /// The runtime or the temporary file failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// Lists the cluster's objects from the API into a temporary `cluster.json`. None when
/// no API is configured at all (said on stderr); an explicit kubeconfig or context that
/// fails is an error.
pub fn list_cluster_to_file(
    api: &KubeTarget,
    node: Option<&str>,
    timeout: Duration,
) -> Result<Option<tempfile::NamedTempFile>, ListToFileError> {
    let listed = block_on(async {
        let (client, _) = connect(api).await?;
        kube_client::list_once(client, node, timeout)
            .await
            .map_err(ClusterApiError::Api)
    })?;
    let objects = match listed {
        Ok(objects) => objects,
        Err(ClusterApiError::Unconfigured(e)) => {
            eprintln!("portdrift: no cluster state in the snapshot: {e}");
            return Ok(None);
        }
        Err(e) => return Err(ListToFileError::Api(e)),
    };
    let mut file = tempfile::NamedTempFile::new()?;
    serde_json::to_writer_pretty(&mut file, &objects.to_list_json())?;
    file.write_all(b"\n")?;
    Ok(Some(file))
}

#[cfg(test)]
mod tests;
