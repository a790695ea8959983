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
    let shared = Arc::new(Shared::new(interval));
    let (addr, tx) = start_on(Endpoints::All, shared.clone()).await;
    (addr, shared, tx)
}

/// A listener on a free loopback port serving `endpoints` of `shared`.
async fn start_on(
    endpoints: Endpoints,
    shared: Arc<Shared>,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let config = ServerConfig {
        header_read_timeout: Duration::from_millis(300),
        max_connections: 4,
    };
    tokio::spawn(serve(listener, endpoints, shared, config, async move {
        let _ = rx.await;
    }));
    (addr, tx)
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
    // The page says the agent is starting, with /findings' status.
    let r = request(addr, "GET", "/", "").await;
    assert_eq!(r.status, 503);
    assert!(
        r.head.contains("content-type: text/html; charset=utf-8"),
        "{}",
        r.head
    );
    assert!(r.body.contains("No scan has completed yet"), "{}", r.body);

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
        kube_proxy_answered: Default::default(),
        acceptance_use: Vec::new(),
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
    assert_eq!(request(addr, "GET", "/index.html", "").await.status, 404);
    assert_eq!(
        request(addr, "POST", "/", "Content-Length: 0\r\n").await.status,
        405
    );
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
        kube_proxy_answered: Default::default(),
        acceptance_use: Vec::new(),
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

/// What the squatter's finding holds that the public listener must not serve: its pod
/// address, process, pid, container id, pod uid and the file its command line names.
const NOT_PUBLIC: [&str; 6] = [
    "10.244.7.19",
    "haproxy",
    "4242",
    "0123abcd",
    "5e0f1b7a",
    "secret-frontend",
];

/// What names pods, addresses and processes stays off the public listener: `/findings`
/// is not there (a 404 that says where it is), and `/metrics`, which is, holds none of a
/// finding's target, rule, process or container. The private listener serves it all.
#[tokio::test]
async fn findings_are_served_on_the_private_listener_only() {
    let shared = Arc::new(Shared::new(Duration::from_secs(30)));
    let (public, _stop_public) = start_on(Endpoints::Public, shared.clone()).await;
    let (private, _stop_private) = start_on(Endpoints::All, shared.clone()).await;
    let mut squatter = crate::heart::finding::Finding::new(
        crate::heart::finding::Kind::Squatter,
        crate::heart::finding::Severity::Critical,
        "a process listens on tcp/30080",
    );
    squatter.port = Some(30080);
    squatter.service = Some("shop/web".into());
    squatter.target = Some("10.244.7.19:8080".into());
    squatter.rule =
        Some("-A KUBE-NODEPORTS -p tcp --dport 30080 -j DNAT --to-destination 10.244.7.19:8080".into());
    squatter.process = Some(crate::heart::model::ProcessInfo {
        pid: 4242,
        name: "haproxy".into(),
        container: Some("containerd://0123abcd".into()),
        pod: Some("5e0f1b7a-0c1d-4e2f-8a9b-0c1d2e3f4a5b".into()),
        exe: None,
        uid: None,
        cmdline: Some("haproxy -f /etc/haproxy/secret-frontend.cfg".into()),
    });
    let mut report = empty_report();
    report.findings = vec![squatter];
    shared.set_report(&report);
    shared.metrics.scan_done(&report, &Default::default(), 1.7e9);
    shared.set_api(true, true);

    let r = request(public, "GET", "/findings", "").await;
    assert_eq!(r.status, 404);
    assert!(r.body.contains("--findings-listen"), "{}", r.body);
    assert_eq!(request(public, "HEAD", "/findings", "").await.status, 404);
    assert_eq!(request(public, "GET", "/healthz", "").await.status, 200);
    assert_eq!(request(public, "GET", "/readyz", "").await.status, 200);
    let metrics = request(public, "GET", "/metrics", "").await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.body.contains("kind=\"squatter\"") && metrics.body.contains("port=\"30080\""),
        "{}",
        metrics.body
    );
    for secret in NOT_PUBLIC {
        assert!(
            !metrics.body.contains(secret),
            "/metrics names {secret}:\n{}",
            metrics.body
        );
    }

    let r = request(private, "GET", "/findings", "").await;
    assert_eq!(r.status, 200);
    assert!(
        r.body.contains("10.244.7.19") && r.body.contains("haproxy"),
        "{}",
        r.body
    );
    for path in ["/metrics", "/healthz", "/readyz"] {
        assert_eq!(request(private, "GET", path, "").await.status, 200, "{path}");
    }

    // The page: whole on the findings listener, counts on the public one.
    let page = request(private, "GET", "/", "").await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("10.244.7.19") && page.body.contains("haproxy"),
        "{}",
        page.body
    );
    let page = request(public, "GET", "/", "").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("squatter"), "{}", page.body);
    // Nor the Service, which the metrics' per-finding labels do name.
    for secret in NOT_PUBLIC.iter().chain(&["shop/web"]) {
        assert!(
            !page.body.contains(secret),
            "the public page names {secret}:\n{}",
            page.body
        );
    }
}

/// The page is HTML that may run nothing: its policy allows no script and no load, and
/// the browser may not guess another type.
#[tokio::test]
async fn the_page_is_served_with_a_policy_that_runs_nothing() {
    let (addr, shared, _stop) = start(Duration::from_secs(30)).await;
    shared.set_report(&empty_report());
    for method in ["GET", "HEAD"] {
        let r = request(addr, method, "/", "").await;
        assert_eq!(r.status, 200, "{method}");
        for header in [
            "content-type: text/html; charset=utf-8",
            "content-security-policy: default-src 'none'; style-src 'unsafe-inline';",
            "x-content-type-options: nosniff",
            "referrer-policy: no-referrer",
            "cache-control: no-store",
        ] {
            assert!(r.head.contains(header), "{method}: no {header}:\n{}", r.head);
        }
    }
    let r = request(addr, "GET", "/", "").await;
    assert!(r.body.starts_with("<!DOCTYPE html>"), "{}", r.body);
    assert!(r.body.contains("<h2>No drift</h2>"), "{}", r.body);
    assert!(r.body.contains("Agent not ready"), "{}", r.body);
}
