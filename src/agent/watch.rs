//! The desired state from the API server: reflectors for Services, EndpointSlices
//! and this node's Node, watched the way kube-proxy watches them, with explicit
//! readiness and outage handling.
//!
//! - [`ClusterView`] is the daemon's long-lived view: three reflectors that never stop,
//!   whatever the API server does, and say whether their contents can be trusted
//!   ([`ClusterView::synced`], [`ClusterView::fresh`], [`ClusterView::status`]). Each
//!   is kube-runtime's `watcher` (list in pages, watch with bookmarks, relist on
//!   `410 Gone`) with its default backoff, trimmed with `.modify()`, into a store of
//!   our own that makes relists cheap (see `ObjectStore`).
//! - [`load_once`] lists everything once, for a one-shot `portdrift scan`.
//!
//! Both build the same [`DesiredState`] as [`desired_state`](crate::heart::desired::desired_state) on the
//! same objects: the objects are trimmed on arrival ([`trim_service`],
//! [`trim_endpoint_slice`], [`trim_node`]) to exactly what the builder reads, so memory
//! follows the NodePort plumbing, not the size of `managedFields` or
//! `last-applied-configuration`.
//!
//! What kube-proxy sees, this sees: Services and EndpointSlices are selected with
//! [`KUBE_PROXY_LABEL_SELECTOR`] on the server, so Services opted out of kube-proxy
//! (`service.kubernetes.io/service-proxy-name`, `service.kubernetes.io/headless`) are
//! never listed. Unlike a bundle's `cluster.json`, where such a Service's nodePorts
//! count as allocated (`DesiredState::other_allocated`), here they are unknown.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, ListParams};
use kube::client::ClientBuilder;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::decode::cluster::probe::LABEL_ZONE;
use crate::heart::desired::build::DesiredBuilder;
use crate::heart::desired::model::DesiredState;
use crate::heart::desired::slices::{ANNOTATION_LAST_CHANGE_TRIGGER, LABEL_SERVICE_NAME, OPT_OUT_LABELS};

/// The label selector of kube-proxy's Service and EndpointSlice informers
/// (cmd/kube-proxy/app/server.go): objects opted out of kube-proxy are never listed.
pub const KUBE_PROXY_LABEL_SELECTOR: &str =
    "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name";

/// Page size of initial lists and relists, so that a 10,000-Service cluster is listed
/// in bounded requests rather than one huge one. Half client-go's 500: a page is
/// decoded whole, `managedFields` and all, before it is trimmed, and at 10,000
/// realistic Services halving the page cut peak memory by ~9 MB at no cost in sync
/// time (`scripts/bench-watch.sh`).
pub const DEFAULT_PAGE_SIZE: u32 = 250;

/// Why the API side could not give a desired state. Every variant has a bounded
/// [`metric_label`](Self::metric_label) for error counters.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot read the kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot find a cluster configuration (in-cluster, KUBECONFIG or ~/.kube/config): {0}")]
    InferConfig(#[source] kube::config::InferConfigError),
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("cannot list {resource}: {source}")]
    List {
        resource: WatchedResource,
        #[source]
        source: kube::Error,
    },
    #[error("the API server did not give the cluster state within {0:?}")]
    Timeout(Duration),
    #[error("the initial lists of Services, EndpointSlices and the Node have not completed")]
    NotSynced,
}

impl WatchError {
    /// A short, bounded label for metrics (`portdrift_..._errors_total{error=...}`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            WatchError::Kubeconfig { .. } => "kubeconfig",
            WatchError::InferConfig(_) => "config",
            WatchError::Client(_) => "client",
            WatchError::List { .. } => "list",
            WatchError::Timeout(_) => "timeout",
            WatchError::NotSynced => "not-synced",
        }
    }
}

/// A bounded label for an error of a watcher stream (kube-runtime retries them all).
pub fn watcher_error_label(error: &watcher::Error) -> &'static str {
    match error {
        watcher::Error::WatchError(status) if status.code == 410 => "gone",
        watcher::Error::InitialListFailed(kube::Error::Api(status)) if status.code == 410 => "gone",
        watcher::Error::InitialListFailed(_) => "list",
        watcher::Error::WatchStartFailed(_) => "watch-start",
        watcher::Error::WatchError(_) => "watch-event",
        watcher::Error::WatchFailed(_) => "watch-stream",
        watcher::Error::NoResourceVersion => "no-resource-version",
    }
}

/// The resources the view watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WatchedResource {
    Services,
    EndpointSlices,
    Node,
    /// The pods on this node (listed once, to name squatters; never watched).
    Pods,
}

impl WatchedResource {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchedResource::Services => "services",
            WatchedResource::EndpointSlices => "endpointslices",
            WatchedResource::Node => "node",
            WatchedResource::Pods => "pods",
        }
    }

    /// The collection's URL path, as kube-client writes it before the cluster URL is
    /// prepended: how the HTTP layer tells which watch a response belongs to.
    fn path(self) -> &'static str {
        match self {
            WatchedResource::Services => "/api/v1/services",
            WatchedResource::EndpointSlices => "/apis/discovery.k8s.io/v1/endpointslices",
            WatchedResource::Node => "/api/v1/nodes",
            WatchedResource::Pods => "/api/v1/pods",
        }
    }
}

impl fmt::Display for WatchedResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The client configuration: from the kubeconfig at `path` when given; otherwise
/// inferred as kubectl does (`KUBECONFIG`, then `~/.kube/config`, then the in-cluster
/// service account).
pub async fn kube_config(path: Option<&Path>) -> Result<kube::Config, WatchError> {
    match path {
        Some(path) => {
            let kubeconfig_error = |source| WatchError::Kubeconfig {
                path: path.to_path_buf(),
                source,
            };
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(kubeconfig_error)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(kubeconfig_error)
        }
        None => kube::Config::infer().await.map_err(WatchError::InferConfig),
    }
}

/// A plain client for `config`, e.g. for [`load_once`]. Must be called inside a Tokio
/// runtime (the client spawns its request buffer).
pub fn kube_client(config: kube::Config) -> Result<Client, WatchError> {
    Client::try_from(config).map_err(WatchError::Client)
}

// === load_once ===

/// Lists Services, EndpointSlices (with kube-proxy's selector, in pages) and this
/// node's Node once, and computes the desired state of `node`. For a one-shot
/// `portdrift scan`; the daemon keeps a [`ClusterView`] instead.
///
/// ```no_run
/// # async fn scan(kubeconfig: Option<&std::path::Path>) -> Result<(), portdrift::agent::watch::WatchError> {
/// use std::time::Duration;
/// use portdrift::agent::watch::{kube_client, kube_config, load_once};
///
/// // `--kubeconfig FILE`, else KUBECONFIG, ~/.kube/config or the in-cluster account.
/// let config = kube_config(kubeconfig).await?;
/// let desired = load_once(kube_client(config)?, Some("worker-1"), Duration::from_secs(30)).await?;
/// # let _ = desired;
/// # Ok(())
/// # }
/// ```
///
/// Everything must arrive within `timeout`, or [`WatchError::Timeout`]. A Node that
/// cannot be listed (missing RBAC, say) is logged and costs only the zone: endpoints
/// with zone hints are then marked uncertain rather than guessed. An expired continue
/// token (the list outlived etcd's compaction window) is answered as client-go's pager
/// does: one full list without pages.
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

/// Lists every Service of the cluster once, in pages, trimmed and sorted by namespace
/// and name: for the NodePort allocation table (`portdrift ports`, `lint`).
///
/// Without kube-proxy's label selector, unlike [`list_once`]: the API server allocates
/// nodePorts to Services that opt out of kube-proxy (`service-proxy-name`, `headless`)
/// all the same, and a new Service collides with them just as well.
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
    let zone = node.and_then(|name| node_zone(objects.nodes.iter(), name));
    Ok(build(
        node,
        &objects.services,
        &objects.endpoint_slices,
        zone.as_deref(),
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
            // A compact copy, as the view's store keeps (see `compact`).
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

/// The desired state from Services and EndpointSlices, in the order given.
fn build<S, E>(node: Option<&str>, services: &[S], slices: &[E], zone: Option<&str>) -> DesiredState
where
    S: Borrow<Service>,
    E: Borrow<EndpointSlice>,
{
    let mut builder = DesiredBuilder::new(node);
    for service in services {
        builder.add_service(service.borrow());
    }
    for slice in slices {
        builder.add_endpoint_slice(slice.borrow());
    }
    builder.finish(zone)
}

fn node_zone<N: Borrow<Node>>(nodes: impl Iterator<Item = N>, name: &str) -> Option<String> {
    nodes.into_iter().find_map(|node| {
        let meta = &node.borrow().metadata;
        if meta.name.as_deref() != Some(name) {
            return None;
        }
        meta.labels.as_ref()?.get(LABEL_ZONE).cloned()
    })
}

// === Trimming ===
//
// Each trim keeps exactly the fields `DesiredBuilder` reads (build.rs, slices.rs) and
// rebuilds the object from them, so a field the API adds later is dropped by default.
// The watch test `initial_sync_matches_desired_state` guards that nothing it needs is lost.

/// Metadata reduced to identity, creation time, and the labels and annotations in
/// `keep_labels` / `keep_annotations`. `managedFields`, `ownerReferences`, `uid` and
/// the rest go.
/// Moves the newest managedFields time into `creationTimestamp` before managedFields
/// go: the grace window measures from the object's last recorded change, and a spec
/// update (a nodePort edited) moves only the managedFields times.
fn fold_last_change(meta: &mut ObjectMeta) {
    if let Some(newest) = crate::heart::desired::slices::last_recorded_change(meta) {
        meta.creation_timestamp = Some(Time(newest));
    }
}

fn trim_meta(meta: &mut ObjectMeta, keep_labels: &[&str], keep_annotations: &[&str]) {
    let keep = |map: Option<BTreeMap<String, String>>, keys: &[&str]| {
        let kept: BTreeMap<String, String> = map
            .into_iter()
            .flatten()
            .filter(|(k, _)| keys.contains(&k.as_str()))
            .collect();
        (!kept.is_empty()).then_some(kept)
    };
    *meta = ObjectMeta {
        name: meta.name.take(),
        namespace: meta.namespace.take(),
        // Kept: a relist reuses the object it already holds when the resourceVersion
        // is unchanged (see `ObjectStore`).
        resource_version: meta.resource_version.take(),
        creation_timestamp: meta.creation_timestamp.take(),
        labels: keep(meta.labels.take(), keep_labels),
        annotations: keep(meta.annotations.take(), keep_annotations),
        ..ObjectMeta::default()
    };
}

/// A Service reduced to what decides its NodePorts. The whole `status` goes: a
/// load balancer's ingress IPs are not part of NodePort plumbing, and nothing else in
/// it is read. The selector (often the largest part of a spec) goes too: endpoints come
/// from EndpointSlices.
pub fn trim_service(service: &mut Service) {
    fold_last_change(&mut service.metadata);
    trim_meta(&mut service.metadata, &OPT_OUT_LABELS, &[]);
    service.status = None;
    service.spec = service.spec.take().map(|spec| ServiceSpec {
        cluster_ip: spec.cluster_ip,
        cluster_ips: spec.cluster_ips,
        // Decides whether a ClusterIP Service is externally accessible (Local policy).
        external_ips: spec.external_ips,
        external_traffic_policy: spec.external_traffic_policy,
        internal_traffic_policy: spec.internal_traffic_policy,
        health_check_node_port: spec.health_check_node_port,
        type_: spec.type_,
        ports: spec.ports.map(|ports| {
            ports
                .into_iter()
                .map(|p| ServicePort {
                    name: p.name,
                    node_port: p.node_port,
                    port: p.port,
                    protocol: p.protocol,
                    ..ServicePort::default()
                })
                .collect()
        }),
        ..ServiceSpec::default()
    });
}

/// An EndpointSlice reduced to what kube-proxy reads: per endpoint the first address
/// (kube-proxy ignores the others), conditions, hints and node name; not `targetRef`,
/// `hostname`, `zone` or `deprecatedTopology`.
///
/// The `endpoints.kubernetes.io/last-change-trigger-time` annotation is folded into
/// `creationTimestamp`, which then holds the newer of the two, and the annotations go:
/// the builder reads both only to take that maximum (`slice_last_change` in
/// slices.rs), and the map's one entry would cost a B-tree node (~640 bytes) per
/// slice, 6 MB across 10,000 slices.
pub fn trim_endpoint_slice(slice: &mut EndpointSlice) {
    fold_last_change(&mut slice.metadata);
    let triggered = slice
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LAST_CHANGE_TRIGGER))
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
    let labels: Vec<&str> = std::iter::once(LABEL_SERVICE_NAME)
        .chain(OPT_OUT_LABELS)
        .collect();
    trim_meta(&mut slice.metadata, &labels, &[]);
    let created = &mut slice.metadata.creation_timestamp;
    if let Some(triggered) = triggered
        && created.as_ref().is_none_or(|c| c.0 < triggered)
    {
        *created = Some(Time(triggered));
    }
    for endpoint in &mut slice.endpoints {
        let mut addresses = std::mem::take(&mut endpoint.addresses);
        addresses.truncate(1);
        addresses.shrink_to_fit();
        *endpoint = Endpoint {
            addresses,
            conditions: endpoint.conditions.take(),
            hints: endpoint.hints.take(),
            node_name: endpoint.node_name.take(),
            ..Endpoint::default()
        };
    }
    slice.endpoints.shrink_to_fit();
    slice.ports = slice.ports.take().map(|ports| {
        ports
            .into_iter()
            .map(|p| EndpointPort {
                name: p.name,
                port: p.port,
                protocol: p.protocol,
                app_protocol: None,
            })
            .collect()
    });
}

/// A Node reduced to its name and zone label: its status (images, conditions,
/// addresses) is by far the largest part and none of it matters here.
/// A pod as [`pods_on_node`] keeps it: its name, namespace and UID.
pub fn trim_pod(pod: &mut Pod) {
    let uid = pod.metadata.uid.take();
    trim_meta(&mut pod.metadata, &[], &[]);
    pod.metadata.uid = uid;
    pod.spec = None;
    pod.status = None;
}

/// The pods scheduled on `node`, UID → `namespace/name`: what names the pod behind a
/// squatter's cgroup. A field selector on `spec.nodeName` keeps it to this node, never a
/// cluster-wide Pod list.
pub async fn pods_on_node(
    client: Client,
    node: &str,
    timeout: Duration,
) -> Result<HashMap<String, String>, WatchError> {
    let params = ListParams::default()
        .fields(&format!("spec.nodeName={node}"))
        .limit(DEFAULT_PAGE_SIZE);
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

pub fn trim_node(node: &mut Node) {
    trim_meta(&mut node.metadata, &[LABEL_ZONE], &[]);
    node.spec = None;
    node.status = None;
}

// === ClusterView ===

/// How the view watches.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// A watch is fresh while something (an event, a bookmark, a successful list or
    /// watch response) arrived within this bound. It should exceed
    /// [`watch_timeout`](Self::watch_timeout): a watch request is reissued at least that
    /// often, so a healthy watch of a quiet cluster shows life at least that often even
    /// from an API server that sends no periodic bookmarks (kube-apiserver sends one
    /// about every minute).
    pub staleness: Duration,
    /// `timeoutSeconds` of each watch request. kube-runtime also treats a watch
    /// connection silent for this plus 5 s as dead and reconnects.
    pub watch_timeout: Duration,
    /// Page size of lists and relists.
    pub page_size: u32,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            // Two minutes of watch, three of staleness: a healthy quiet watch is renewed
            // well inside the bound; a stuck one is noticed within three minutes (an
            // erroring one at once).
            staleness: Duration::from_secs(180),
            watch_timeout: Duration::from_secs(120),
            page_size: DEFAULT_PAGE_SIZE,
        }
    }
}

/// The cluster as this node's kube-proxy sees it, kept current by watches: a cheap,
/// cloneable handle. The watches run on the Tokio runtime until the last handle is
/// dropped.
///
/// The watches never give up. Every error is logged, counted and retried with
/// kube-runtime's default backoff (0.8 s doubling to 30 s, with jitter); a `410 Gone`
/// makes kube-runtime relist by itself. Through an outage or a relist the stores keep
/// the last complete state (a relist replaces it only once it is complete), and
/// [`fresh`](Self::fresh) turns false, so a caller that must not act on stale state
/// (repair) can tell.
#[derive(Clone)]
pub struct ClusterView {
    inner: Arc<ViewInner>,
}

struct ViewInner {
    node: Option<String>,
    staleness: Duration,
    services: Arc<ObjectStore<Service>>,
    slices: Arc<ObjectStore<EndpointSlice>>,
    nodes: Option<Arc<ObjectStore<Node>>>,
    health: Arc<ViewHealth>,
    /// Counts changes that can move this node's NodePorts (see [`ClusterView::changes`]).
    changes: Arc<tokio::sync::watch::Sender<u64>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for ViewInner {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl fmt::Debug for ClusterView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterView")
            .field("node", &self.inner.node)
            .field("status", &self.status())
            .finish()
    }
}

impl ClusterView {
    /// Starts watching with `config` (see [`kube_config`]) for `node` (None: no Node
    /// watch; nothing is local). Must be called inside a Tokio runtime. Returns at once;
    /// see [`wait_synced`](Self::wait_synced).
    pub fn start(
        config: kube::Config,
        node: Option<&str>,
        options: WatchOptions,
    ) -> Result<Self, WatchError> {
        let node = node.filter(|n| !n.is_empty()).map(str::to_string);
        let health = Arc::new(ViewHealth {
            services: Health::default(),
            slices: Health::default(),
            node: node.as_ref().map(|_| Health::default()),
        });
        let mut config = config;
        // kube-client sets no read timeout by default, so a list whose server stops
        // answering would hang for ever. Any read now gets up to one watch period plus
        // slack (watches are renewed within `watch_timeout` anyway), counted from the
        // request rather than from when a pooled connection went idle.
        if config.read_timeout.is_none() {
            config.read_timeout = Some(options.watch_timeout + Duration::from_secs(30));
            config.reset_reader_on_write = true;
        }
        let client = ClientBuilder::try_from(config)
            .map_err(WatchError::Client)?
            .with_layer(&ActivityLayer {
                health: health.clone(),
            })
            .build();

        let timeout = u32::try_from(options.watch_timeout.as_secs().max(1)).unwrap_or(u32::MAX);
        let selected = watcher::Config::default()
            .labels(KUBE_PROXY_LABEL_SELECTOR)
            .timeout(timeout)
            .page_size(options.page_size);
        let mut tasks = Vec::new();
        let changes = Arc::new(tokio::sync::watch::Sender::new(0u64));
        let services = spawn_reflector(
            Api::<Service>::all(client.clone()),
            selected.clone(),
            Reflect {
                trim: trim_service,
                resource: WatchedResource::Services,
                relevant: Arc::new(|old: Option<&Service>, new: Option<&Service>| {
                    old.is_some_and(has_node_ports) || new.is_some_and(has_node_ports)
                }),
            },
            health.clone(),
            changes.clone(),
            &mut tasks,
        );
        let services_held = services.clone();
        let slices = spawn_reflector(
            Api::<EndpointSlice>::all(client.clone()),
            selected,
            Reflect {
                trim: trim_endpoint_slice,
                resource: WatchedResource::EndpointSlices,
                // A slice matters when its Service has NodePorts: most of a cluster's
                // endpoint churn is ClusterIP-only and changes nothing on this node's
                // NodePorts. (A slice of a Service not yet seen changes nothing either:
                // the Service's own arrival is a change.)
                relevant: Arc::new(move |old: Option<&EndpointSlice>, new: Option<&EndpointSlice>| {
                    let owner = new.or(old).and_then(|slice| {
                        let meta = slice.meta();
                        let name = meta.labels.as_ref()?.get(LABEL_SERVICE_NAME)?;
                        let key = (meta.namespace.clone().unwrap_or_default(), name.clone());
                        services_held.read().get(&key).cloned()
                    });
                    owner.is_some_and(|service| has_node_ports(&service))
                }),
            },
            health.clone(),
            changes.clone(),
            &mut tasks,
        );
        let nodes = node.as_deref().map(|name| {
            let this_node = watcher::Config::default()
                .fields(&format!("metadata.name={name}"))
                .timeout(timeout);
            spawn_reflector(
                Api::<Node>::all(client.clone()),
                this_node,
                Reflect {
                    trim: trim_node,
                    resource: WatchedResource::Node,
                    // Only the zone label is kept and read (topology); the Node's frequent
                    // status updates are not changes here.
                    relevant: Arc::new(|old: Option<&Node>, new: Option<&Node>| {
                        let zone = |n: Option<&Node>| {
                            n.and_then(|n| n.metadata.labels.as_ref()?.get(LABEL_ZONE).cloned())
                        };
                        old.is_none() || new.is_none() || zone(old) != zone(new)
                    }),
                },
                health.clone(),
                changes.clone(),
                &mut tasks,
            )
        });
        Ok(ClusterView {
            inner: Arc::new(ViewInner {
                node,
                staleness: options.staleness,
                services,
                slices,
                nodes,
                health,
                changes,
                tasks,
            }),
        })
    }

    /// A counter that moves whenever something that can change this node's NodePorts
    /// changes after the initial lists: a Service with NodePorts (or one gaining or losing
    /// them), an EndpointSlice of such a Service, the Node's zone, or a completed relist.
    /// The agent waits on it to scan soon after a change instead of at the next interval.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// The node this view computes the desired state of.
    pub fn node(&self) -> Option<&str> {
        self.inner.node.as_deref()
    }

    /// The initial lists are complete: Services, EndpointSlices and (when a node is
    /// set) the Node. Stays true through later outages: the last state is kept. The
    /// Node counts because its zone decides topology: a state computed before it is
    /// known could flip once it arrives.
    pub fn synced(&self) -> bool {
        self.inner.health.all().all(|(_, h)| h.lock().synced)
    }

    /// Waits until [`synced`](Self::synced) (and for ever if the API server never
    /// answers: put a timeout around it).
    pub async fn wait_synced(&self) {
        for (_, health) in self.inner.health.all() {
            health.wait_synced().await;
        }
    }

    /// The Service and EndpointSlice watches are synced, not failing, not relisting,
    /// and heard from within the staleness bound. A stale Node watch does not count
    /// (a zone label hardly ever changes); [`status`](Self::status) shows it.
    pub fn fresh(&self) -> bool {
        let now = Instant::now();
        let health = &self.inner.health;
        self.synced()
            && [&health.services, &health.slices]
                .into_iter()
                .all(|h| h.lock().fresh(now, self.inner.staleness))
    }

    /// The desired state of the node from the stores' current contents, or
    /// [`WatchError::NotSynced`] before the initial lists are complete. Whether the
    /// contents are current is [`fresh`](Self::fresh): a caller that must not act on
    /// stale state checks it before and after.
    pub fn desired_state(&self) -> Result<DesiredState, WatchError> {
        if !self.synced() {
            return Err(WatchError::NotSynced);
        }
        let inner = &self.inner;
        let services = inner.services.sorted();
        let slices = inner.slices.sorted();
        let zone = match (&inner.nodes, inner.node.as_deref()) {
            (Some(nodes), Some(name)) => node_zone(nodes.sorted().into_iter(), name),
            _ => None,
        };
        Ok(build(inner.node.as_deref(), &services, &slices, zone.as_deref()))
    }

    /// How each watch is doing.
    pub fn status(&self) -> ViewStatus {
        let now = Instant::now();
        let inner = &self.inner;
        let health = &inner.health;
        let staleness = inner.staleness;
        let services = health
            .services
            .lock()
            .status(now, staleness, inner.services.len());
        let endpoint_slices = health.slices.lock().status(now, staleness, inner.slices.len());
        let node = match (&health.node, &inner.nodes) {
            (Some(h), Some(store)) => Some(h.lock().status(now, staleness, store.len())),
            _ => None,
        };
        let synced = services.synced && endpoint_slices.synced && node.as_ref().is_none_or(|n| n.synced);
        ViewStatus {
            synced,
            fresh: synced && services.fresh && endpoint_slices.fresh,
            staleness,
            services,
            endpoint_slices,
            node,
        }
    }
}

/// Runs one reflector until the view is dropped: a kube-runtime watcher with the
/// default backoff, trimmed, into an [`ObjectStore`]; every item is recorded in `health`.
fn spawn_reflector<K>(
    api: Api<K>,
    config: watcher::Config,
    reflect: Reflect<K>,
    health: Arc<ViewHealth>,
    changes: Arc<tokio::sync::watch::Sender<u64>>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Arc<ObjectStore<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    let Reflect {
        trim,
        resource,
        relevant,
    } = reflect;
    let store = Arc::new(ObjectStore::default());
    let mut writer = StoreWriter {
        store: store.clone(),
        relist: None,
        relevant,
    };
    let stream = watcher(api, config).default_backoff().modify(trim);
    tasks.push(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let Some(health) = health.get(resource) else {
            return;
        };
        // Never `?` or `try_for_each`: an error ends nothing, the watcher recovers on
        // the next poll (after the backoff's delay).
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    let seen = Seen::of(&event);
                    // The store first: once health says synced, the objects are there.
                    let changed = writer.apply(event);
                    health.on_event(seen);
                    // Before the first complete list there is nothing to compare with:
                    // the first scan waits for the sync, not for changes.
                    if changed && health.lock().synced {
                        changes.send_modify(|n| *n = n.wrapping_add(1));
                    }
                }
                Err(error) => {
                    let label = watcher_error_label(&error);
                    if label == "gone" {
                        tracing::info!(%resource, %error, "resource version expired; relisting");
                    } else {
                        tracing::warn!(%resource, %error, "watch failed; retrying with backoff");
                    }
                    health.lock().on_error(label, &error);
                }
            }
        }
        // kube-runtime's watcher is an endless stream; should that ever change, say so.
        tracing::error!(%resource, "watch stream ended; this view will go stale");
        health.lock().ended = true;
    }));
    store
}

// === Store ===
//
// Why not kube-runtime's `reflector::store()`: its writer deep-copies every object of a
// relist into a second map and swaps the maps at the end, so during a relist the
// process holds the whole cluster twice. At 10,000 Services that took peak memory
// from ~88 MiB to ~130 MiB on every `410 Gone`. This store has the same semantics
// (objects appear at `InitDone`, atomically; the last complete state stays until then)
// but keeps the object it already holds when a relist lists it again at the same
// resourceVersion, which etcd guarantees means unchanged: a relist costs a map of
// pointers plus what changed.

/// `(namespace, name)`; namespace empty for cluster-scoped objects.
type ObjectKey = (String, String);

fn object_key<K: Resource>(object: &K) -> ObjectKey {
    let meta = object.meta();
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The objects of one watch, as of its last complete list plus the events since.
struct ObjectStore<K> {
    objects: RwLock<HashMap<ObjectKey, Arc<K>>>,
}

impl<K> Default for ObjectStore<K> {
    fn default() -> Self {
        ObjectStore {
            objects: RwLock::new(HashMap::new()),
        }
    }
}

impl<K> ObjectStore<K> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<ObjectKey, Arc<K>>> {
        // A map of Arcs is whole whatever a panicking writer did.
        self.objects.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<ObjectKey, Arc<K>>> {
        self.objects.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every object, sorted by namespace and name so that the same objects always give
    /// the same desired state, problems included (a hash map has no stable order).
    fn sorted(&self) -> Vec<Arc<K>> {
        let objects = self.read();
        let mut entries: Vec<(&ObjectKey, &Arc<K>)> = objects.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        entries.into_iter().map(|(_, o)| o.clone()).collect()
    }

    fn len(&self) -> usize {
        self.read().len()
    }
}

/// Whether a change from `old` to `new` (None: absent) can move this node's NodePorts.
type Relevance<K> = Arc<dyn Fn(Option<&K>, Option<&K>) -> bool + Send + Sync>;

/// How one watch's objects are kept: trimmed, and which changes count.
struct Reflect<K> {
    trim: fn(&mut K),
    resource: WatchedResource,
    relevant: Relevance<K>,
}

/// The Service has a NodePort (or a healthCheckNodePort): its changes can move this
/// node's NodePort rules.
fn has_node_ports(service: &Service) -> bool {
    service.spec.as_ref().is_some_and(|spec| {
        spec.health_check_node_port.is_some()
            || spec
                .ports
                .iter()
                .flatten()
                .any(|p| p.node_port.is_some_and(|n| n != 0))
    })
}

/// Applies a watcher's events to an [`ObjectStore`].
struct StoreWriter<K> {
    store: Arc<ObjectStore<K>>,
    /// The list under way, from `Init` to `InitDone`.
    relist: Option<HashMap<ObjectKey, Arc<K>>>,
    relevant: Relevance<K>,
}

impl<K: Resource + Clone> StoreWriter<K> {
    /// Applies `event`; true when it changed something relevant (a completed relist
    /// always counts: what it replaced is not compared).
    fn apply(&mut self, event: watcher::Event<K>) -> bool {
        match event {
            watcher::Event::Apply(mut object) => {
                // A change seen on the watch: the grace window runs from now, when
                // portdrift saw it, not from what the API recorded (creation and
                // managedFields times were folded into creationTimestamp by the trim).
                object.meta_mut().creation_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
                let old = self.store.write().insert(object_key(&object), compact(&object));
                (self.relevant)(old.as_deref(), Some(&object))
            }
            watcher::Event::Delete(object) => {
                let old = self.store.write().remove(&object_key(&object));
                (self.relevant)(Some(old.as_deref().unwrap_or(&object)), None)
            }
            // A list (re)starts; an unfinished one is abandoned.
            watcher::Event::Init => {
                self.relist = Some(HashMap::new());
                false
            }
            watcher::Event::InitApply(object) => {
                let key = object_key(&object);
                let held = self.store.read().get(&key).cloned();
                let object = match held {
                    Some(held) if same_version(held.as_ref(), &object) => held,
                    _ => compact(&object),
                };
                self.relist.get_or_insert_default().insert(key, object);
                false
            }
            watcher::Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                // The old map is dropped outside the lock.
                let _old = std::mem::replace(&mut *self.store.write(), listed);
                true
            }
        }
    }
}

/// A fresh copy of a trimmed object for the store. The original's remaining pieces
/// sit among the freed pieces of the full object it was trimmed from (managedFields and
/// all), and holding them pins those partly-freed pages; a copy is allocated compactly.
/// Measured at 10,000 Services: 4 MiB less resident memory, for 10 ms of copying.
fn compact<K: Clone>(object: &K) -> Arc<K> {
    Arc::new(object.clone())
}

/// The same object at the same resourceVersion: unchanged.
fn same_version<K: Resource>(a: &K, b: &K) -> bool {
    let version = |o: &K| o.meta().resource_version.clone().filter(|v| !v.is_empty());
    version(a).is_some() && version(a) == version(b)
}

// === Health ===

/// What is known about each watch.
#[derive(Debug)]
struct ViewHealth {
    services: Health,
    slices: Health,
    node: Option<Health>,
}

impl ViewHealth {
    fn get(&self, resource: WatchedResource) -> Option<&Health> {
        match resource {
            WatchedResource::Services => Some(&self.services),
            WatchedResource::EndpointSlices => Some(&self.slices),
            WatchedResource::Node => self.node.as_ref(),
            WatchedResource::Pods => None,
        }
    }

    fn all(&self) -> impl Iterator<Item = (WatchedResource, &Health)> {
        [
            (WatchedResource::Services, Some(&self.services)),
            (WatchedResource::EndpointSlices, Some(&self.slices)),
            (WatchedResource::Node, self.node.as_ref()),
        ]
        .into_iter()
        .filter_map(|(r, h)| Some((r, h?)))
    }
}

#[derive(Debug)]
struct Health {
    state: Mutex<HealthState>,
    /// Becomes true once `state.synced` is, which is after the store has the list:
    /// what [`ClusterView::wait_synced`] waits on, so that `synced()` and the objects
    /// are there when the wait returns.
    synced: tokio::sync::watch::Sender<bool>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            state: Mutex::default(),
            synced: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl Health {
    fn lock(&self) -> MutexGuard<'_, HealthState> {
        // The state is plain counters and flags, valid whatever a panicking holder did.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn on_event(&self, seen: Seen) {
        let synced = {
            let mut state = self.lock();
            state.on_event(seen);
            state.synced
        };
        if synced && !*self.synced.borrow() {
            self.synced.send_replace(true);
        }
    }

    async fn wait_synced(&self) {
        let mut synced = self.synced.subscribe();
        // An error means the sender is gone, which cannot happen while `self` lives.
        let _ = synced.wait_for(|s| *s).await;
    }
}

/// What a watcher event means for health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// `Init`: a list starts.
    ListStart,
    /// `InitDone`: a list is complete and applied.
    ListDone,
    /// An object (listed, added, changed or deleted).
    Object,
}

impl Seen {
    fn of<K>(event: &watcher::Event<K>) -> Seen {
        match event {
            watcher::Event::Init => Seen::ListStart,
            watcher::Event::InitDone => Seen::ListDone,
            _ => Seen::Object,
        }
    }
}

#[derive(Debug, Default)]
struct HealthState {
    /// The first complete list has been applied.
    synced: bool,
    /// A relist has begun and not completed: the store holds the state from before.
    relisting: bool,
    /// The last thing the watch reported was an error.
    failing: bool,
    /// The watch stream ended (never expected).
    ended: bool,
    last_event: Option<Instant>,
    last_activity: Option<Instant>,
    relists: u64,
    errors: BTreeMap<&'static str, u64>,
    last_error: Option<String>,
}

impl HealthState {
    fn on_event(&mut self, seen: Seen) {
        let now = Instant::now();
        self.last_event = Some(now);
        self.last_activity = Some(now);
        self.failing = false;
        match seen {
            Seen::ListStart if self.synced && !self.relisting => {
                self.relisting = true;
                self.relists += 1;
            }
            Seen::ListDone => {
                self.synced = true;
                self.relisting = false;
            }
            _ => {}
        }
    }

    fn on_error(&mut self, label: &'static str, error: &watcher::Error) {
        self.failing = true;
        *self.errors.entry(label).or_default() += 1;
        self.last_error = Some(error.to_string());
    }

    /// A response arrived for this watch's collection: the API server is there.
    fn on_response(&mut self, status: http::StatusCode) {
        if status.is_success() {
            self.last_activity = Some(Instant::now());
            self.failing = false;
        }
    }

    /// Bytes arrived on a list or watch response: events and bookmarks alike (the
    /// watcher consumes bookmarks without telling its consumer, so they are seen here).
    fn on_data(&mut self) {
        self.last_activity = Some(Instant::now());
    }

    fn fresh(&self, now: Instant, staleness: Duration) -> bool {
        self.synced
            && !self.failing
            && !self.relisting
            && !self.ended
            && self
                .last_activity
                .is_some_and(|t| now.saturating_duration_since(t) <= staleness)
    }

    fn status(&self, now: Instant, staleness: Duration, objects: usize) -> WatchStatus {
        WatchStatus {
            synced: self.synced,
            fresh: self.fresh(now, staleness),
            failing: self.failing,
            relisting: self.relisting,
            objects,
            since_last_event: self.last_event.map(|t| now.saturating_duration_since(t)),
            since_last_activity: self.last_activity.map(|t| now.saturating_duration_since(t)),
            relists: self.relists,
            errors: self.errors.values().sum(),
            errors_by_kind: self.errors.clone(),
            last_error: self.last_error.clone(),
        }
    }
}

/// How the view is doing (for `/readyz`, metrics and logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewStatus {
    /// [`ClusterView::synced`].
    pub synced: bool,
    /// [`ClusterView::fresh`].
    pub fresh: bool,
    /// The staleness bound in force.
    pub staleness: Duration,
    pub services: WatchStatus,
    pub endpoint_slices: WatchStatus,
    /// None when the view has no node.
    pub node: Option<WatchStatus>,
}

/// How one watch is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchStatus {
    /// Its first complete list has been applied.
    pub synced: bool,
    /// Synced, not failing, not relisting, and heard from within the staleness bound.
    pub fresh: bool,
    /// The last thing it reported was an error (it is retrying).
    pub failing: bool,
    /// A relist is under way; the store still holds the state from before it.
    pub relisting: bool,
    /// Objects in the store.
    pub objects: usize,
    /// Time since the last event (object added, changed, deleted; list start and end).
    pub since_last_event: Option<Duration>,
    /// Time since anything arrived from the API server for this watch: events,
    /// bookmarks, list pages, a watch request accepted.
    pub since_last_activity: Option<Duration>,
    /// Relists after the first list (after a `410 Gone`, say).
    pub relists: u64,
    /// Errors so far, all kinds.
    pub errors: u64,
    /// Errors so far by [`watcher_error_label`].
    pub errors_by_kind: BTreeMap<&'static str, u64>,
    /// The last error's message.
    pub last_error: Option<String>,
}

// === HTTP activity ===
//
// kube-runtime's watcher swallows bookmarks and watch renewals: its stream is silent
// while a quiet cluster's watch is perfectly healthy, and equally silent while a list
// hangs. This tower layer, wrapped around the view's client, sees every response and
// every chunk of every body, and records them as signs of life of the watch whose
// collection the request was for.

#[derive(Clone)]
struct ActivityLayer {
    health: Arc<ViewHealth>,
}

impl<S> tower::Layer<S> for ActivityLayer {
    type Service = ActivityService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ActivityService {
            inner,
            health: self.health.clone(),
        }
    }
}

#[derive(Clone)]
struct ActivityService<S> {
    inner: S,
    health: Arc<ViewHealth>,
}

/// The watched resource a request is for, when it is one.
type Watched = Option<(Arc<ViewHealth>, WatchedResource)>;

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for ActivityService<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<ActivityBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let path = request.uri().path();
        let watched: Watched = self
            .health
            .all()
            .find(|(r, _)| r.path() == path)
            .map(|(r, _)| (self.health.clone(), r));
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            if let Some((health, resource)) = &watched
                && let Some(h) = health.get(*resource)
            {
                h.lock().on_response(response.status());
            }
            Ok(response.map(|inner| ActivityBody { inner, watched }))
        })
    }
}

/// A response body that records each chunk as a sign of life of its watch.
struct ActivityBody<B> {
    inner: B,
    watched: Watched,
}

impl<B> http_body::Body for ActivityBody<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let frame = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &frame
            && let Some((health, resource)) = &self.watched
            && let Some(h) = health.get(*resource)
        {
            h.lock().on_data();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
