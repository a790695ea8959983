//! A fake Kubernetes API server over real HTTP/1.1 on 127.0.0.1, speaking the list and
//! watch protocol that kube-rs (and client-go) speak, for Services
//! (`/api/v1/services`), EndpointSlices (`/apis/discovery.k8s.io/v1/endpointslices`)
//! and Nodes (`/api/v1/nodes`):
//!
//! - **list:** `GET <collection>?labelSelector=…&fieldSelector=…&limit=…&continue=…` gives a
//!   `ServiceList` (…) with `metadata.resourceVersion` and, while pages remain,
//!   `metadata.continue`. Pages come from a snapshot taken at the first page, as etcd
//!   serves them.
//! - **watch:** `…&watch=true&resourceVersion=N&allowWatchBookmarks=true&timeoutSeconds=T`
//!   gives a chunked stream of newline-delimited `{"type":…,"object":…}` events: every
//!   change after N (from the history), then changes as they happen, `BOOKMARK`s (a
//!   periodic one and one before the server closes the watch after T seconds), and an
//!   `ERROR` event with a `Status` of code 410 when N is older than the history.
//!   An object that stops (starts) matching the selector is sent as `DELETED`
//!   (`ADDED`), as the API server's watch cache does.
//! - **streaming list:** a watch with `sendInitialEvents=true&resourceVersionMatch=NotOlderThan`
//!   sends `ADDED` for every matching object, then (when `allowWatchBookmarks=true`) a
//!   `BOOKMARK` annotated `k8s.io/initial-events-end: "true"` at the current
//!   resourceVersion, then carries on as a watch, as the API server's watch cache does
//!   with the `WatchList` feature (on by default since Kubernetes 1.32).
//!   [`FakeApiServer::set_streaming_lists`] makes it answer as a server without it
//!   ([`StreamingLists::Refused`]: `422 Invalid`) or as one that ignores the parameters
//!   ([`StreamingLists::Ignored`]).
//! - **list and watch options** are validated as the API server validates them
//!   (`resourceVersionMatch` needs a `resourceVersion`, is forbidden with `continue`,
//!   and on a watch needs `sendInitialEvents`, ...): a `422 Invalid` `ListOptions`.
//! - **from the cache:** a list with `resourceVersion=0` is served whole, `limit`
//!   ignored, as the watch cache serves it (the servers that lack streaming lists do);
//!   a watch from `resourceVersion` 0 (or none) starts with `ADDED` for every matching
//!   object. A list without `resourceVersion` is a consistent read, which the API server
//!   passes through to etcd (before Kubernetes 1.31's consistent reads from the cache).
//! - **selectors:** labels `key`, `!key`, `key=value`, `key==value`, `key!=value`
//!   (kube-proxy uses `!key` twice); fields `metadata.name` and `metadata.namespace`
//!   (`=`, `==`, `!=`). Anything else is a `400` like the real server's.
//!
//! Objects are real JSON from k8s-openapi types, with one monotonically increasing
//! resourceVersion across all kinds (etcd's revision). A [`FakeApiServer`] is also the
//! control handle: add, change and delete objects mid-test, force `410 Gone`, answer
//! with errors, hang requests, drop connections, hold the first list, and read back
//! every request URI (with [`FakeApiServer::requests_at`], when it arrived).
//! [`FakeApiServer::write_kubeconfig`] writes a kubeconfig (plain
//! http, no auth) for tests that run the binary.
//!
//! Writes, for what the agent reports (`--events`, `--node-condition`):
//!
//! - **get:** `GET <collection>/<name>` (namespaced kinds under
//!   `/api/v1/namespaces/<ns>/…` or `/apis/<group>/<version>/namespaces/<ns>/…`) gives
//!   the object, or `404` with a `NotFound` Status; a namespaced collection lists (and
//!   watches) one namespace.
//! - **Events:** `POST /api/v1/namespaces/<ns>/events` (core `v1`) and
//!   `POST /apis/events.k8s.io/v1/namespaces/<ns>/events` create an Event (`201`), after
//!   the API server's own checks: `application/json`, the namespace of the URL (`400`
//!   when the body says another), required fields and length limits, and an involved
//!   object in the Event's namespace (or, cluster-scoped, in `default`); `422 Invalid`
//!   otherwise, `409 AlreadyExists` for a name taken. The two groups are stored apart
//!   (the real server converts one into the other; the fake does not).
//!   `PATCH /apis/events.k8s.io/v1/namespaces/<ns>/events/<name>` (strategic merge or
//!   merge patch) updates one, as a series update does, after the API server's update
//!   checks: immutable fields, and `series.count >= 2` with a `lastObservedTime` when
//!   the series changed; `404` for an Event that does not exist.
//! - **Node status:** `PATCH /api/v1/nodes/<name>/status` with
//!   `application/strategic-merge-patch+json` merges `status`, its `conditions` and
//!   `addresses` by `type` as the strategic merge of a Node does (a `null` removes a
//!   field); `application/merge-patch+json` merges as RFC 7386 says (lists replaced);
//!   other patch types are a `415`. Only `status` is changed, as the status
//!   subresource does; watches see the Node `MODIFIED`.
//!
//! - **Pod proxy:** `GET /api/v1/namespaces/<ns>/pods/<name>[:<port>]/proxy/<path>`
//!   forwards to the pod's `status.podIP` and the port (default: its first container
//!   port) as the API server does, and answers with the pod's status and body; `503`
//!   with a `Status` when the pod cannot be reached, `404` for a pod that does not
//!   exist. A pod that accepts and never answers makes the request hang, as it does on
//!   a real server.
//!
//! - **RBAC:** [`FakeApiServer::forbid`] denies a verb on a resource (`list` `nodes`,
//!   `get` `pods/proxy`) with the `403 Forbidden` Status the API server's authorizer
//!   gives.
//!
//! Every write is recorded ([`FakeApiServer::writes`]); [`FakeApiServer::stored`]
//! reads back what is stored, as `GET` does over HTTP. [`FakeApiServer::set_write_failure`]
//! fails writes alone, so a watch can stay up while Events and patches fail.
//!
//! [`objects`] builds test objects, from single ones to a realistic 10,000-Service
//! cluster for benchmarks.
//!
//! [`FakeApiServer::traffic`] counts every request and its response body bytes by phase
//! ([`FakeApiServer::set_traffic_phase`]) and [`request_signature`], for
//! `scripts/bench-api.sh`, and for tests that weigh what a kind's lists and watches sent.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinHandle};

type Body = BoxBody<Bytes, Infallible>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The kinds the fake serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Service,
    EndpointSlice,
    Node,
    Pod,
    /// `events.k8s.io/v1` Events.
    Event,
    /// Core `v1` Events.
    CoreEvent,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::Service,
        Kind::EndpointSlice,
        Kind::Node,
        Kind::Pod,
        Kind::Event,
        Kind::CoreEvent,
    ];

    /// The collection's URL path.
    pub fn path(self) -> &'static str {
        match self {
            Kind::Service => "/api/v1/services",
            Kind::EndpointSlice => "/apis/discovery.k8s.io/v1/endpointslices",
            Kind::Node => "/api/v1/nodes",
            Kind::Pod => "/api/v1/pods",
            Kind::Event => "/apis/events.k8s.io/v1/events",
            Kind::CoreEvent => "/api/v1/events",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Node => "Node",
            Kind::Pod => "Pod",
            Kind::Event | Kind::CoreEvent => "Event",
        }
    }

    /// Whether its objects live in namespaces.
    fn namespaced(self) -> bool {
        self != Kind::Node
    }

    /// The resource as messages name it (`services`, `events.events.k8s.io`).
    fn resource(self) -> String {
        let plural = self.path().rsplit('/').next().unwrap_or_default();
        match self.api_version().split_once('/') {
            Some((group, _)) => format!("{plural}.{group}"),
            None => plural.to_string(),
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Kind::EndpointSlice => "discovery.k8s.io/v1",
            Kind::Event => "events.k8s.io/v1",
            Kind::Service | Kind::Node | Kind::Pod | Kind::CoreEvent => "v1",
        }
    }

    fn of<K: k8s_openapi::Resource>() -> Kind {
        match (K::API_VERSION, K::KIND) {
            (_, "Service") => Kind::Service,
            (_, "EndpointSlice") => Kind::EndpointSlice,
            (_, "Node") => Kind::Node,
            (_, "Pod") => Kind::Pod,
            ("events.k8s.io/v1", "Event") => Kind::Event,
            ("v1", "Event") => Kind::CoreEvent,
            (version, kind) => panic!("the fake API server does not serve {version} {kind}"),
        }
    }
}

/// How the server answers requests, from the next request on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Normally.
    None,
    /// With this HTTP status and a `Status` body (500: the API server is broken).
    Status(u16),
    /// Not at all, until the failure mode changes (then as the new mode says).
    Hang,
    /// By closing the connection without an answer.
    Drop,
    /// With 200 and a body that is not JSON (a proxy's error page, a cut stream).
    Malformed,
}

/// How the server answers a streaming list (a watch with `sendInitialEvents=true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamingLists {
    /// As a server with the `WatchList` feature (Kubernetes 1.32 and later by default).
    #[default]
    Supported,
    /// As a server without it (1.27 to 1.31 by default): `422 Invalid`,
    /// "sendInitialEvents is forbidden for watch unless the WatchList feature gate is
    /// enabled". (Before 1.27 it is a `422` too: no watch may carry
    /// `resourceVersionMatch`.)
    Refused,
    /// As a server that does not know the parameters and ignores them: a plain watch
    /// from the resourceVersion given (0: every object as `ADDED`), and never the
    /// bookmark that ends the initial events.
    Ignored,
}

/// An object as stored: what selectors look at, and its JSON.
#[derive(Debug, Clone)]
struct Stored {
    namespace: Option<String>,
    name: String,
    /// `spec.nodeName`, for pods' field selector.
    node_name: Option<String>,
    labels: BTreeMap<String, String>,
    rv: u64,
    json: Arc<str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Added,
    Modified,
    Deleted,
}

/// One entry of the history from which watches resume.
#[derive(Debug)]
struct LogEntry {
    kind: Kind,
    change: Change,
    old: Option<Stored>,
    new: Stored,
}

enum WatchMsg {
    Line(Bytes),
    End,
}

struct Watcher {
    id: u64,
    kind: Kind,
    selector: Selector,
    bookmarks: bool,
    tx: mpsc::UnboundedSender<WatchMsg>,
}

/// The rest of a paginated list, served from the snapshot of its first page.
struct Pages {
    kind: Kind,
    rv: u64,
    items: Vec<Arc<str>>,
}

#[derive(Default)]
struct State {
    rv: u64,
    objects: HashMap<Kind, BTreeMap<(String, String), Stored>>,
    log: Vec<LogEntry>,
    /// Watches from a resourceVersion below this get `410 Gone`; continue tokens from
    /// before it are expired (the history was compacted).
    gone_below: u64,
    watchers: Vec<Watcher>,
    next_watcher: u64,
    pages: HashMap<String, Pages>,
    next_token: u64,
    /// Every request: its method, its `path?query`, and when it arrived.
    requests: Vec<(String, String, tokio::time::Instant)>,
    /// `(verb, resource)` pairs RBAC denies, e.g. `("list", "nodes")`.
    forbidden: Vec<(String, String)>,
    writes: Vec<Write>,
}

/// A write the server received (whatever it answered).
#[derive(Debug, Clone)]
pub struct Write {
    pub method: String,
    /// `path?query`.
    pub target: String,
    pub content_type: Option<String>,
    /// The body, parsed (`Null` when it was not JSON).
    pub body: Value,
    /// The status code it was answered with.
    pub status: u16,
}

struct Shared {
    /// Requests and response bytes by signature ([`FakeApiServer::traffic`]).
    traffic: Mutex<Traffic>,
    state: Mutex<State>,
    failure: watch::Sender<Failure>,
    /// Like `failure`, for writes (anything but `GET`) alone.
    write_failure: watch::Sender<Failure>,
    lists_held: watch::Sender<bool>,
    connections: Mutex<Vec<AbortHandle>>,
    streaming: Mutex<StreamingLists>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running fake API server, and the handle that controls it. Stops when dropped.
pub struct FakeApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        for connection in lock(&self.shared.connections).drain(..) {
            connection.abort();
        }
    }
}

/// How often [`FakeApiServer::start`]'s server sends every watch a bookmark.
pub const BOOKMARK_INTERVAL: Duration = Duration::from_millis(250);

impl FakeApiServer {
    /// Starts a server on 127.0.0.1 (a free port) that sends a bookmark to every watch
    /// that allows them every 250 ms.
    pub async fn start() -> FakeApiServer {
        FakeApiServer::start_with_bookmarks(Some(BOOKMARK_INTERVAL)).await
    }

    /// Starts a server that sends periodic bookmarks at `interval` (None: only the one
    /// before a watch times out).
    pub async fn start_with_bookmarks(interval: Option<Duration>) -> FakeApiServer {
        let any_port = SocketAddr::from(([127, 0, 0, 1], 0));
        FakeApiServer::start_at(any_port, interval).await
    }

    /// Starts a server on `addr` (port 0: a free one), with periodic bookmarks as
    /// [`start_with_bookmarks`](Self::start_with_bookmarks). A fixed address lets a
    /// server that was stopped come back where its clients' kubeconfig points.
    pub async fn start_at(addr: SocketAddr, interval: Option<Duration>) -> FakeApiServer {
        let listener = TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            traffic: Mutex::new(Traffic::default()),
            state: Mutex::new(State {
                rv: 1,
                ..State::default()
            }),
            failure: watch::channel(Failure::None).0,
            write_failure: watch::channel(Failure::None).0,
            lists_held: watch::channel(false).0,
            connections: Mutex::new(Vec::new()),
            streaming: Mutex::new(StreamingLists::default()),
        });
        let mut tasks = vec![tokio::spawn(accept_loop(listener, shared.clone()))];
        if let Some(interval) = interval {
            let shared = shared.clone();
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(interval);
                loop {
                    tick.tick().await;
                    shared.bookmark_all();
                }
            }));
        }
        FakeApiServer { addr, shared, tasks }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube-rs client configuration for this server (plain http, no auth).
    pub fn config(&self) -> kube::Config {
        kube::Config::new(self.url().parse().expect("a valid URL"))
    }

    /// Writes a kubeconfig for this server (plain http, no auth) into `dir`; its path.
    pub fn write_kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\n\
             current-context: fake\nusers:\n- name: fake\n  user: {{}}\n",
            self.url()
        );
        std::fs::write(&path, text).expect("write the kubeconfig");
        path
    }

    /// Creates or replaces an object (its `metadata.resourceVersion` is set by the
    /// server); open watches see `ADDED` or `MODIFIED`. Returns the new resourceVersion.
    pub fn apply<K: k8s_openapi::Resource + serde::Serialize>(&self, object: &K) -> u64 {
        let value = serde_json::to_value(object).expect("k8s-openapi objects serialize");
        lock(&self.shared.state).apply(Kind::of::<K>(), value)
    }

    /// Creates or replaces many objects at once.
    pub fn apply_all<K: k8s_openapi::Resource + serde::Serialize>(&self, objects: &[K]) -> u64 {
        let mut state = lock(&self.shared.state);
        let mut rv = state.rv;
        for object in objects {
            let value = serde_json::to_value(object).expect("k8s-openapi objects serialize");
            rv = state.apply(Kind::of::<K>(), value);
        }
        rv
    }

    /// Deletes an object; open watches see `DELETED`. False when there was none.
    pub fn delete<K: k8s_openapi::Resource>(&self, namespace: Option<&str>, name: &str) -> bool {
        lock(&self.shared.state).delete(Kind::of::<K>(), namespace, name)
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.state).rv
    }

    /// Compacts the history and ends every open watch with an `ERROR` event carrying a
    /// `410 Gone` Status, as the API server does when a watcher falls out of its
    /// window: clients must relist.
    pub fn force_gone(&self) {
        let mut state = lock(&self.shared.state);
        state.compact();
        let line = event_line("ERROR", &gone_status(state.rv));
        for watcher in state.watchers.drain(..) {
            let _ = watcher.tx.send(WatchMsg::Line(line.clone()));
            let _ = watcher.tx.send(WatchMsg::End);
        }
    }

    /// Compacts the history without touching open watches: a watch resumed from an
    /// older resourceVersion gets `410 Gone`, and outstanding continue tokens expire.
    pub fn compact(&self) {
        lock(&self.shared.state).compact();
    }

    /// How requests are answered from now on. Leaving [`Failure::Hang`] releases the
    /// hanging requests into the new mode.
    pub fn set_failure(&self, failure: Failure) {
        self.shared.failure.send_replace(failure);
    }

    /// How writes (anything but `GET`) are answered from now on, on top of
    /// [`set_failure`](Self::set_failure).
    pub fn set_write_failure(&self, failure: Failure) {
        self.shared.write_failure.send_replace(failure);
    }

    /// Every write so far, in order.
    pub fn writes(&self) -> Vec<Write> {
        lock(&self.shared.state).writes.clone()
    }

    /// The stored objects of `kind`, as `GET` gives them.
    pub fn stored(&self, kind: Kind) -> Vec<Value> {
        let state = lock(&self.shared.state);
        let objects = state.objects.get(&kind).into_iter().flat_map(|o| o.values());
        objects
            .map(|o| serde_json::from_str(&o.json).expect("stored JSON parses"))
            .collect()
    }

    /// Holds list requests and streaming lists (not other watches) until released: a
    /// client's initial sync cannot complete meanwhile.
    pub fn hold_lists(&self, held: bool) {
        self.shared.lists_held.send_replace(held);
    }

    /// Closes every open connection at once, mid-response where one is streaming.
    pub fn drop_connections(&self) {
        for connection in lock(&self.shared.connections).drain(..) {
            connection.abort();
        }
        // The watches' bodies die with their connections; forget their subscriptions.
        lock(&self.shared.state).watchers.retain(|w| !w.tx.is_closed());
    }

    /// Sends a bookmark to every open watch that allows them.
    pub fn send_bookmarks(&self) {
        self.shared.bookmark_all();
    }

    /// Every request so far, as `path?query` (the query as sent, percent-encoded).
    pub fn requests(&self) -> Vec<String> {
        let state = lock(&self.shared.state);
        state
            .requests
            .iter()
            .map(|(_, target, _)| target.clone())
            .collect()
    }

    /// Every request so far, as `path?query`, with when it arrived.
    pub fn requests_at(&self) -> Vec<(tokio::time::Instant, String)> {
        let state = lock(&self.shared.state);
        state
            .requests
            .iter()
            .map(|(_, target, at)| (*at, target.clone()))
            .collect()
    }

    /// How streaming lists are answered from now on.
    pub fn set_streaming_lists(&self, mode: StreamingLists) {
        *lock(&self.shared.streaming) = mode;
    }

    /// Every request so far, as `METHOD path?query`: what a client asked of the API
    /// (the RBAC it needs is read off these).
    pub fn requests_with_methods(&self) -> Vec<String> {
        let state = lock(&self.shared.state);
        state
            .requests
            .iter()
            .map(|(method, target, _)| format!("{method} {target}"))
            .collect()
    }

    /// Requests to `kind`'s collection so far.
    pub fn requests_for(&self, kind: Kind) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|r| r.split('?').next() == Some(kind.path()))
            .collect()
    }

    /// Starts a new phase of the traffic count: requests and bytes from now on are
    /// counted under `phase` (the first is `startup`).
    pub fn set_traffic_phase(&self, phase: &str) {
        lock(&self.shared.traffic).phase = Some(phase.to_string());
    }

    /// Requests and response body bytes so far, by phase and request signature
    /// ([`request_signature`]), in order.
    pub fn traffic(&self) -> Vec<TrafficLine> {
        let traffic = lock(&self.shared.traffic);
        let lines = traffic.by.iter().map(|((phase, signature), tally)| TrafficLine {
            phase: phase.clone(),
            signature: signature.clone(),
            requests: tally.requests,
            bytes: tally.bytes,
        });
        lines.collect()
    }

    /// Denies `verb` on `resource` from now on, as RBAC does for a user without it:
    /// `("list", "nodes")`, `("get", "pods/proxy")`, `("list", "pods")`.
    pub fn forbid(&self, verb: &str, resource: &str) {
        let mut state = lock(&self.shared.state);
        state.forbidden.push((verb.to_string(), resource.to_string()));
    }

    /// Watches open now.
    pub fn open_watches(&self) -> usize {
        let mut state = lock(&self.shared.state);
        state.watchers.retain(|w| !w.tx.is_closed());
        state.watchers.len()
    }
}

/// The decoded value of query parameter `key` in a recorded request.
pub fn query_param(request: &str, key: &str) -> Option<String> {
    let query = request.split_once('?')?.1;
    parse_query(query).remove(key)
}

impl Shared {
    fn bookmark_all(&self) {
        let mut state = lock(&self.state);
        let rv = state.rv;
        state
            .watchers
            .retain(|w| !w.bookmarks || w.tx.send(WatchMsg::Line(bookmark_line(w.kind, rv))).is_ok());
    }

    /// Ends watch `id` as the server does at `timeoutSeconds`: a last bookmark (after
    /// every event already queued for it), then the end of the stream.
    fn end_watch(&self, id: u64) {
        let mut state = lock(&self.state);
        let rv = state.rv;
        if let Some(at) = state.watchers.iter().position(|w| w.id == id) {
            let watcher = state.watchers.remove(at);
            if watcher.bookmarks {
                let _ = watcher.tx.send(WatchMsg::Line(bookmark_line(watcher.kind, rv)));
            }
            let _ = watcher.tx.send(WatchMsg::End);
        }
    }
}

impl State {
    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn apply(&mut self, kind: Kind, mut value: Value) -> u64 {
        let rv = self.next_rv();
        value["metadata"]["resourceVersion"] = json!(rv.to_string());
        let new = stored(&value, rv);
        let key = (new.namespace.clone().unwrap_or_default(), new.name.clone());
        let old = self.objects.entry(kind).or_default().insert(key, new.clone());
        let change = if old.is_some() {
            Change::Modified
        } else {
            Change::Added
        };
        self.publish(LogEntry {
            kind,
            change,
            old,
            new,
        });
        rv
    }

    fn delete(&mut self, kind: Kind, namespace: Option<&str>, name: &str) -> bool {
        let key = (namespace.unwrap_or_default().to_string(), name.to_string());
        let Some(old) = self.objects.entry(kind).or_default().remove(&key) else {
            return false;
        };
        // The deleted object carries the deletion's resourceVersion, which is where a
        // watcher resumes from.
        let rv = self.next_rv();
        let mut value: Value = serde_json::from_str(&old.json).expect("stored JSON parses");
        value["metadata"]["resourceVersion"] = json!(rv.to_string());
        let new = stored(&value, rv);
        self.publish(LogEntry {
            kind,
            change: Change::Deleted,
            old: Some(old),
            new,
        });
        true
    }

    /// Records a change and sends it to the open watches it concerns.
    fn publish(&mut self, entry: LogEntry) {
        self.watchers
            .retain(|w| match watch_line(&entry, w.kind, &w.selector) {
                Some(line) => w.tx.send(WatchMsg::Line(line)).is_ok(),
                None => true,
            });
        self.log.push(entry);
    }

    fn compact(&mut self) {
        // The list after a compaction must be at or above the floor, or the watch that
        // follows it would be gone at once.
        self.next_rv();
        self.gone_below = self.rv;
        self.log.clear();
        self.pages.clear();
    }
}

/// The watch event `entry` makes for a watch of `kind` with `selector`, if any.
fn watch_line(entry: &LogEntry, kind: Kind, selector: &Selector) -> Option<Bytes> {
    if entry.kind != kind {
        return None;
    }
    let was = entry.old.as_ref().is_some_and(|o| selector.matches(o));
    let is = selector.matches(&entry.new);
    let kind = match (entry.change, was, is) {
        (Change::Deleted, true, _) => "DELETED",
        (Change::Deleted, false, _) => return None,
        (_, false, true) => "ADDED",
        (_, true, true) => "MODIFIED",
        (_, true, false) => "DELETED",
        (_, false, false) => return None,
    };
    Some(raw_event_line(kind, &entry.new.json))
}

fn stored(value: &Value, rv: u64) -> Stored {
    let meta = &value["metadata"];
    let text = |v: &Value| v.as_str().map(str::to_string);
    Stored {
        namespace: text(&meta["namespace"]).filter(|s| !s.is_empty()),
        name: text(&meta["name"]).expect("objects given to the fake API server have a name"),
        node_name: text(&value["spec"]["nodeName"]),
        labels: meta["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default(),
        rv,
        json: Arc::from(serde_json::to_string(value).expect("JSON values serialize")),
    }
}

fn raw_event_line(kind: &str, object_json: &str) -> Bytes {
    Bytes::from(format!("{{\"type\":\"{kind}\",\"object\":{object_json}}}\n"))
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    raw_event_line(kind, &object.to_string())
}

fn bookmark_line(kind: Kind, rv: u64) -> Bytes {
    event_line(
        "BOOKMARK",
        &json!({"kind": kind.name(), "apiVersion": kind.api_version(), "metadata": {"resourceVersion": rv.to_string()}}),
    )
}

/// The bookmark that ends a streaming list's initial events.
fn initial_events_end_line(kind: Kind, rv: u64) -> Bytes {
    event_line(
        "BOOKMARK",
        &json!({"kind": kind.name(), "apiVersion": kind.api_version(), "metadata": {
            "resourceVersion": rv.to_string(),
            "annotations": {"k8s.io/initial-events-end": "true"},
        }}),
    )
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

fn gone_status(rv: u64) -> Value {
    status(410, "Expired", &format!("too old resource version: {rv}"))
}

// === Selectors ===

#[derive(Debug, Clone, Default)]
struct Selector {
    labels: Vec<LabelTerm>,
    fields: Vec<FieldTerm>,
}

#[derive(Debug, Clone)]
enum LabelTerm {
    Exists(String),
    NotExists(String),
    Equals(String, String),
    NotEquals(String, String),
}

#[derive(Debug, Clone)]
struct FieldTerm {
    field: String,
    value: String,
    equal: bool,
}

impl Selector {
    fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Selector, String> {
        let mut selector = Selector::default();
        for term in labels.into_iter().flat_map(|s| s.split(',')).map(str::trim) {
            if term.is_empty() {
                continue;
            }
            let parsed = if let Some(key) = term.strip_prefix('!') {
                LabelTerm::NotExists(key.to_string())
            } else if let Some((k, v)) = term.split_once("!=") {
                LabelTerm::NotEquals(k.to_string(), v.to_string())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                LabelTerm::Equals(k.to_string(), v.to_string())
            } else if term.contains([' ', '(']) {
                return Err(format!("unsupported label selector term {term:?}"));
            } else {
                LabelTerm::Exists(term.to_string())
            };
            selector.labels.push(parsed);
        }
        for term in fields.into_iter().flat_map(|s| s.split(',')).map(str::trim) {
            if term.is_empty() {
                continue;
            }
            let (field, value, equal) = if let Some((f, v)) = term.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, v, true)
            } else {
                return Err(format!("invalid field selector {term:?}"));
            };
            if !matches!(field, "metadata.name" | "metadata.namespace" | "spec.nodeName") {
                return Err(format!("field label not supported: {field}"));
            }
            selector.fields.push(FieldTerm {
                field: field.to_string(),
                value: value.to_string(),
                equal,
            });
        }
        Ok(selector)
    }

    fn matches(&self, object: &Stored) -> bool {
        let labels_match = self.labels.iter().all(|term| match term {
            LabelTerm::Exists(k) => object.labels.contains_key(k),
            LabelTerm::NotExists(k) => !object.labels.contains_key(k),
            LabelTerm::Equals(k, v) => object.labels.get(k) == Some(v),
            LabelTerm::NotEquals(k, v) => object.labels.get(k) != Some(v),
        });
        let fields_match = self.fields.iter().all(|term| {
            let actual = match term.field.as_str() {
                "metadata.name" => Some(object.name.as_str()),
                "spec.nodeName" => object.node_name.as_deref(),
                _ => object.namespace.as_deref(),
            };
            (actual.unwrap_or("") == term.value) == term.equal
        });
        labels_match && fields_match
    }
}

fn parse_query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// Decodes `application/x-www-form-urlencoded` text, as kube-rs encodes queries.
fn percent_decode(text: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes.get(i..i + 3) {
            Some([b'%', hi, lo]) => hex(*hi).zip(hex(*lo)).map(|(h, l)| (h * 16 + l) as u8),
            _ => None,
        };
        match (escaped, bytes[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
            }
            (None, b'+') => {
                out.push(b' ');
                i += 1;
            }
            (None, b) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

// === HTTP ===

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let conn_shared = shared.clone();
        let service = hyper::service::service_fn(move |request| counted(conn_shared.clone(), request));
        let connection = tokio::spawn(async move {
            // An error here is a client that went away, or a connection dropped on
            // purpose: nothing to report.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        let mut connections = lock(&shared.connections);
        connections.retain(|c| !c.is_finished());
        connections.push(connection.abort_handle());
    }
}

async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Result<Response<Body>, BoxError> {
    let target = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    lock(&shared.state).requests.push((
        request.method().to_string(),
        target.clone(),
        tokio::time::Instant::now(),
    ));
    if let Some(answer) = failure_answer(&shared.failure).await {
        return answer;
    }
    if let Some(answer) = forbidden_answer(&shared, request.method().as_str(), &target) {
        return Ok(answer);
    }
    let path = request.uri().path().to_string();
    let query = parse_query(request.uri().query().unwrap_or(""));
    let route = Route::parse(&path);
    if request.method() == Method::GET
        && let Some(target) = ProxyTarget::parse(&target)
    {
        return Ok(proxy_to_pod(&shared, &target).await);
    }
    if request.method() == Method::GET {
        return match route {
            Some(route) if route.name.is_none() => read_collection(&shared, &route, &query).await,
            Some(Route {
                kind,
                namespace,
                name: Some(name),
                subresource: None,
            }) => Ok(get_object(&shared, kind, namespace.as_deref(), &name)),
            _ => Ok(not_found_path(&path)),
        };
    }

    let method = request.method().as_str().to_string();
    let content_type = request
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = request.into_body().collect().await?.to_bytes();
    let answer = match failure_answer(&shared.write_failure).await {
        Some(answer) => answer,
        None => Ok(match route {
            Some(route) => write(&shared, &method, &route, content_type.as_deref(), &body),
            None => not_found_path(&path),
        }),
    };
    lock(&shared.state).writes.push(Write {
        method,
        target,
        content_type,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        status: answer.as_ref().map(|r| r.status().as_u16()).unwrap_or(0),
    });
    answer
}

/// The `403 Forbidden` the API server answers when RBAC denies the request's verb on
/// its resource (see [`FakeApiServer::forbid`]), worded as its authorizer does.
fn forbidden_answer(shared: &Shared, method: &str, target: &str) -> Option<Response<Body>> {
    let (verb, resource, namespace, name) = match ProxyTarget::parse(target) {
        Some(proxy) => (
            "get",
            "pods/proxy".to_string(),
            Some(proxy.namespace),
            Some(proxy.name),
        ),
        None => {
            let path = target.split('?').next().unwrap_or_default();
            let route = Route::parse(path)?;
            let watch = target.contains("watch=true") || target.contains("watch=1");
            let verb = match (method, &route.name) {
                ("GET", None) if watch => "watch",
                ("GET", None) => "list",
                ("GET", Some(_)) => "get",
                ("POST", _) => "create",
                ("PATCH", _) => "patch",
                ("PUT", _) => "update",
                ("DELETE", _) => "delete",
                _ => return None,
            };
            let plural = route.kind.path().rsplit('/').next().unwrap_or_default();
            let resource = match &route.subresource {
                Some(sub) => format!("{plural}/{sub}"),
                None => plural.to_string(),
            };
            (verb, resource, route.namespace, route.name)
        }
    };
    let denied = lock(&shared.state)
        .forbidden
        .iter()
        .any(|(v, r)| v == verb && *r == resource);
    if !denied {
        return None;
    }
    let base = resource.split('/').next().unwrap_or_default();
    let group = Kind::ALL
        .into_iter()
        .find(|k| k.path().ends_with(&format!("/{base}")))
        .and_then(|k| k.api_version().split_once('/').map(|(g, _)| g))
        .unwrap_or("");
    let scope = match &namespace {
        Some(ns) => format!("in the namespace {ns:?}"),
        None => "at the cluster scope".to_string(),
    };
    let qualified = if group.is_empty() {
        base.to_string()
    } else {
        format!("{base}.{group}")
    };
    let object = match &name {
        Some(name) => format!("{qualified} {name:?}"),
        None => qualified.clone(),
    };
    let message = format!(
        "{object} is forbidden: User \"system:anonymous\" cannot {verb} resource {resource:?} in API group {group:?} {scope}"
    );
    let mut body = status(403, "Forbidden", &message);
    body["details"] = json!({"kind": base});
    if let Some(name) = name {
        body["details"]["name"] = json!(name);
    }
    Some(json_response(StatusCode::FORBIDDEN, body.to_string()))
}

/// A pod-proxy request: `/api/v1/namespaces/NS/pods/NAME[:PORT]/proxy/PATH`.
struct ProxyTarget {
    namespace: String,
    name: String,
    port: Option<u16>,
    /// `/PATH[?QUERY]`, as the pod gets it.
    path: String,
}

impl ProxyTarget {
    fn parse(target: &str) -> Option<ProxyTarget> {
        let rest = target.strip_prefix("/api/v1/namespaces/")?;
        let (namespace, rest) = rest.split_once("/pods/")?;
        let (pod, path) = rest.split_once("/proxy")?;
        let (name, port) = match pod.split_once(':') {
            Some((name, port)) => (name, Some(port.parse().ok()?)),
            None => (pod, None),
        };
        let path = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        };
        Some(ProxyTarget {
            namespace: namespace.to_string(),
            name: name.to_string(),
            port,
            path,
        })
    }
}

/// Forwards a pod-proxy request to the pod over plain HTTP/1.0 and relays the answer.
async fn proxy_to_pod(shared: &Shared, target: &ProxyTarget) -> Response<Body> {
    let pod: Option<Value> = {
        let state = lock(&shared.state);
        let key = (target.namespace.clone(), target.name.clone());
        let stored = state.objects.get(&Kind::Pod).and_then(|pods| pods.get(&key));
        stored.and_then(|p| serde_json::from_str(&p.json).ok())
    };
    let Some(pod) = pod else {
        return not_found(Kind::Pod, &target.name);
    };
    let ip = pod["status"]["podIP"].as_str().unwrap_or_default().to_string();
    let port = target.port.or_else(|| {
        let port = &pod["spec"]["containers"][0]["ports"][0]["containerPort"];
        port.as_u64().and_then(|p| u16::try_from(p).ok())
    });
    let unreachable = |why: String| {
        let body = status(
            503,
            "ServiceUnavailable",
            &format!("error trying to reach service: {why}"),
        );
        json_response(StatusCode::SERVICE_UNAVAILABLE, body.to_string())
    };
    let Some(addr) = port.and_then(|port| format!("{ip}:{port}").parse::<SocketAddr>().ok()) else {
        return unreachable(format!("pod {} has no address to dial", target.name));
    };
    match http10_get(addr, &target.path).await {
        Ok((code, body)) => Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)).boxed())
            .expect("a valid response"),
        Err(e) => unreachable(format!("dial tcp {addr}: {e}")),
    }
}

/// One HTTP/1.0 GET: the status code and the body.
async fn http10_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP answer");
    let head_end = answer.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(bad)?;
    let head = String::from_utf8_lossy(&answer[..head_end]);
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(bad)?;
    Ok((code, answer[head_end + 4..].to_vec()))
}

/// The answer the failure mode `mode` calls for, if not a normal one (waiting while it
/// says hang).
async fn failure_answer(mode: &watch::Sender<Failure>) -> Option<Result<Response<Body>, BoxError>> {
    let mut failure = mode.subscribe();
    loop {
        let current = failure.borrow_and_update().clone();
        match current {
            Failure::None => return None,
            Failure::Status(code) => {
                let body = status(code, "InternalError", "the fake API server is failing on purpose");
                return Some(
                    StatusCode::from_u16(code)
                        .map(|code| json_response(code, body.to_string()))
                        .map_err(Into::into),
                );
            }
            // An error from the service makes hyper close the connection unanswered.
            Failure::Drop => return Some(Err("connection dropped on purpose".into())),
            Failure::Malformed => {
                return Some(Ok(json_response(
                    StatusCode::OK,
                    "{\"kind\": \"ServiceList\", \"items\": [{\"metadata\": <html>502 Bad Gateway"
                        .to_string(),
                )));
            }
            Failure::Hang => {
                if failure.changed().await.is_err() {
                    return Some(Err("server stopped".into()));
                }
            }
        }
    }
}

fn not_found_path(path: &str) -> Response<Body> {
    let body = status(404, "NotFound", &format!("the server could not find {path}"));
    json_response(StatusCode::NOT_FOUND, body.to_string())
}

/// A request path, parsed as the API server routes it.
#[derive(Debug)]
struct Route {
    kind: Kind,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

impl Route {
    /// `/api/v1[/namespaces/NS]/RESOURCE[/NAME[/SUB]]` or the same under
    /// `/apis/GROUP/VERSION`; `None` for anything the fake does not serve.
    fn parse(path: &str) -> Option<Route> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let prefix = match segments.first() {
            Some(&"api") => 2,
            Some(&"apis") => 3,
            _ => return None,
        };
        let mut rest = segments.get(prefix..)?;
        let mut namespace = None;
        if let ["namespaces", ns, tail @ ..] = rest
            && !tail.is_empty()
        {
            namespace = Some(ns.to_string());
            rest = tail;
        }
        let (resource, name, subresource) = match rest {
            [r] => (*r, None, None),
            [r, n] => (*r, Some(n.to_string()), None),
            [r, n, s] => (*r, Some(n.to_string()), Some(s.to_string())),
            _ => return None,
        };
        let collection = format!("/{}/{resource}", segments[..prefix].join("/"));
        let kind = Kind::ALL.into_iter().find(|k| k.path() == collection)?;
        // A cluster-scoped kind has no namespace; a namespaced object needs one.
        let scoped_wrong = matches!(
            (kind.namespaced(), &namespace, &name),
            (false, Some(_), _) | (true, None, Some(_))
        );
        (!scoped_wrong).then_some(Route {
            kind,
            namespace,
            name,
            subresource,
        })
    }
}

/// `GET` of a collection: a list, or a watch with `watch=true`.
async fn read_collection(
    shared: &Arc<Shared>,
    route: &Route,
    query: &HashMap<String, String>,
) -> Result<Response<Body>, BoxError> {
    let kind = route.kind;
    let mut selector = match Selector::parse(
        query.get("labelSelector").map(String::as_str),
        query.get("fieldSelector").map(String::as_str),
    ) {
        Ok(selector) => selector,
        Err(message) => {
            let body = status(400, "BadRequest", &message);
            return Ok(json_response(StatusCode::BAD_REQUEST, body.to_string()));
        }
    };
    if let Some(namespace) = &route.namespace {
        selector.fields.push(FieldTerm {
            field: "metadata.namespace".into(),
            value: namespace.clone(),
            equal: true,
        });
    }
    let watching = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    let streaming = *lock(&shared.streaming);
    let problems = list_options_problems(query, watching, streaming);
    if !problems.is_empty() {
        return Ok(invalid_list_options(&problems));
    }
    let streaming_list = watching
        && streaming != StreamingLists::Ignored
        && query.get("sendInitialEvents").is_some_and(|v| v == "true");
    if !watching || streaming_list {
        let mut held = shared.lists_held.subscribe();
        if held.wait_for(|held| !held).await.is_err() {
            return Err("server stopped".into());
        }
    }
    if watching {
        Ok(start_watch(shared, kind, selector, query, streaming))
    } else {
        Ok(list(shared, kind, &selector, query))
    }
}

/// What the API server's validation of list and watch options (`ValidateListOptions`)
/// refuses: `(field, problem)`. A server that ignores streaming lists knows none of
/// their parameters on a watch.
fn list_options_problems(
    query: &HashMap<String, String>,
    watching: bool,
    streaming: StreamingLists,
) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    fn forbid(problems: &mut Vec<(String, String)>, field: &str, text: &str) {
        problems.push((field.to_string(), format!("Forbidden: {text}")));
    }
    let param = |key: &str| query.get(key).map(String::as_str);
    let matching = param("resourceVersionMatch").unwrap_or_default();
    let continued = param("continue").is_some_and(|c| !c.is_empty());
    let initial_events = param("sendInitialEvents").is_some();
    let unsupported =
        |supported: &str| format!("Unsupported value: {matching:?}: supported values: {supported}");
    if watching {
        if streaming == StreamingLists::Ignored {
            return problems;
        }
        if initial_events {
            if matching != "NotOlderThan" {
                forbid(
                    &mut problems,
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                );
            }
            if streaming == StreamingLists::Refused {
                forbid(
                    &mut problems,
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                );
            }
        }
        if !matching.is_empty() {
            if !initial_events {
                forbid(
                    &mut problems,
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                );
            }
            if continued {
                forbid(
                    &mut problems,
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                );
            }
            if matching != "NotOlderThan" {
                problems.push(("resourceVersionMatch".into(), unsupported("\"NotOlderThan\"")));
            }
        }
        return problems;
    }
    if !matching.is_empty() {
        if param("resourceVersion").is_none_or(str::is_empty) {
            forbid(
                &mut problems,
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            );
        }
        if continued {
            forbid(
                &mut problems,
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            );
        }
        if matching == "Exact" && param("resourceVersion") == Some("0") {
            forbid(
                &mut problems,
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            );
        }
        if !matches!(matching, "Exact" | "NotOlderThan") {
            problems.push((
                "resourceVersionMatch".into(),
                unsupported("\"Exact\", \"NotOlderThan\", \"\""),
            ));
        }
    }
    if initial_events {
        forbid(
            &mut problems,
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        );
    }
    problems
}

/// `422 Invalid` for list options, as the API server words it.
fn invalid_list_options(problems: &[(String, String)]) -> Response<Body> {
    let listed: Vec<String> = problems.iter().map(|(f, p)| format!("{f}: {p}")).collect();
    let joined = match listed.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let mut body = status(
        422,
        "Invalid",
        &format!("ListOptions.meta.k8s.io \"\" is invalid: {joined}"),
    );
    body["details"] = json!({
        "group": "meta.k8s.io",
        "kind": "ListOptions",
        "causes": problems
            .iter()
            .map(|(field, text)| {
                let reason = if text.starts_with("Forbidden") { "FieldValueForbidden" } else { "FieldValueNotSupported" };
                json!({"reason": reason, "message": text, "field": field})
            })
            .collect::<Vec<_>>(),
    });
    json_response(StatusCode::UNPROCESSABLE_ENTITY, body.to_string())
}

/// `GET` of one object.
fn get_object(shared: &Shared, kind: Kind, namespace: Option<&str>, name: &str) -> Response<Body> {
    let state = lock(&shared.state);
    let key = (namespace.unwrap_or_default().to_string(), name.to_string());
    match state.objects.get(&kind).and_then(|objects| objects.get(&key)) {
        Some(object) => json_response(StatusCode::OK, object.json.to_string()),
        None => not_found(kind, name),
    }
}

fn not_found(kind: Kind, name: &str) -> Response<Body> {
    let body = status(
        404,
        "NotFound",
        &format!("{} \"{name}\" not found", kind.resource()),
    );
    json_response(StatusCode::NOT_FOUND, body.to_string())
}

fn json_response(status: StatusCode, body: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)).boxed())
        .expect("a valid response")
}

fn list(shared: &Shared, kind: Kind, selector: &Selector, query: &HashMap<String, String>) -> Response<Body> {
    let mut state = lock(&shared.state);
    let (rv, mut items) = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => match state.pages.remove(token) {
            Some(pages) if pages.kind == kind => (pages.rv, pages.items),
            _ => {
                let body = status(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result.",
                );
                return json_response(StatusCode::GONE, body.to_string());
            }
        },
        None => {
            let items = state
                .objects
                .get(&kind)
                .into_iter()
                .flat_map(|objects| objects.values())
                .filter(|o| selector.matches(o))
                .map(|o| o.json.clone())
                .collect();
            (state.rv, items)
        }
    };
    // resourceVersion=0 is served from the watch cache, which ignores `limit` (servers
    // without streaming lists, and so those this fallback is for, all do).
    let from_cache = query.get("resourceVersion").is_some_and(|rv| rv == "0");
    let limit = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0 && !from_cache);
    let mut continue_token = None;
    if let Some(limit) = limit
        && items.len() > limit
    {
        let rest = items.split_off(limit);
        state.next_token += 1;
        let token = format!("c{}-{}", rv, state.next_token);
        state.pages.insert(
            token.clone(),
            Pages {
                kind,
                rv,
                items: rest,
            },
        );
        continue_token = Some(token);
    }
    drop(state);

    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    let mut body = format!(
        "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
        kind.name(),
        kind.api_version(),
        metadata
    );
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(item);
    }
    body.push_str("]}");
    json_response(StatusCode::OK, body)
}

fn start_watch(
    shared: &Arc<Shared>,
    kind: Kind,
    selector: Selector,
    query: &HashMap<String, String>,
    streaming: StreamingLists,
) -> Response<Body> {
    let (tx, rx) = mpsc::unbounded_channel();
    let resource_version = query
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or_default();
    let from = resource_version.parse::<u64>().unwrap_or(0);
    let bookmarks = query.get("allowWatchBookmarks").is_some_and(|b| b == "true");
    let initial_events =
        streaming != StreamingLists::Ignored && query.get("sendInitialEvents").is_some_and(|v| v == "true");
    // From resourceVersion 0 (or none) a watch starts with the current state as `ADDED`
    // events; so does a streaming list, whatever resourceVersion it is not older than.
    let from_state = initial_events || from == 0;
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs);
    let id = {
        let mut state = lock(&shared.state);
        if from_state {
            let objects = state.objects.get(&kind).into_iter().flat_map(|o| o.values());
            for object in objects.filter(|o| selector.matches(o)) {
                let _ = tx.send(WatchMsg::Line(raw_event_line("ADDED", &object.json)));
            }
            // The watch cache sends bookmarks only to watches that allow them, this one too.
            if initial_events && bookmarks {
                let _ = tx.send(WatchMsg::Line(initial_events_end_line(kind, state.rv)));
            }
        }
        if !from_state && from < state.gone_below {
            let _ = tx.send(WatchMsg::Line(event_line("ERROR", &gone_status(from))));
            let _ = tx.send(WatchMsg::End);
            None
        } else {
            // The history after `from`, then live changes: queued under one lock, so
            // nothing is lost or sent twice between the two.
            let history = state.log.iter().filter(|e| !from_state && e.new.rv > from);
            for entry in history {
                if let Some(line) = watch_line(entry, kind, &selector) {
                    let _ = tx.send(WatchMsg::Line(line));
                }
            }
            state.next_watcher += 1;
            let id = state.next_watcher;
            state.watchers.push(Watcher {
                id,
                kind,
                selector,
                bookmarks,
                tx,
            });
            Some(id)
        }
    };
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let stream = futures::stream::unfold(
        (rx, shared.clone(), id, deadline),
        move |(mut rx, shared, id, mut deadline)| async move {
            loop {
                let at_deadline = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    message = rx.recv() => {
                        return match message {
                            Some(WatchMsg::Line(line)) => {
                                Some((Ok::<_, Infallible>(Frame::data(line)), (rx, shared, id, deadline)))
                            }
                            Some(WatchMsg::End) | None => None,
                        };
                    }
                    () = at_deadline => {
                        deadline = None;
                        match id {
                            Some(id) => shared.end_watch(id),
                            None => return None,
                        }
                    }
                }
            }
        },
    );
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .expect("a valid response")
}

// === Traffic ===

/// What the server was asked and what it sent, by phase and request signature.
#[derive(Default)]
struct Traffic {
    /// None: `startup`.
    phase: Option<String>,
    /// By phase, then signature.
    by: BTreeMap<(String, String), Tally>,
}

#[derive(Default)]
struct Tally {
    requests: u64,
    bytes: u64,
}

/// One row of [`FakeApiServer::traffic`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrafficLine {
    pub phase: String,
    /// [`request_signature`].
    pub signature: String,
    pub requests: u64,
    /// Response body bytes, counted when sent (a watch's under the phase it sends in).
    pub bytes: u64,
}

impl Traffic {
    fn tally(&mut self, signature: &str) -> &mut Tally {
        let phase = self.phase.as_deref().unwrap_or("startup").to_string();
        self.by.entry((phase, signature.to_string())).or_default()
    }
}

/// A request as a kind of request: `RESOURCE VERB` and its query parameters, less
/// what differs between clients or pages: selectors are left out, `resourceVersion`
/// becomes `rv=0`, `rv=<n>` or `rv=<none>`, a continue token `continue=<token>`, and
/// the rest are kept as sent, sorted (`services list rv=<none> limit=250`,
/// `endpointslices watch rv=<n> allowWatchBookmarks=true timeoutSeconds=120`).
pub fn request_signature(method: &Method, target: &str) -> String {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let query = parse_query(query);
    let watching = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    let (resource, verb) = match (ProxyTarget::parse(target), Route::parse(path)) {
        (Some(_), _) => ("pods/proxy".to_string(), "get"),
        (None, Some(route)) => {
            let plural = route.kind.path().rsplit('/').next().unwrap_or_default();
            let resource = match &route.subresource {
                Some(sub) => format!("{plural}/{sub}"),
                None => plural.to_string(),
            };
            let verb = match (method.as_str(), route.name.is_some()) {
                ("GET", true) => "get",
                ("GET", false) if watching => "watch",
                ("GET", false) => "list",
                ("POST", _) => "create",
                ("PATCH", _) => "patch",
                ("PUT", _) => "update",
                ("DELETE", _) => "delete",
                _ => "other",
            };
            (resource, verb)
        }
        (None, None) => (format!("unknown {method}"), "other"),
    };
    let mut params: Vec<String> = query
        .iter()
        .filter(|(key, _)| {
            !matches!(
                key.as_str(),
                "labelSelector" | "fieldSelector" | "watch" | "resourceVersion"
            )
        })
        .map(|(key, value)| match key.as_str() {
            "continue" => "continue=<token>".to_string(),
            _ => format!("{key}={value}"),
        })
        .collect();
    params.sort();
    if matches!(verb, "list" | "watch") {
        let rv = match query.get("resourceVersion").map(String::as_str) {
            None | Some("") => "rv=<none>",
            Some("0") => "rv=0",
            Some(_) => "rv=<n>",
        };
        params.insert(0, rv.to_string());
    }
    let mut signature = format!("{resource} {verb}");
    for param in params {
        signature.push(' ');
        signature.push_str(&param);
    }
    signature
}

/// [`handle`], with the request and every byte of its answer's body counted under its
/// signature.
async fn counted(shared: Arc<Shared>, request: Request<Incoming>) -> Result<Response<Body>, BoxError> {
    let target = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or_default();
    let signature = Arc::<str>::from(request_signature(request.method(), target));
    lock(&shared.traffic).tally(&signature).requests += 1;
    let (parts, body) = handle(shared.clone(), request).await?.into_parts();
    let body = body.map_frame(move |frame| {
        if let Some(data) = frame.data_ref() {
            lock(&shared.traffic).tally(&signature).bytes += data.len() as u64;
        }
        frame
    });
    Ok(Response::from_parts(parts, body.boxed()))
}

// === Writes ===

/// A write (anything but `GET`) to `route`.
fn write(
    shared: &Shared,
    method: &str,
    route: &Route,
    content_type: Option<&str>,
    body: &[u8],
) -> Response<Body> {
    match (method, route) {
        (
            "POST",
            Route {
                kind: kind @ (Kind::Event | Kind::CoreEvent),
                namespace: Some(namespace),
                name: None,
                ..
            },
        ) => create_event(shared, *kind, namespace, content_type, body),
        (
            "PATCH",
            Route {
                kind: Kind::Node,
                name: Some(name),
                subresource: Some(sub),
                ..
            },
        ) if sub == "status" => patch_node_status(shared, name, content_type, body),
        (
            "PATCH",
            Route {
                kind: Kind::Event,
                namespace: Some(namespace),
                name: Some(name),
                subresource: None,
            },
        ) => patch_event(shared, namespace, name, content_type, body),
        _ => {
            let body = status(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            );
            json_response(StatusCode::METHOD_NOT_ALLOWED, body.to_string())
        }
    }
}

/// The media type of a `Content-Type` header, without parameters.
fn media_type(content_type: Option<&str>) -> &str {
    content_type
        .and_then(|c| c.split(';').next())
        .map(str::trim)
        .unwrap_or("")
}

fn unsupported_media_type(content_type: Option<&str>) -> Response<Body> {
    let message = format!(
        "the body of the request was in an unknown format ({:?})",
        media_type(content_type)
    );
    let body = status(415, "UnsupportedMediaType", &message);
    json_response(StatusCode::UNSUPPORTED_MEDIA_TYPE, body.to_string())
}

fn bad_request(message: &str) -> Response<Body> {
    json_response(
        StatusCode::BAD_REQUEST,
        status(400, "BadRequest", message).to_string(),
    )
}

/// The body of a `PATCH` as a JSON object, and whether it is a strategic merge patch
/// (else a merge patch); the `415` or `400` the API server answers otherwise.
fn parse_patch(content_type: Option<&str>, body: &[u8]) -> Result<(Value, bool), Box<Response<Body>>> {
    let strategic = match media_type(content_type) {
        "application/strategic-merge-patch+json" => true,
        "application/merge-patch+json" => false,
        _ => return Err(Box::new(unsupported_media_type(content_type))),
    };
    match serde_json::from_slice(body) {
        Ok(value @ Value::Object(_)) => Ok((value, strategic)),
        Ok(_) => Err(Box::new(bad_request("the patch is not an object"))),
        Err(e) => Err(Box::new(bad_request(&format!("the patch is not JSON: {e}")))),
    }
}

/// `POST` of an Event into `namespace`.
fn create_event(
    shared: &Shared,
    kind: Kind,
    namespace: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Response<Body> {
    if media_type(content_type) != "application/json" {
        return unsupported_media_type(content_type);
    }
    let mut event: Value = match serde_json::from_slice(body) {
        Ok(value @ Value::Object(_)) => value,
        Ok(_) => return bad_request("the request body is not an object"),
        Err(e) => return bad_request(&format!("the request body is not JSON: {e}")),
    };
    match event["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() && ns != namespace => {
            return bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            );
        }
        _ => event["metadata"]["namespace"] = json!(namespace),
    }
    let name = event["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let problems = event_problems(kind, &event, namespace);
    if !problems.is_empty() {
        return invalid(kind, &name, &problems);
    }
    let mut state = lock(&shared.state);
    let key = (namespace.to_string(), name.clone());
    if state
        .objects
        .get(&kind)
        .is_some_and(|objects| objects.contains_key(&key))
    {
        let message = format!("{} \"{name}\" already exists", kind.resource());
        let body = status(409, "AlreadyExists", &message);
        return json_response(StatusCode::CONFLICT, body.to_string());
    }
    event["apiVersion"] = json!(kind.api_version());
    event["kind"] = json!("Event");
    event["metadata"]["uid"] = json!(format!("00000000-0000-4000-8000-{:012}", state.rv + 1));
    event["metadata"]["creationTimestamp"] =
        json!(jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    state.apply(kind, event);
    let stored = state.objects[&kind][&key].json.to_string();
    json_response(StatusCode::CREATED, stored)
}

/// What the API server's validation of a new Event would refuse: `(field, problem)`.
/// Core Events get the lenient checks the API server keeps for old clients;
/// `events.k8s.io/v1` ones the strict ones too.
fn event_problems(kind: Kind, event: &Value, namespace: &str) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    let mut problem = |field: &str, text: &str| problems.push((field.to_string(), text.to_string()));
    let text = |field: &str| event[field].as_str().unwrap_or_default();
    if event["metadata"]["name"].as_str().is_none_or(str::is_empty) {
        // generateName is not supported by the fake.
        problem("metadata.name", "Required value: name is required");
    }
    let involved = if kind == Kind::Event {
        "regarding"
    } else {
        "involvedObject"
    };
    match event[involved]["namespace"].as_str().unwrap_or_default() {
        "" if namespace != "default" => problem(
            &format!("{involved}.namespace"),
            "Invalid value: \"\": does not match event.namespace",
        ),
        "" => {}
        ns if ns != namespace => problem(
            &format!("{involved}.namespace"),
            &format!("Invalid value: {ns:?}: does not match event.namespace"),
        ),
        _ => {}
    }
    if !matches!(text("type"), "" | "Normal" | "Warning") {
        problem(
            "type",
            &format!("Invalid value: {:?}: has invalid value", text("type")),
        );
    }
    for field in ["reason", "action", "reportingController", "reportingInstance"] {
        if text(field).len() > 128 {
            problem(field, "Too long: may not be more than 128 bytes");
        }
    }
    if kind == Kind::CoreEvent {
        return problems;
    }
    for field in [
        "eventTime",
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
    ] {
        if text(field).is_empty() {
            problem(field, "Required value");
        }
    }
    if !matches!(text("type"), "Normal" | "Warning") {
        problem("type", "Required value: Normal or Warning");
    }
    if text("note").len() > 1024 {
        problem("note", "Too long: may not be more than 1024 bytes");
    }
    for (field, text) in series_problems(event) {
        problem(&field, &text);
    }
    for field in [
        "deprecatedSource",
        "deprecatedCount",
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
    ] {
        if !event[field].is_null() && event[field] != json!({}) {
            problem(field, "Invalid value: needs to be unset");
        }
    }
    problems
}

/// What the API server's `validateV1EventSeries` refuses in an `events.k8s.io/v1`
/// Event's `series`: a count below 2, no `lastObservedTime`.
fn series_problems(event: &Value) -> Vec<(String, String)> {
    let series = &event["series"];
    if series.is_null() {
        return Vec::new();
    }
    let mut problems = Vec::new();
    if series["count"].as_i64().unwrap_or(0) < 2 {
        problems.push((
            "series.count".into(),
            "Invalid value: \"\": should be at least 2".into(),
        ));
    }
    if series["lastObservedTime"].as_str().is_none_or(str::is_empty) {
        problems.push(("series.lastObservedTime".into(), "Required value".into()));
    }
    problems
}

/// The fields of an `events.k8s.io/v1` Event that `ValidateEventUpdate` keeps
/// immutable (`regarding` is the internal `involvedObject`, `note` its `message`).
const EVENT_IMMUTABLE: [&str; 13] = [
    "regarding",
    "reason",
    "note",
    "type",
    "eventTime",
    "action",
    "related",
    "reportingController",
    "reportingInstance",
    "deprecatedSource",
    "deprecatedFirstTimestamp",
    "deprecatedLastTimestamp",
    "deprecatedCount",
];

/// `PATCH` of an `events.k8s.io/v1` Event (how client-go's `tools/events` writes a
/// series): a strategic merge or merge patch, then `ValidateEventUpdate`'s checks: the
/// Event's own, its name, the immutable fields, and the series when it changed.
/// `404` for an Event that does not exist (or whose TTL passed).
fn patch_event(
    shared: &Shared,
    namespace: &str,
    name: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Response<Body> {
    let (patch, strategic) = match parse_patch(content_type, body) {
        Ok(parsed) => parsed,
        Err(answer) => return *answer,
    };
    let mut state = lock(&shared.state);
    let key = (namespace.to_string(), name.to_string());
    let Some(stored) = state
        .objects
        .get(&Kind::Event)
        .and_then(|events| events.get(&key))
    else {
        drop(state);
        return not_found(Kind::Event, name);
    };
    let old: Value = serde_json::from_str(&stored.json).expect("stored JSON parses");
    let mut new = old.clone();
    // An Event has no list with a merge key, so both patch types merge alike here.
    merge_patch(&mut new, &patch, strategic, "");
    let mut problems = event_problems(Kind::Event, &new, namespace);
    problems.retain(|(field, _)| !field.starts_with("series"));
    for field in ["name", "namespace", "uid"] {
        if new["metadata"][field] != old["metadata"][field] {
            problems.push((
                format!("metadata.{field}"),
                "Invalid value: field is immutable".into(),
            ));
        }
    }
    for field in EVENT_IMMUTABLE {
        if new[field] != old[field] {
            problems.push((field.to_string(), "Invalid value: field is immutable".into()));
        }
    }
    if new["series"] != old["series"] {
        problems.extend(series_problems(&new));
    }
    if !problems.is_empty() {
        return invalid(Kind::Event, name, &problems);
    }
    state.apply(Kind::Event, new);
    let stored = state.objects[&Kind::Event][&key].json.to_string();
    json_response(StatusCode::OK, stored)
}

/// `422 Invalid`, as the API server words it.
fn invalid(kind: Kind, name: &str, problems: &[(String, String)]) -> Response<Body> {
    let listed: Vec<String> = problems.iter().map(|(f, p)| format!("{f}: {p}")).collect();
    let message = format!(
        "{} \"{name}\" is invalid: [{}]",
        kind.resource(),
        listed.join(", ")
    );
    let mut body = status(422, "Invalid", &message);
    body["details"] = json!({
        "name": name,
        "kind": "Event",
        "causes": problems
            .iter()
            .map(|(field, text)| json!({"reason": "FieldValueInvalid", "message": text, "field": field}))
            .collect::<Vec<_>>(),
    });
    json_response(StatusCode::UNPROCESSABLE_ENTITY, body.to_string())
}

/// `PATCH nodes/<name>/status`: only `status` changes, as the status subresource does.
fn patch_node_status(shared: &Shared, name: &str, content_type: Option<&str>, body: &[u8]) -> Response<Body> {
    let (patch, strategic) = match parse_patch(content_type, body) {
        Ok(parsed) => parsed,
        Err(answer) => return *answer,
    };
    let mut state = lock(&shared.state);
    let key = (String::new(), name.to_string());
    let Some(stored) = state.objects.get(&Kind::Node).and_then(|nodes| nodes.get(&key)) else {
        drop(state);
        return not_found(Kind::Node, name);
    };
    let mut node: Value = serde_json::from_str(&stored.json).expect("stored JSON parses");
    if let Some(status_patch) = patch.get("status") {
        merge_patch(&mut node["status"], status_patch, strategic, "status");
    }
    state.apply(Kind::Node, node);
    let stored = state.objects[&Kind::Node][&key].json.to_string();
    json_response(StatusCode::OK, stored)
}

/// The strategic merge key of the list at `path` in a Node, if it has one.
fn node_merge_key(path: &str) -> Option<&'static str> {
    match path {
        "status.conditions" | "status.addresses" => Some("type"),
        _ => None,
    }
}

/// Merges `patch` into `target` (RFC 7386: objects merge, `null` removes, the rest
/// replaces); `strategic` also merges the lists that have a merge key, element by key.
fn merge_patch(target: &mut Value, patch: &Value, strategic: bool, path: &str) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Value::Object(map) = target else { return };
    for (key, value) in fields {
        if value.is_null() {
            map.remove(key);
            continue;
        }
        let child = format!("{path}.{key}");
        match (strategic.then(|| node_merge_key(&child)).flatten(), value) {
            (Some(merge_key), Value::Array(items)) => merge_list(
                map.entry(key.clone()).or_insert(json!([])),
                items,
                merge_key,
                &child,
            ),
            _ => merge_patch(
                map.entry(key.clone()).or_insert(Value::Null),
                value,
                strategic,
                &child,
            ),
        }
    }
}

/// A strategic merge of `items` into the list `target`, element by `merge_key`.
fn merge_list(target: &mut Value, items: &[Value], merge_key: &str, path: &str) {
    if !target.is_array() {
        *target = json!([]);
    }
    let Value::Array(list) = target else { return };
    for item in items {
        let key = item.get(merge_key).filter(|k| !k.is_null());
        match list.iter_mut().find(|e| key.is_some() && e.get(merge_key) == key) {
            Some(existing) => merge_patch(existing, item, true, path),
            None => list.push(item.clone()),
        }
    }
}

// === Objects ===

/// Test objects.
pub mod objects {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{Node, ObjectReference, Service, ServicePort, ServiceSpec};
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, Time};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn time(text: &str) -> Time {
        Time(text.parse().expect("an RFC 3339 time"))
    }

    /// A NodePort Service `namespace/name` with one TCP port `http` on `node_port`.
    pub fn service(namespace: &str, name: &str, cluster_ip: &str, node_port: i32) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                labels: labels(&[("app", name)]),
                creation_timestamp: Some(time("2026-11-01T10:00:00Z")),
                uid: Some(format!("uid-{namespace}-{name}")),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("NodePort".into()),
                cluster_ip: Some(cluster_ip.into()),
                cluster_ips: Some(vec![cluster_ip.into()]),
                external_traffic_policy: Some("Cluster".into()),
                internal_traffic_policy: Some("Cluster".into()),
                ip_families: Some(vec!["IPv4".into()]),
                selector: labels(&[("app", name)]),
                session_affinity: Some("None".into()),
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    protocol: Some("TCP".into()),
                    port: 80,
                    target_port: Some(IntOrString::Int(8080)),
                    node_port: Some(node_port),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: Some(Default::default()),
        }
    }

    /// One endpoint of a slice: `(ip, node, ready)`.
    pub type Ep<'a> = (&'a str, &'a str, bool);

    /// An IPv4 EndpointSlice `name` of Service `namespace/service`, port `http`/TCP 8080.
    pub fn slice(namespace: &str, service: &str, name: &str, endpoints: &[Ep<'_>]) -> EndpointSlice {
        EndpointSlice {
            address_type: "IPv4".into(),
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                labels: labels(&[
                    ("kubernetes.io/service-name", service),
                    (
                        "endpointslice.kubernetes.io/managed-by",
                        "endpointslice-controller.k8s.io",
                    ),
                ]),
                annotations: labels(&[(
                    "endpoints.kubernetes.io/last-change-trigger-time",
                    "2026-11-01T10:00:05Z",
                )]),
                creation_timestamp: Some(time("2026-11-01T10:00:01Z")),
                ..ObjectMeta::default()
            },
            endpoints: endpoints
                .iter()
                .map(|(ip, node, ready)| Endpoint {
                    addresses: vec![ip.to_string()],
                    conditions: Some(EndpointConditions {
                        ready: Some(*ready),
                        serving: Some(*ready),
                        terminating: Some(false),
                    }),
                    node_name: Some(node.to_string()),
                    target_ref: Some(ObjectReference {
                        kind: Some("Pod".into()),
                        name: Some(format!("{service}-{ip}")),
                        namespace: Some(namespace.into()),
                        ..ObjectReference::default()
                    }),
                    ..Endpoint::default()
                })
                .collect(),
            ports: Some(vec![EndpointPort {
                name: Some("http".into()),
                port: Some(8080),
                protocol: Some("TCP".into()),
                app_protocol: None,
            }]),
        }
    }

    /// A Node `name` in `zone`.
    pub fn node(name: &str, zone: Option<&str>) -> Node {
        let mut pairs = vec![("kubernetes.io/hostname", name)];
        pairs.extend(zone.map(|z| ("topology.kubernetes.io/zone", z)));
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: labels(&pairs),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    /// A cluster shaped like production: `services` NodePort Services in 40
    /// namespaces (one in 10 LoadBalancer with externalTrafficPolicy Local), each with
    /// one EndpointSlice of `endpoints_per_service` ready endpoints spread over 50
    /// nodes (`worker-1` …), and the baggage real objects carry: `managedFields`, the
    /// `last-applied-configuration` annotation, selectors, `targetRef`s, zones.
    pub fn realistic_cluster(
        services: usize,
        endpoints_per_service: usize,
    ) -> (Vec<Service>, Vec<EndpointSlice>) {
        let managed = |manager: &str| ManagedFieldsEntry {
            api_version: Some("v1".into()),
            fields_type: Some("FieldsV1".into()),
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            time: Some(time("2026-11-01T10:00:00Z")),
            fields_v1: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
                serde_json::json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:team": {}}},
                    "f:spec": {"f:externalTrafficPolicy": {}, "f:internalTrafficPolicy": {},
                    "f:ports": {".": {}, "k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:name": {},
                    "f:port": {}, "f:protocol": {}, "f:targetPort": {}}}, "f:selector": {}, "f:sessionAffinity": {},
                    "f:type": {}}}),
            )),
            subresource: None,
        };
        let mut svcs = Vec::with_capacity(services);
        let mut slices = Vec::with_capacity(services);
        // NodePorts from 20000 up; from lower down where there are more Services than
        // ports above 20000, so that each still has one.
        let first_port = 20000.min(65536 - services as i32).max(1);
        for i in 0..services {
            let namespace = format!("team-{}", i % 40);
            let name = format!("svc-{i}");
            let ip = |base: u8, n: usize| format!("10.{base}.{}.{}", n / 250 % 256, n % 250 + 1);
            let mut svc = service(&namespace, &name, &ip(96, i), first_port + i as i32);
            svc.metadata.labels = labels(&[("app", &name), ("team", &namespace), ("tier", "web")]);
            svc.metadata.annotations = labels(&[(
                "kubectl.kubernetes.io/last-applied-configuration",
                &format!(
                    "{{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{{\"annotations\":{{}},\"labels\":{{\"app\":\"{name}\",\"team\":\"{namespace}\",\"tier\":\"web\"}},\"name\":\"{name}\",\"namespace\":\"{namespace}\"}},\"spec\":{{\"ports\":[{{\"name\":\"http\",\"port\":80,\"protocol\":\"TCP\",\"targetPort\":8080}}],\"selector\":{{\"app\":\"{name}\"}},\"type\":\"NodePort\"}}}}\n"
                ),
            )]);
            svc.metadata.managed_fields = Some(vec![managed("kubectl-client-side-apply")]);
            svc.metadata.resource_version = Some("1".into());
            if i % 10 == 1 {
                let spec = svc.spec.as_mut().expect("a spec");
                spec.type_ = Some("LoadBalancer".into());
                spec.external_traffic_policy = Some("Local".into());
                spec.health_check_node_port = Some(31000 + (i / 10) as i32 % 1700);
            }
            svcs.push(svc);

            let endpoint_ips: Vec<(String, String)> = (0..endpoints_per_service)
                .map(|e| {
                    let n = i * endpoints_per_service + e;
                    (ip(244, n), format!("worker-{}", n % 50 + 1))
                })
                .collect();
            let eps: Vec<super::objects::Ep<'_>> = endpoint_ips
                .iter()
                .map(|(ip, node)| (ip.as_str(), node.as_str(), true))
                .collect();
            let mut s = slice(&namespace, &name, &format!("{name}-x7k2p"), &eps);
            s.metadata.generate_name = Some(format!("{name}-"));
            s.metadata.managed_fields = Some(vec![managed("endpointslice-controller.k8s.io")]);
            for (e, endpoint) in s.endpoints.iter_mut().enumerate() {
                endpoint.zone = Some(format!("zone-{}", e % 3));
                if let Some(target) = endpoint.target_ref.as_mut() {
                    target.uid = Some(format!(
                        "10000000-0000-4000-8000-{:012}",
                        i * endpoints_per_service + e
                    ));
                }
            }
            slices.push(s);
        }
        (svcs, slices)
    }
}
