//! The desired state from the API server: reflectors for Services, EndpointSlices
//! and this node's Node, watched the way kube-proxy watches them.
//!
//! [`ClusterView`] is the daemon's long-lived view (kube-runtime's `watcher`, or where
//! the API server has no streaming lists `cached_list.rs`'s stream, into a store of our
//! own that makes relists cheap); [`load_once`](kube_client::load_once)
//! lists everything once for `portdrift scan`. Both trim objects on arrival
//! ([`trim_service`], [`trim_endpoint_slice`], [`trim_node`]) and build the same
//! [`DesiredState`] as [`desired_state`](crate::heart::desired::desired_state).
//!
//! Services and EndpointSlices are selected with [`KUBE_PROXY_LABEL_SELECTOR`], as
//! kube-proxy selects them, so Services opted out of kube-proxy are never listed:
//! unlike in a bundle's `cluster.json`, their nodePorts are unknown here.
//!
//! Start-up lists and relists are read from the API server's watch cache, never from
//! etcd (see `initial_list.rs`): at thousands of nodes a rollout or an etcd compaction
//! sends every agent to list at once.

mod cached_list;
mod health;
mod initial_list;
mod signal;
mod store;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::heart::desired::model::DesiredState;
use crate::heart::desired::record::{ServiceRecord, SliceRecord};
use crate::heart::desired::slices::ZoneTable;
use crate::heart::desired::trim::{trim_endpoint_slice, trim_node, trim_service};
use crate::sources::kube_client::{self, KUBE_PROXY_LABEL_SELECTOR, WatchError, WatchedResource};

use health::{Health, Seen, ViewHealth};
use initial_list::{Fallback, InitialList, ListMode};
use signal::ChangeSignal;
use store::{ObjectStore, Reflect, StoreWriter};

pub use health::{ViewStatus, WatchStatus, watcher_error_label};

/// How the view watches.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// A watch is fresh while something (event, bookmark, list or watch response)
    /// arrived within this bound. Keep it above [`watch_timeout`](Self::watch_timeout):
    /// a quiet watch shows life only when its request is reissued.
    pub staleness: Duration,
    /// `timeoutSeconds` of each watch request. kube-runtime also treats a watch
    /// connection silent for this plus 5 s as dead and reconnects.
    pub watch_timeout: Duration,
    /// Read the initial state and relists as streaming lists where the API server
    /// serves them (falling back by itself to lists with `resourceVersion=0` where it
    /// does not); false: such lists from the start.
    pub streaming_lists: bool,
    /// How long to wait before the first request (the agent's `--startup-jitter`
    /// draws it), so that a fleet of agents started together does not list together.
    pub start_delay: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            // Two minutes of watch, three of staleness: a healthy quiet watch is renewed
            // well inside the bound; a stuck one is noticed within three minutes (an
            // erroring one at once).
            staleness: Duration::from_secs(180),
            watch_timeout: Duration::from_secs(120),
            streaming_lists: true,
            start_delay: Duration::ZERO,
        }
    }
}

/// The cluster as this node's kube-proxy sees it, kept current by watches that run
/// until the last (cheap, cloneable) handle is dropped and retry every error forever.
/// Through an outage or relist the last complete state stays and
/// [`fresh`](Self::fresh) turns false, so repair can refuse to act on stale state.
#[derive(Clone)]
pub struct ClusterView {
    inner: Arc<ViewInner>,
}

struct ViewInner {
    node: Option<String>,
    staleness: Duration,
    services: Arc<ObjectStore<ServiceRecord>>,
    slices: Arc<ObjectStore<SliceRecord>>,
    /// The zone names the slices' records use, for the builds from them.
    zones: Arc<Mutex<ZoneTable>>,
    nodes: Option<Arc<ObjectStore<Node>>>,
    health: Arc<ViewHealth>,
    /// Counts changes that can move this node's NodePorts (see [`ClusterView::changes`]).
    changes: Arc<ChangeSignal>,
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
    /// Starts watching with `config` (see [`kube_config`](kube_client::kube_config))
    /// for `node` (None: no Node watch; nothing is local). Must be called inside a
    /// Tokio runtime. Returns at once; see [`wait_synced`](Self::wait_synced).
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
        let client = kube_client::watch_client(config, options.watch_timeout, health.clone())?;

        let timeout = u32::try_from(options.watch_timeout.as_secs().max(1)).unwrap_or(u32::MAX);
        let selected = watcher::Config::default()
            .labels(KUBE_PROXY_LABEL_SELECTOR)
            .timeout(timeout);
        let changes = Arc::new(ChangeSignal::new());
        let mut reflectors = Reflectors {
            start: Start::of(&options),
            health: health.clone(),
            changes: changes.clone(),
            tasks: Vec::new(),
        };
        let zones = Arc::new(Mutex::new(ZoneTable::default()));
        let services = reflectors.spawn(
            Api::<Service>::all(client.clone()),
            selected.clone(),
            Reflect {
                trim: trim_service,
                resource: WatchedResource::Services,
                reduce: store::service_reduce(),
                relevant: store::service_relevance(),
            },
        );
        let slices = reflectors.spawn(
            Api::<EndpointSlice>::all(client.clone()),
            selected,
            Reflect {
                trim: trim_endpoint_slice,
                resource: WatchedResource::EndpointSlices,
                reduce: store::slice_reduce(node.clone(), zones.clone()),
                relevant: store::slice_relevance(services.clone()),
            },
        );
        let nodes = node.as_deref().map(|name| {
            let this_node = watcher::Config::default()
                .fields(&format!("metadata.name={name}"))
                .timeout(timeout);
            reflectors.spawn(
                Api::<Node>::all(client.clone()),
                this_node,
                Reflect {
                    trim: trim_node,
                    resource: WatchedResource::Node,
                    reduce: store::node_reduce(),
                    relevant: store::node_relevance(),
                },
            )
        });
        Ok(ClusterView {
            inner: Arc::new(ViewInner {
                node,
                staleness: options.staleness,
                services,
                slices,
                zones,
                nodes,
                health,
                changes,
                tasks: reflectors.tasks,
            }),
        })
    }

    /// A counter that moves whenever something that can change this node's NodePorts
    /// changes, so the agent can scan soon after instead of at the next interval.
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
        Ok(store::desired_from_stores(
            inner.node.as_deref(),
            &inner.services,
            &inner.slices,
            &inner.zones,
            inner.nodes.as_deref(),
        ))
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

/// When and how a reflector reads its initial state.
#[derive(Debug, Clone, Copy)]
struct Start {
    delay: Duration,
    streaming: bool,
    streaming_limit: Duration,
}

impl Start {
    fn of(options: &WatchOptions) -> Start {
        Start {
            delay: options.start_delay,
            streaming: options.streaming_lists,
            // The API server ends every watch at its timeoutSeconds, streaming lists
            // too: one still without its closing bookmark past that never will have it.
            streaming_limit: options.watch_timeout + Duration::from_secs(30),
        }
    }
}

/// What a view's reflectors share, and the tasks they run in.
struct Reflectors {
    start: Start,
    health: Arc<ViewHealth>,
    changes: Arc<ChangeSignal>,
    tasks: Vec<JoinHandle<()>>,
}

impl Reflectors {
    /// Runs one reflector until the view is dropped: a kube-runtime watcher with the
    /// default backoff, trimmed, into an [`ObjectStore`]; every item is recorded in
    /// its health. It starts after the start delay, with streaming lists when asked
    /// for, and falls back to cached lists for good (a new stream, its store kept)
    /// when the API server does not end them ([`initial_list`]). Cached lists are read
    /// by [`cached_list`]'s stream, which gives the same events as kube-runtime's
    /// watcher but decodes the list object by object as it arrives.
    fn spawn<K, R>(
        &mut self,
        api: Api<K>,
        config: watcher::Config,
        reflect: Reflect<K, R>,
    ) -> Arc<ObjectStore<R>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
        R: store::Record + Send + Sync + 'static,
    {
        let Reflect {
            trim,
            resource,
            reduce,
            relevant,
        } = reflect;
        let store = Arc::new(ObjectStore::default());
        let reflector = Reflector {
            api,
            config,
            trim,
            resource,
            writer: StoreWriter::new(store.clone(), reduce, relevant),
            changes: self.changes.clone(),
        };
        let (health, start) = (self.health.clone(), self.start);
        self.tasks.push(tokio::spawn(async move {
            let Some(health) = health.get(resource) else {
                return;
            };
            tokio::time::sleep(start.delay).await;
            reflector
                .run(health, InitialList::new(start.streaming, start.streaming_limit))
                .await;
            // kube-runtime's watcher is an endless stream; should that ever change, say so.
            tracing::error!(%resource, "watch stream ended; this view will go stale");
            health.lock().ended = true;
        }));
        store
    }
}

/// One reflector's watch and store, moved into its task.
struct Reflector<K, R> {
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
    resource: WatchedResource,
    writer: StoreWriter<K, R>,
    changes: Arc<ChangeSignal>,
}

/// Why a reflector left a watcher stream.
enum StreamLeft {
    /// It ended (kube-runtime's never does).
    Ended,
    /// The initial list fell back to cached lists: a new stream reads them.
    FellBack,
}

type WatchItem<K> = Result<watcher::Event<K>, watcher::Error>;

impl<K, R> Reflector<K, R>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
    R: store::Record + Send + Sync + 'static,
{
    /// Reads watcher streams into the store until one ends.
    async fn run(mut self, health: &Health, mut initial: InitialList) {
        while let StreamLeft::FellBack = self.read_stream(health, &mut initial).await {}
    }

    async fn read_stream(&mut self, health: &Health, initial: &mut InitialList) -> StreamLeft {
        let stream = watcher_stream(self.api.clone(), &self.config, initial.mode(), self.trim);
        let mut stream = std::pin::pin!(stream);
        // Never `?` or `try_for_each`: an error ends nothing, the watcher recovers on
        // the next poll (after the backoff's delay).
        loop {
            let next = match initial.deadline() {
                Some(deadline) => tokio::time::timeout_at(deadline, stream.next()).await,
                None => Ok(stream.next().await),
            };
            let item = match next {
                Ok(Some(item)) => item,
                Ok(None) => return StreamLeft::Ended,
                Err(_) => {
                    log_fallback(self.resource, &initial.timed_out());
                    return StreamLeft::FellBack;
                }
            };
            if let Some(why) = initial.observe(&item, Instant::now()) {
                log_fallback(self.resource, &why);
                return StreamLeft::FellBack;
            }
            self.apply(health, item);
        }
    }

    fn apply(&mut self, health: &Health, item: WatchItem<K>) {
        let resource = self.resource;
        match item {
            Ok(event) => {
                let seen = Seen::of(&event);
                // The store first: once health says synced, the objects are there.
                let changed = self.writer.apply(event);
                health.on_event(seen);
                // Before the first complete list there is nothing to compare with:
                // the first scan waits for the sync, not for changes.
                if changed && health.lock().synced {
                    self.changes.notify();
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
}

/// The watcher's stream in `mode`, trimmed. kube-runtime's default backoff is
/// client-go's reflector backoff: 0.8 s doubling to 30 s, each delay plus a random
/// 0-100 % of itself (backon's jitter), reset after any success or 120 s without an
/// error.
fn watcher_stream<K>(
    api: Api<K>,
    config: &watcher::Config,
    mode: ListMode,
    trim: fn(&mut K),
) -> impl Stream<Item = WatchItem<K>> + Send + use<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    let mode_config = mode.config(config);
    let stream = match mode {
        ListMode::Streaming => watcher(api, mode_config).boxed(),
        // Read object by object as the list arrives, not whole (cached_list.rs).
        ListMode::Cached => cached_list::list_then_watch(api, mode_config).boxed(),
    };
    stream.default_backoff().modify(trim)
}

/// Says once per reflector (it falls back only once) that it lists from the cache now.
fn log_fallback(resource: WatchedResource, why: &Fallback) {
    let mode = ListMode::Cached.as_str();
    match why {
        // An API server before Kubernetes 1.32 (or with WatchList off) answers so.
        Fallback::Refused(_) => tracing::info!(
            %resource, reason = %why,
            "no streaming lists; reading with {mode}s (resourceVersion=0) from the API server's cache"
        ),
        Fallback::Unfinished | Fallback::TooLong(_) => tracing::warn!(
            %resource, reason = %why,
            "streaming list unfinished; reading with {mode}s (resourceVersion=0) from the API server's cache"
        ),
    }
}
