//! `portdrift fleet --prometheus URL` against a real Prometheus (Debian package
//! `prometheus`) scraping five targets that serve the agent's own metrics (the
//! library's `Metrics`, fed scan reports), labelled by node as the ServiceMonitor's
//! relabeling does:
//!
//! - node-a: a critical stale endpoint; node-b: clean, complete coverage;
//! - node-c: no finding, but incomplete coverage (not clean);
//! - node-d: a target with nothing listening (up 0);
//! - a target without a `node` label whose agent has not scanned yet (shown by its
//!   `instance`).
//!
//! Needs prometheus; with `CI` set it is not skipped.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use portdrift::agent::metrics::{Metrics, ScanTimes};
use portdrift::heart::coverage::Coverage;
use portdrift::heart::finding::{Finding, Kind, Severity};
use portdrift::heart::model::{Backend, Protocol, ProxyMode};
use portdrift::heart::outcome::ScanReport;
use serde_json::Value;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PORTDRIFT: &str = env!("CARGO_BIN_EXE_portdrift");

fn report(findings: Vec<Finding>, coverage: Coverage) -> ScanReport {
    ScanReport {
        node: None,
        summary: Default::default(),
        findings,
        sources: Vec::new(),
        coverage,
        kube_proxy: None,
        kube_proxy_answered: Default::default(),
        acceptance_use: Vec::new(),
    }
}

/// An agent's metrics after one scan with `report` (None: no scan yet).
fn metrics_text(report: Option<ScanReport>) -> String {
    let metrics = Metrics::new();
    if let Some(report) = report {
        metrics.scan_done(&report, &ScanTimes::default(), 1.7e9);
    }
    metrics.encode_text().expect("the metrics encode")
}

/// Serves `text` as `/metrics` on 127.0.0.1; its address.
async fn serve_metrics(text: String) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let text = Arc::new(text);
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let text = text.clone();
            tokio::spawn(async move {
                if support::read_request_head(&mut stream).await.is_none() {
                    return;
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    text.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(text.as_bytes()).await;
            });
        }
    });
    addr
}

fn free_port() -> u16 {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    socket.local_addr().unwrap().port()
}

/// One HTTP GET of `path` on `addr`: the body (empty when nothing answered).
async fn get(addr: SocketAddr, path: &str) -> String {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return String::new();
    };
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// How many samples Prometheus answers to `query` (0 while it cannot answer).
async fn count(prometheus: SocketAddr, query: &str) -> usize {
    let encoded: String = query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let body = get(prometheus, &format!("/api/v1/query?query={encoded}")).await;
    serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v["data"]["result"].as_array().map(Vec::len))
        .unwrap_or(0)
}

struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_fleet(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(PORTDRIFT)
        .arg("fleet")
        .args(args)
        .output()
        .expect("portdrift runs");
    (
        out.status.code().expect("an exit status"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_from_a_real_prometheus_names_drift_and_what_was_not_seen() {
    if !support::require_tool("prometheus", "the fleet view from Prometheus") {
        return;
    }
    let mut stale = Finding::new(Kind::StaleEndpoint, Severity::Critical, "stale");
    stale.protocol = Some(Protocol::Tcp);
    stale.port = Some(30080);
    stale.backend = Some(Backend::IptablesNft);
    stale.service = Some("shop/web".into());
    stale.target = Some("10.244.1.5:8080".into());
    let full = Coverage::full(ProxyMode::Iptables);
    let mut partial = Coverage::full(ProxyMode::Iptables);
    partial.complete = false;
    partial.not_checked = vec!["the sockets could not be read".into()];

    let a = serve_metrics(metrics_text(Some(report(vec![stale], full.clone())))).await;
    let b = serve_metrics(metrics_text(Some(report(vec![], full)))).await;
    let c = serve_metrics(metrics_text(Some(report(vec![], partial)))).await;
    let d = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let e = serve_metrics(metrics_text(None)).await;

    let scratch = TempDir::new().unwrap();
    let dir = scratch.path();
    let config = format!(
        "global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: portdrift\n    static_configs:\n\
         \x20     - {{targets: [\"{a}\"], labels: {{node: node-a}}}}\n\
         \x20     - {{targets: [\"{b}\"], labels: {{node: node-b}}}}\n\
         \x20     - {{targets: [\"{c}\"], labels: {{node: node-c}}}}\n\
         \x20     - {{targets: [\"{d}\"], labels: {{node: node-d}}}}\n\
         \x20     - {{targets: [\"{e}\"]}}\n"
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let prom_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let _prometheus = Prometheus(
        Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address={prom_addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus starts"),
    );
    // Every target scraped once: five `up`, three with coverage.
    let started = Instant::now();
    while count(prom_addr, "up{job=\"portdrift\"}").await < 5
        || count(prom_addr, "portdrift_coverage_complete").await < 3
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "Prometheus did not scrape every target: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let url = format!("http://{prom_addr}");
    let fleet = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_fleet(&args)
        })
    };
    let (code, json, err) = fleet(vec![
        "--prometheus".into(),
        url.clone(),
        "--format".into(),
        "json".into(),
    ])
    .await
    .unwrap();
    assert_eq!(code, 1, "{json}{err}");
    let view: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let nodes = &view["nodes"];
    let listed = |state: &str| -> Vec<String> {
        nodes[state]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["node"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed("drift"), ["node-a"], "{view}");
    assert_eq!(nodes["clean"], serde_json::json!(["node-b"]), "{view}");
    let e_instance = e.to_string();
    let mut unknown = vec!["node-c".to_string(), "node-d".to_string(), e_instance.clone()];
    unknown.sort();
    assert_eq!(listed("unknown"), unknown, "{view}");

    // The finding, from the per-finding series, on node-a alone.
    let findings = view["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{view}");
    assert_eq!(findings[0]["kind"], "stale-endpoint");
    assert_eq!(findings[0]["severity"], "critical");
    assert_eq!(findings[0]["port"], 30080);
    assert_eq!(findings[0]["service"], "shop/web");
    assert_eq!(findings[0]["nodes"], serde_json::json!(["node-a"]));

    // Down and not yet scanned: named, with why.
    let silent: Vec<(String, String)> = view["unanswered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["node"].as_str().unwrap().into(),
                u["reason"].as_str().unwrap().into(),
            )
        })
        .collect();
    let mut want = vec![
        (
            "node-d".to_string(),
            "Prometheus cannot scrape it (up 0)".to_string(),
        ),
        (
            e_instance.clone(),
            "scraped, but no scan reported yet (no portdrift_coverage_complete)".to_string(),
        ),
    ];
    want.sort();
    assert_eq!(silent, want);

    let (code, text, _) = fleet(vec!["--prometheus".into(), url.clone()]).await.unwrap();
    assert_eq!(code, 1);
    assert!(
        text.starts_with(&format!(
            "5 nodes by Prometheus at {url} (job portdrift): 1 drift, 1 clean, 3 unknown\n"
        )),
        "{text}"
    );
    assert!(
        text.contains("  node-c: the agent's check is incomplete (portdrift_coverage_complete 0)\n"),
        "{text}"
    );
    assert!(
        text.contains("critical stale-endpoint tcp/30080 shop/web: 1 of 5 nodes: node-a\n"),
        "{text}"
    );
    eprintln!("{text}");

    // Another job: no target at all is an error, not a clean fleet.
    let (code, _, err) = fleet(vec![
        "--prometheus".into(),
        url.clone(),
        "--prometheus-job".into(),
        "other".into(),
    ])
    .await
    .unwrap();
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("has no target of job \"other\""), "{err}");

    // Nothing listening: a clear error.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let (code, _, err) = fleet(vec!["--prometheus".into(), nowhere.clone()]).await.unwrap();
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("Prometheus at {nowhere}")), "{err}");
    assert!(err.to_lowercase().contains("connection refused"), "{err}");
}
