//! The daemon's HTTP endpoints (hyper 1, HTTP/1.1 only): `/` (a page for people),
//! `/metrics`, `/healthz`, `/readyz`, `/findings`, `/explain`. GET and HEAD only;
//! anything else is 405 with `Allow`.
//!
//! Two listeners: `--listen` (the node's network) serves [`Endpoints::Public`], counts
//! and states that name no pod, address or process (its `/` too); `--findings-listen`
//! (loopback by default) serves [`Endpoints::All`], `/findings` among them and the whole
//! page (SECURITY.md says why). Given one address for both, one listener serves
//! everything there.
//!
//! Small by design: a slow or hostile client gets [`ServerConfig::header_read_timeout`]
//! to send its headers, and at most [`ServerConfig::max_connections`] connections are
//! served at once (more wait in the listen backlog).

use crate::heart::document::{Document, DocumentKind};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{
    ACCEPT, ALLOW, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY,
    X_CONTENT_TYPE_OPTIONS,
};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::agent::explain::{ExplainRequest, Explainer};
use crate::agent::metrics::{Metrics, OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE};
use crate::heart::outcome::ScanReport;
use crate::heart::render::html::{PageContext, View, render_page, render_starting};
use crate::heart::visible::visible;

/// The default `--listen` address. No common node agent uses 9741 (node_exporter is
/// 9100, kube-proxy 10249/10256, the kubelet 10250, Cilium 9962-9965, Calico 9091).
pub const DEFAULT_LISTEN: &str = "0.0.0.0:9741";

/// The default `--findings-listen` address: the node's loopback (the pod has
/// `hostNetwork`), which only processes on the node, `kubectl port-forward` and
/// kube-rbac-proxy beside the agent reach.
pub const DEFAULT_FINDINGS_LISTEN: &str = "127.0.0.1:9742";

/// Which endpoints a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoints {
    /// `/metrics`, `/healthz`, `/readyz`, and `/` with counts only: safe on the node's
    /// network (every label of the metrics is bounded, and none holds an address or a
    /// process; the page shows no more than they do).
    Public,
    /// Those, `/findings` and `/explain`, which hold pods' addresses, rule text and
    /// processes' command lines, and `/` with every finding.
    All,
}

/// How the server treats its clients.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            header_read_timeout: Duration::from_secs(2),
            max_connections: 64,
        }
    }
}

/// Asks the API view, at the moment of asking, whether it is synced and fresh.
type ApiProbe = Box<dyn Fn() -> (bool, bool) + Send + Sync>;

/// What the endpoints show, shared with the scan loop.
pub struct Shared {
    pub metrics: Metrics,
    /// The last report, as the JSON `/findings` serves.
    report: RwLock<Option<Bytes>>,
    /// The last report and when its scan ended, for the page `/` renders on request.
    last: RwLock<Option<Arc<(ScanReport, jiff::Timestamp)>>>,
    api_synced: AtomicBool,
    api_fresh: AtomicBool,
    /// When set, `/readyz` and the API gauges ask the view itself: the scan loop
    /// records only once per interval, too late for readiness to follow an API outage.
    api_probe: OnceLock<ApiProbe>,
    last_success: Mutex<Option<Instant>>,
    /// The scan interval: `/readyz` wants a successful scan within three of them.
    interval: Duration,
    /// What answers `/explain`, once the daemon has set it.
    explainer: OnceLock<Explainer>,
    /// One explanation at a time: each reads every rule of the node.
    explaining: Arc<Semaphore>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("metrics", &self.metrics)
            .field("api_synced", &self.api_synced)
            .field("api_fresh", &self.api_fresh)
            .field("api_probe", &self.api_probe.get().is_some())
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub fn new(interval: Duration) -> Shared {
        Shared::with_metrics(interval, Metrics::new())
    }

    /// With `metrics` configured by the caller (the per-finding series cap).
    pub fn with_metrics(interval: Duration, metrics: Metrics) -> Shared {
        Shared {
            metrics,
            report: RwLock::new(None),
            last: RwLock::new(None),
            api_synced: AtomicBool::new(false),
            api_fresh: AtomicBool::new(false),
            api_probe: OnceLock::new(),
            last_success: Mutex::new(None),
            interval,
            explainer: OnceLock::new(),
            explaining: Arc::new(Semaphore::new(1)),
        }
    }

    /// Records the API view's state (for `/readyz` and the metrics).
    pub fn set_api(&self, synced: bool, fresh: bool) {
        self.api_synced.store(synced, Ordering::Relaxed);
        self.api_fresh.store(fresh, Ordering::Relaxed);
        self.metrics.set_api(synced, fresh);
    }

    /// Makes `/readyz` and `/metrics` ask `probe` for (synced, fresh) on every request
    /// instead of using [`set_api`](Self::set_api)'s last values. Set once; later calls
    /// are ignored.
    pub fn probe_api(&self, probe: impl Fn() -> (bool, bool) + Send + Sync + 'static) {
        let _ = self.api_probe.set(Box::new(probe));
    }

    /// Makes `/explain` answer with `explainer`. Set once; later calls are ignored.
    pub fn serve_explanations(&self, explainer: Explainer) {
        let _ = self.explainer.set(explainer);
    }

    /// (synced, fresh) now: from the probe when there is one.
    fn api(&self) -> (bool, bool) {
        match self.api_probe.get() {
            Some(probe) => {
                let (synced, fresh) = probe();
                self.metrics.set_api(synced, fresh);
                (synced, fresh)
            }
            None => (
                self.api_synced.load(Ordering::Relaxed),
                self.api_fresh.load(Ordering::Relaxed),
            ),
        }
    }

    /// Records a successful scan's report.
    pub fn set_report(&self, report: &ScanReport) {
        // Written when the scan ends: the document's time is the scan's.
        let now = jiff::Timestamp::now();
        let document = Document::new(DocumentKind::ScanReport, report.node.as_deref(), now, report);
        let mut json = serde_json::to_vec_pretty(&document).unwrap_or_else(|e| {
            // A report is plain data; this cannot happen, but must not kill the daemon.
            serde_json::to_vec(&serde_json::json!({ "error": e.to_string() })).unwrap_or_default()
        });
        json.push(b'\n');
        *self.report.write().unwrap_or_else(|e| e.into_inner()) = Some(Bytes::from(json));
        *self.last.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new((report.clone(), now)));
        *self.last_success.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    /// The API view is synced and fresh, and a scan succeeded within three intervals.
    /// Fresh, not only synced: synced stays true through an API outage, when the
    /// agent's verdicts come from a cluster state it can no longer keep current.
    pub fn ready(&self) -> bool {
        let recent = self
            .last_success
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|t| t.elapsed() <= self.interval.saturating_mul(3));
        let (synced, fresh) = self.api();
        synced && fresh && recent
    }

    fn report(&self) -> Option<Bytes> {
        self.report.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn last(&self) -> Option<Arc<(ScanReport, jiff::Timestamp)>> {
        self.last.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Binds `addr` (port 0: any free port).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `listener` until `shutdown` completes. Connections still open then are
/// dropped with the runtime.
pub async fn serve(
    listener: TcpListener,
    endpoints: Endpoints,
    shared: Arc<Shared>,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(config.max_connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => return,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "cannot accept an HTTP connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let shared = shared.clone();
        let timeout = config.header_read_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            let service = service_fn(move |req| {
                let shared = shared.clone();
                async move {
                    if req.uri().path() == "/explain" {
                        return Ok::<_, Infallible>(explain(&req, endpoints, &shared).await);
                    }
                    Ok::<_, Infallible>(handle(&req, endpoints, &shared))
                }
            });
            let served = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(timeout)
                .max_buf_size(8 * 1024)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
            }
        });
    }
}

fn respond(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        response.headers_mut().insert(CONTENT_TYPE, v);
    }
    response
}

const PLAIN: &str = "text/plain; charset=utf-8";

fn handle(req: &Request<Incoming>, endpoints: Endpoints, shared: &Shared) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if path == "/findings" && endpoints == Endpoints::Public {
        return respond(
            StatusCode::NOT_FOUND,
            PLAIN,
            "not found: /findings is served on the agent's --findings-listen address only (the node's loopback by default); see SECURITY.md\n",
        );
    }
    if !matches!(path, "/" | "/metrics" | "/healthz" | "/readyz" | "/findings") {
        return respond(StatusCode::NOT_FOUND, PLAIN, "not found\n");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = respond(StatusCode::METHOD_NOT_ALLOWED, PLAIN, "method not allowed\n");
        r.headers_mut()
            .insert(ALLOW, http::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match path {
        "/" => page(endpoints, shared),
        "/healthz" => respond(StatusCode::OK, PLAIN, "ok\n"),
        "/readyz" => {
            if shared.ready() {
                respond(StatusCode::OK, PLAIN, "ready\n")
            } else {
                respond(
                    StatusCode::SERVICE_UNAVAILABLE,
                    PLAIN,
                    "not ready: the API view is not synced or not current, or no recent scan succeeded\n",
                )
            }
        }
        "/findings" => match shared.report() {
            Some(json) => respond(StatusCode::OK, "application/json", json),
            None => respond(
                StatusCode::SERVICE_UNAVAILABLE,
                "application/json",
                "{\"error\":\"no scan has completed yet\"}\n",
            ),
        },
        _ => {
            // Brings portdrift_api_synced and portdrift_api_fresh up to this moment.
            let _ = shared.api();
            let openmetrics = req
                .headers()
                .get_all(ACCEPT)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .any(|v| v.contains("application/openmetrics-text"));
            let (encoded, content_type) = if openmetrics {
                (shared.metrics.encode_openmetrics(), OPENMETRICS_CONTENT_TYPE)
            } else {
                (shared.metrics.encode_text(), TEXT_CONTENT_TYPE)
            };
            match encoded {
                Ok(text) => respond(StatusCode::OK, content_type, text),
                Err(_) => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    PLAIN,
                    "cannot encode the metrics\n",
                ),
            }
        }
    }
}

/// The page: the last scan, whole on the findings listener and as counts on the public
/// one; before the first scan, a page that says so, with `/findings`' 503. Rendered on
/// request (nobody may ever look), under a policy that lets the browser run no script
/// and load nothing but the page's own inline style.
fn page(endpoints: Endpoints, shared: &Shared) -> Response<Full<Bytes>> {
    let view = match endpoints {
        Endpoints::All => View::Full,
        Endpoints::Public => View::CountsOnly,
    };
    let (status, body) = match shared.last() {
        Some(last) => {
            let (report, scanned_at) = &*last;
            let context = PageContext {
                view,
                now: jiff::Timestamp::now(),
                scanned_at: *scanned_at,
                ready: shared.ready(),
            };
            (StatusCode::OK, render_page(report, &context))
        }
        None => (StatusCode::SERVICE_UNAVAILABLE, render_starting(view)),
    };
    let mut r = respond(status, "text/html; charset=utf-8", body);
    let headers = r.headers_mut();
    headers.insert(
        CONTENT_SECURITY_POLICY,
        http::HeaderValue::from_static(PAGE_POLICY),
    );
    headers.insert(X_CONTENT_TYPE_OPTIONS, http::HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, http::HeaderValue::from_static("no-referrer"));
    headers.insert(CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
    r
}

/// The page's Content-Security-Policy: nothing may load or run but its inline style; it
/// may not be framed, and has no form to submit nor base to change.
pub const PAGE_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `/explain?port=tcp/30080[&source=IP][&format=text]`: on the findings listener only,
/// as `/findings` (it shows rules, addresses and processes).
async fn explain(req: &Request<Incoming>, endpoints: Endpoints, shared: &Shared) -> Response<Full<Bytes>> {
    if endpoints == Endpoints::Public {
        return respond(
            StatusCode::NOT_FOUND,
            PLAIN,
            "not found: /explain is served on the agent's --findings-listen address only (the node's loopback by default)\n",
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = respond(StatusCode::METHOD_NOT_ALLOWED, PLAIN, "method not allowed\n");
        r.headers_mut()
            .insert(ALLOW, http::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let request = match ExplainRequest::parse(req.uri().query()) {
        Ok(r) => r,
        Err(why) => return respond(StatusCode::BAD_REQUEST, PLAIN, format!("{}\n", visible(&why))),
    };
    let Some(explainer) = shared.explainer.get().cloned() else {
        return respond(
            StatusCode::SERVICE_UNAVAILABLE,
            PLAIN,
            "explain is not available yet\n",
        );
    };
    let Ok(permit) = shared.explaining.clone().try_acquire_owned() else {
        return respond(
            StatusCode::TOO_MANY_REQUESTS,
            PLAIN,
            "another explanation is running; try again when it is done\n",
        );
    };
    let answer = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        explainer(request.query, request.source)
    })
    .await;
    match answer {
        Ok(Ok((node, e))) if request.text => respond(
            StatusCode::OK,
            PLAIN,
            crate::heart::explain::render::render_text(&e, node.as_deref()),
        ),
        Ok(Ok((node, e))) => {
            let document = Document::new(
                DocumentKind::Explanation,
                node.as_deref(),
                jiff::Timestamp::now(),
                &e,
            );
            match serde_json::to_vec_pretty(&document) {
                Ok(mut json) => {
                    json.push(b'\n');
                    respond(StatusCode::OK, "application/json", json)
                }
                Err(_) => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    PLAIN,
                    "cannot encode the explanation\n",
                ),
            }
        }
        Ok(Err(why)) => {
            tracing::warn!(query = %request.query, error = %visible(&why), "cannot explain");
            respond(
                StatusCode::SERVICE_UNAVAILABLE,
                PLAIN,
                format!("cannot explain: {}\n", visible(&why)),
            )
        }
        Err(_) => respond(
            StatusCode::INTERNAL_SERVER_ERROR,
            PLAIN,
            "the explanation failed\n",
        ),
    }
}

#[cfg(test)]
mod tests;
