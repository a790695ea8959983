//! One-shot lists of the cluster's objects, in pages, trimmed as each page arrives:
//! for `scan`, `snapshot`, the squatters' pod names and the NodePort table.
//!
//! The Services, EndpointSlices and Node of a scan or snapshot are consistent reads
//! (no `resourceVersion`): a person comparing the node's rules read now wants the state
//! of now, not a watch cache that may lag behind it, and one run costs the API server
//! little (since Kubernetes 1.31 it serves even these from its cache once the cache is
//! current). The pods on this node are read from the cache (`resourceVersion=0`), as
//! the kubelet reads them: etcd has no index on `spec.nodeName`, the watch cache has.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::heart::desired::model::DesiredState;
use crate::heart::desired::trim::{
    desired_from_objects, node_labels, trim_endpoint_slice, trim_node, trim_pod, trim_service,
};
use crate::sources::kube_client::{
    DEFAULT_PAGE_SIZE, KUBE_PROXY_LABEL_SELECTOR, WatchError, WatchedResource,
};

/// Lists Services, EndpointSlices (with kube-proxy's selector, in pages) and this
/// node's Node once, and computes the desired state of `node`. For a one-shot
/// `portdrift scan`; the daemon keeps a watched view instead.
///
/// ```no_run
/// # async fn scan(kubeconfig: Option<&std::path::Path>) -> Result<(), portdrift::sources::kube_client::WatchError> {
/// use std::time::Duration;
/// use portdrift::sources::kube_client::{kube_client, kube_config, load_once};
///
/// // `--kubeconfig FILE`, else KUBECONFIG, ~/.kube/config or the in-cluster account.
/// let config = kube_config(kubeconfig).await?;
/// let desired = load_once(kube_client(config)?, Some("worker-1"), Duration::from_secs(30)).await?;
/// # let _ = desired;
/// # Ok(())
/// # }
/// ```
///
/// Everything must arrive within `timeout`, or [`WatchError::Timeout`]. An unlistable
/// Node costs only the zone: zone-hinted endpoints are then uncertain, not guessed.
pub async fn load_once(
    client: Client,
    node: Option<&str>,
    timeout: Duration,
) -> Result<DesiredState, WatchError> {
    tokio::time::timeout(timeout, load(client, node))
        .await
        .map_err(|_| WatchError::Timeout(timeout))?
}

/// The objects a desired state is built from, as listed once.
#[derive(Debug, Clone, Default)]
pub struct ClusterObjects {
    pub services: Vec<Service>,
    pub endpoint_slices: Vec<EndpointSlice>,
    pub nodes: Vec<Node>,
}

impl ClusterObjects {
    /// A v1 `List` as `kubectl get services,endpointslices -A -o json` prints it (plus
    /// this node's Node), the bundle's `cluster.json`.
    pub fn to_list_json(&self) -> serde_json::Value {
        let mut items =
            Vec::with_capacity(self.services.len() + self.endpoint_slices.len() + self.nodes.len());
        items.extend(self.services.iter().filter_map(|o| serde_json::to_value(o).ok()));
        items.extend(
            self.endpoint_slices
                .iter()
                .filter_map(|o| serde_json::to_value(o).ok()),
        );
        items.extend(self.nodes.iter().filter_map(|o| serde_json::to_value(o).ok()));
        serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items})
    }
}

/// Lists, once, what [`load_once`] builds from: for `portdrift snapshot`, which writes
/// the objects themselves.
pub async fn list_once(
    client: Client,
    node: Option<&str>,
    timeout: Duration,
) -> Result<ClusterObjects, WatchError> {
    tokio::time::timeout(timeout, list_objects(client, node))
        .await
        .map_err(|_| WatchError::Timeout(timeout))?
}

/// Lists every Service once, trimmed and sorted, for the NodePort allocation table.
/// Without kube-proxy's selector: Services opted out of kube-proxy hold nodePorts too.
pub async fn list_every_service(client: Client, timeout: Duration) -> Result<Vec<Service>, WatchError> {
    let params = ListParams::default().limit(DEFAULT_PAGE_SIZE);
    let listed = list_all(
        Api::<Service>::all(client),
        &params,
        trim_service,
        WatchedResource::Services,
    );
    let mut services = tokio::time::timeout(timeout, listed)
        .await
        .map_err(|_| WatchError::Timeout(timeout))??;
    sort_by_name(&mut services);
    Ok(services)
}

async fn load(client: Client, node: Option<&str>) -> Result<DesiredState, WatchError> {
    let objects = list_objects(client, node).await?;
    let node = node.filter(|n| !n.is_empty());
    let labels = node.and_then(|name| node_labels(objects.nodes.iter(), name));
    Ok(desired_from_objects(
        node,
        &objects.services,
        &objects.endpoint_slices,
        labels.as_ref(),
    ))
}

async fn list_objects(client: Client, node: Option<&str>) -> Result<ClusterObjects, WatchError> {
    let selected = ListParams::default()
        .labels(KUBE_PROXY_LABEL_SELECTOR)
        .limit(DEFAULT_PAGE_SIZE);
    let mut services = list_all(
        Api::<Service>::all(client.clone()),
        &selected,
        trim_service,
        WatchedResource::Services,
    )
    .await?;
    let mut slices = list_all(
        Api::<EndpointSlice>::all(client.clone()),
        &selected,
        trim_endpoint_slice,
        WatchedResource::EndpointSlices,
    )
    .await?;
    let node = node.filter(|n| !n.is_empty());
    let nodes = match node {
        None => Vec::new(),
        Some(name) => {
            let params = ListParams::default().fields(&format!("metadata.name={name}"));
            match list_all(
                Api::<Node>::all(client),
                &params,
                trim_node,
                WatchedResource::Node,
            )
            .await
            {
                Ok(nodes) => nodes,
                Err(error) => {
                    tracing::warn!(
                        %error,
                        node = name,
                        "cannot read this node's zone; endpoints with topology hints are marked uncertain"
                    );
                    Vec::new()
                }
            }
        }
    };
    sort_by_name(&mut services);
    sort_by_name(&mut slices);
    Ok(ClusterObjects {
        services,
        endpoint_slices: slices,
        nodes,
    })
}

/// Every object of a paged list, trimmed as each page arrives.
async fn list_all<K>(
    api: Api<K>,
    params: &ListParams,
    trim: fn(&mut K),
    resource: WatchedResource,
) -> Result<Vec<K>, WatchError>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug,
{
    let list_error = |source| WatchError::List { resource, source };
    let mut out = Vec::new();
    let mut params = params.clone();
    loop {
        let page = match api.list(&params).await {
            Ok(page) => page,
            Err(kube::Error::Api(status)) if status.code == 410 && params.continue_token.is_some() => {
                tracing::info!(%resource, "continue token expired mid-list; listing again without pages");
                out.clear();
                params.continue_token = None;
                params.limit = None;
                continue;
            }
            Err(error) => return Err(list_error(error)),
        };
        out.extend(page.items.into_iter().map(|mut item| {
            trim(&mut item);
            // A compact copy, as the watch's store keeps.
            item.clone()
        }));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params.continue_token = Some(token),
            None => return Ok(out),
        }
    }
}

fn sort_by_name<K: Resource>(objects: &mut [K]) {
    objects.sort_by(|a, b| {
        let key = |o: &K| (o.meta().namespace.clone(), o.meta().name.clone());
        key(a).cmp(&key(b))
    });
}

/// The pods scheduled on `node`, UID → `namespace/name`: what names the pod behind a
/// squatter's cgroup. A field selector on `spec.nodeName` keeps it to this node, never a
/// cluster-wide Pod list, and `resourceVersion=0` has the watch cache answer it from its
/// index on that field instead of etcd reading every pod. Without a `limit`: kube-core
/// drops `resourceVersion=0` from a list that has one, and the cache serves such a list
/// whole anyway (a server that pages it nevertheless is followed).
pub async fn pods_on_node(
    client: Client,
    node: &str,
    timeout: Duration,
) -> Result<HashMap<String, String>, WatchError> {
    let params = ListParams::default()
        .fields(&format!("spec.nodeName={node}"))
        .match_any();
    let pods = tokio::time::timeout(
        timeout,
        list_all(Api::<Pod>::all(client), &params, trim_pod, WatchedResource::Pods),
    )
    .await
    .map_err(|_| WatchError::Timeout(timeout))??;
    Ok(pods
        .into_iter()
        .filter_map(|p| {
            let meta = p.metadata;
            Some((
                meta.uid?,
                format!("{}/{}", meta.namespace.unwrap_or_default(), meta.name?),
            ))
        })
        .collect())
}
