//! The daemon's HTTP endpoints (hyper 1, HTTP/1.1 only): `/metrics`, `/healthz`,
//! `/readyz`, `/findings`. GET and HEAD only; anything else is 405 with `Allow`.
//!
//! Small by design: a slow or hostile client gets [`ServerConfig::header_read_timeout`]
//! to send its headers, and at most [`ServerConfig::max_connections`] connections are
//! served at once (more wait in the listen backlog).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{ACCEPT, ALLOW, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::agent::metrics::{Metrics, OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE};
use crate::heart::outcome::ScanReport;

/// The default `--listen` address. No common node agent uses 9741 (node_exporter is
/// 9100, kube-proxy 10249/10256, the kubelet 10250, Cilium 9962-9965, Calico 9091).
pub const DEFAULT_LISTEN: &str = "0.0.0.0:9741";

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
    api_synced: AtomicBool,
    api_fresh: AtomicBool,
    /// When set, `/readyz` and the API gauges ask the view itself rather than use what
    /// the scan loop last recorded: the loop records once per interval (30 s by default,
    /// plus the scan's own time), too late for a readiness probe to follow an API outage.
    api_probe: OnceLock<ApiProbe>,
    last_success: Mutex<Option<Instant>>,
    /// The scan interval: `/readyz` wants a successful scan within three of them.
    interval: Duration,
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
            api_synced: AtomicBool::new(false),
            api_fresh: AtomicBool::new(false),
            api_probe: OnceLock::new(),
            last_success: Mutex::new(None),
            interval,
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
        let mut json = serde_json::to_vec_pretty(report).unwrap_or_else(|e| {
            // A report is plain data; this cannot happen, but must not kill the daemon.
            serde_json::to_vec(&serde_json::json!({ "error": e.to_string() })).unwrap_or_default()
        });
        json.push(b'\n');
        *self.report.write().unwrap_or_else(|e| e.into_inner()) = Some(Bytes::from(json));
        *self.last_success.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    /// The API view is synced and fresh, and a scan succeeded within three intervals.
    ///
    /// Fresh, not only synced: synced stays true through an API outage (the last state
    /// is kept), so an agent cut off from the API server would otherwise stay ready
    /// while drawing every verdict from a cluster state it can no longer keep current.
    /// A watch that errors is not fresh at once, so readiness follows an outage within
    /// about a second; a watch that hangs silently, within the view's staleness bound.
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
}

/// Binds `addr` (port 0: any free port).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `listener` until `shutdown` completes. Connections still open then are
/// dropped with the runtime.
pub async fn serve(
    listener: TcpListener,
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
                async move { Ok::<_, Infallible>(handle(&req, &shared)) }
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

fn handle(req: &Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if !matches!(path, "/metrics" | "/healthz" | "/readyz" | "/findings") {
        return respond(StatusCode::NOT_FOUND, PLAIN, "not found\n");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = respond(StatusCode::METHOD_NOT_ALLOWED, PLAIN, "method not allowed\n");
        r.headers_mut()
            .insert(ALLOW, http::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match path {
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    struct Reply {
        status: u16,
        head: String,
        body: String,
    }

    /// One request over a fresh connection (`Connection: close`), read to the end.
    async fn request(addr: SocketAddr, method: &str, path: &str, headers: &str) -> Reply {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut raw))
            .await
            .expect("the reply comes within 5 s")
            .unwrap();
        let raw = String::from_utf8(raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        let status = head[9..12].parse().unwrap();
        Reply {
            status,
            head: head.to_ascii_lowercase(),
            body: body.to_string(),
        }
    }

    async fn start(interval: Duration) -> (SocketAddr, Arc<Shared>, tokio::sync::oneshot::Sender<()>) {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::new(interval));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let config = ServerConfig {
            header_read_timeout: Duration::from_millis(300),
            max_connections: 4,
        };
        tokio::spawn(serve(listener, shared.clone(), config, async move {
            let _ = rx.await;
        }));
        (addr, shared, tx)
    }

    #[tokio::test]
    async fn oversized_requests_are_refused_and_the_server_goes_on() {
        let (addr, _shared, stop) = start(Duration::from_secs(30)).await;
        // Headers past the 8 KiB read buffer: 431, without reading them all.
        let big = format!("X-Filler: {}\r\n", "a".repeat(64 << 10));
        let r = request(addr, "GET", "/healthz", &big).await;
        assert_eq!(r.status, 431);
        // A body is never read: a huge POST is refused by method, and the connection
        // closed rather than drained.
        let post = format!("Content-Length: {}\r\n", 1u64 << 30);
        let r = request(addr, "POST", "/metrics", &post).await;
        assert_eq!(r.status, 405);
        assert_eq!(request(addr, "GET", "/healthz", "").await.status, 200);
        let _ = stop.send(());
    }

    #[tokio::test]
    async fn endpoints_over_real_http() {
        let (addr, shared, stop) = start(Duration::from_secs(30)).await;

        let r = request(addr, "GET", "/healthz", "").await;
        assert_eq!(r.status, 200);
        assert_eq!(request(addr, "GET", "/readyz", "").await.status, 503);
        assert_eq!(request(addr, "GET", "/findings", "").await.status, 503);

        // Synced but no scan yet: still not ready. A scan alone is not enough either.
        shared.set_api(true, true);
        assert_eq!(request(addr, "GET", "/readyz", "").await.status, 503);
        let mut report = ScanReport {
            node: Some("n1".into()),
            summary: Default::default(),
            findings: vec![crate::heart::finding::Finding::new(
                crate::heart::finding::Kind::StaleEndpoint,
                crate::heart::finding::Severity::Critical,
                "x",
            )],
            sources: Vec::new(),
            coverage: crate::heart::coverage::Coverage::full(crate::heart::model::ProxyMode::Iptables),
            kube_proxy: None,
        };
        report.summary.critical = 1;
        shared.set_report(&report);
        shared.metrics.scan_done(
            &report,
            &crate::agent::metrics::ScanTimes {
                total: Duration::from_millis(5),
                ..Default::default()
            },
            1.7e9,
        );
        assert_eq!(request(addr, "GET", "/readyz", "").await.status, 200);
        shared.set_api(false, false);
        assert_eq!(request(addr, "GET", "/readyz", "").await.status, 503);
        // Synced but no longer current (the API server is gone): not ready either.
        shared.set_api(true, false);
        assert_eq!(request(addr, "GET", "/readyz", "").await.status, 503);
        shared.set_api(true, true);

        let r = request(addr, "GET", "/findings", "").await;
        assert_eq!(r.status, 200);
        assert!(r.head.contains("content-type: application/json"), "{}", r.head);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["node"], "n1");
        assert_eq!(v["findings"][0]["kind"], "stale-endpoint");

        let r = request(addr, "GET", "/metrics", "").await;
        assert_eq!(r.status, 200);
        assert!(
            r.head.contains("content-type: text/plain; version=0.0.4"),
            "{}",
            r.head
        );
        assert!(
            r.body.contains("portdrift_findings{kind=\"stale-endpoint\"} 1"),
            "{}",
            r.body
        );
        if let Some((ok, said)) = crate::testing::promtool::check(&r.body) {
            assert!(ok, "promtool: {said}");
        }
        let r = request(
            addr,
            "GET",
            "/metrics",
            "Accept: application/openmetrics-text; version=1.0.0\r\n",
        )
        .await;
        assert_eq!(r.status, 200);
        assert!(
            r.head.contains("content-type: application/openmetrics-text"),
            "{}",
            r.head
        );
        assert!(r.body.ends_with("# EOF\n"));

        let r = request(addr, "HEAD", "/metrics", "").await;
        assert_eq!(r.status, 200);
        assert!(r.body.is_empty());

        for path in ["/metrics", "/findings", "/healthz"] {
            let r = request(addr, "POST", path, "Content-Length: 0\r\n").await;
            assert_eq!(r.status, 405, "{path}");
            assert!(r.head.contains("allow: get, head"), "{}", r.head);
        }
        assert_eq!(request(addr, "GET", "/", "").await.status, 404);
        assert_eq!(request(addr, "GET", "/metricsx", "").await.status, 404);

        // A client that never finishes its headers is cut off.
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut buf)).await;
        assert!(
            read.is_ok(),
            "the connection was not closed after the header read timeout"
        );

        // Connections are bounded: with all 4 permits held by silent clients, the next
        // request is served only once the header read timeout frees them.
        let idle: Vec<_> = futures::future::join_all((0..4).map(|_| TcpStream::connect(addr))).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Instant::now();
        assert_eq!(request(addr, "GET", "/healthz", "").await.status, 200);
        assert!(
            started.elapsed() >= Duration::from_millis(150),
            "served at once: {:?}",
            started.elapsed()
        );
        drop(idle);

        let _ = stop.send(());
    }

    fn empty_report() -> ScanReport {
        ScanReport {
            node: None,
            summary: Default::default(),
            findings: Vec::new(),
            sources: Vec::new(),
            coverage: crate::heart::coverage::Coverage::full(crate::heart::model::ProxyMode::Iptables),
            kube_proxy: None,
        }
    }

    #[tokio::test]
    async fn readiness_and_api_gauges_ask_the_probe_on_every_request() {
        let (addr, shared, _stop) = start(Duration::from_secs(30)).await;
        let fresh = Arc::new(AtomicBool::new(true));
        let probed = fresh.clone();
        // What the scan loop recorded last says ready; the probe must win over it.
        shared.set_api(true, true);
        shared.probe_api(move || (true, probed.load(Ordering::Relaxed)));
        shared.set_report(&empty_report());
        assert_eq!(request(addr, "GET", "/readyz", "").await.status, 200);
        fresh.store(false, Ordering::Relaxed);
        assert_eq!(request(addr, "GET", "/readyz", "").await.status, 503);
        let metrics = request(addr, "GET", "/metrics", "").await.body;
        assert!(metrics.contains("portdrift_api_fresh 0\n"), "{metrics}");
        assert!(metrics.contains("portdrift_api_synced 1\n"), "{metrics}");
        fresh.store(true, Ordering::Relaxed);
        assert_eq!(request(addr, "GET", "/readyz", "").await.status, 200);
        let metrics = request(addr, "GET", "/metrics", "").await.body;
        assert!(metrics.contains("portdrift_api_fresh 1\n"), "{metrics}");
    }

    #[tokio::test]
    async fn readiness_expires_after_three_intervals() {
        let (addr, shared, _stop) = start(Duration::from_millis(50)).await;
        shared.set_api(true, true);
        shared.set_report(&empty_report());
        assert_eq!(request(addr, "GET", "/readyz", "").await.status, 200);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(request(addr, "GET", "/readyz", "").await.status, 503);
    }
}
