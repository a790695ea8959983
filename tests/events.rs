//! Reporting findings to the API (`kube_report`: `run --events`, `--node-condition`)
//! with the real kube client over HTTP against the fake API server: what reaches the
//! server, how often, and what happens when the server fails. Every scenario runs under
//! a timeout.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, PostParams};
use portdrift::agent::kube_report::{
    ConditionConfig, EventsConfig, KubeReporter, ReportConfig, ReportMetrics,
};
use portdrift::heart::finding::{Finding, Kind, Severity};
use portdrift::heart::model::Protocol;
use portdrift::sources::kube_client::kube_client;
use serde_json::Value;
use support::fake_apiserver::{Failure, FakeApiServer, Kind as ApiKind, objects};
use support::{eventually, scenario};

const NODE: &str = "worker-1";

/// A server with this node (carrying the kubelet's `Ready` condition) and the Service
/// `shop/web`.
async fn server() -> FakeApiServer {
    let server = FakeApiServer::start().await;
    let mut node = objects::node(NODE, None);
    node.status = Some(NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: Some("KubeletReady".into()),
            ..NodeCondition::default()
        }]),
        ..NodeStatus::default()
    });
    server.apply(&node);
    server.apply(&objects::service("shop", "web", "10.96.0.10", 30080));
    server
}

fn config(events: Option<EventsConfig>, condition: Option<ConditionConfig>) -> ReportConfig {
    ReportConfig {
        node: NODE.into(),
        events,
        condition,
        request_timeout: Duration::from_secs(2),
    }
}

fn events_only(burst: u32) -> ReportConfig {
    config(
        Some(EventsConfig {
            burst,
            refill_every: Duration::from_secs(3600),
            ..EventsConfig::default()
        }),
        None,
    )
}

fn start(server: &FakeApiServer, config: ReportConfig) -> (KubeReporter, ReportMetrics) {
    let client = kube_client(server.config()).expect("a client");
    let metrics = ReportMetrics::default();
    (KubeReporter::start(client, config, metrics.clone()), metrics)
}

fn finding(kind: Kind, severity: Severity, port: u16, service: Option<&str>) -> Finding {
    let mut f = Finding::new(
        kind,
        severity,
        format!("{kind} on tcp/{port}: something to do about it."),
    );
    f.port = Some(port);
    f.protocol = Some(Protocol::Tcp);
    f.service = service.map(str::to_string);
    f
}

fn stale_endpoint() -> Finding {
    let mut f = finding(Kind::StaleEndpoint, Severity::Critical, 30080, Some("shop/web"));
    f.target = Some("10.244.2.17:8080".into());
    f
}

fn events(server: &FakeApiServer) -> Vec<Value> {
    server.stored(ApiKind::Event)
}

fn reasons(server: &FakeApiServer) -> Vec<String> {
    let mut reasons: Vec<String> = events(server)
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
        .collect();
    reasons.sort();
    reasons
}

/// This node's `NodePortDrift` condition as the server holds it.
fn condition(server: &FakeApiServer) -> Option<Value> {
    let nodes = server.stored(ApiKind::Node);
    let node = nodes.iter().find(|n| n["metadata"]["name"] == NODE)?;
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "NodePortDrift")
        .cloned()
}

fn condition_field(server: &FakeApiServer, field: &str) -> String {
    condition(server)
        .and_then(|c| c[field].as_str().map(str::to_string))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_finding_makes_one_event_on_its_service_and_a_persisting_one_none() {
    scenario(async {
        let server = server().await;
        let (mut reporter, metrics) = start(&server, events_only(25));
        let f = stale_endpoint();
        reporter.after_scan(std::slice::from_ref(&f));
        eventually("the Event", Duration::from_secs(10), || {
            events(&server).len() == 1
        })
        .await;

        let e = &events(&server)[0];
        assert_eq!(e["apiVersion"], "events.k8s.io/v1");
        assert_eq!(e["metadata"]["namespace"], "shop");
        assert_eq!(e["reason"], "StaleEndpointRule");
        assert_eq!(e["type"], "Warning");
        // The message, then the id the finding has in the JSON and the log.
        assert_eq!(e["note"], format!("{} [finding {}]", f.message, f.id()));
        assert_eq!(e["action"], "Scan");
        assert_eq!(e["reportingController"], "portdrift");
        assert_eq!(e["reportingInstance"], NODE);
        assert!(e["eventTime"].is_string(), "{e}");
        // The Service with its UID (kubectl describe service matches on it), and the node.
        assert_eq!(e["regarding"]["kind"], "Service");
        assert_eq!(e["regarding"]["namespace"], "shop");
        assert_eq!(e["regarding"]["name"], "web");
        assert_eq!(e["regarding"]["uid"], "uid-shop-web");
        assert_eq!(e["related"]["kind"], "Node");
        assert_eq!(e["related"]["name"], NODE);

        // The same finding, reworded, on the next scans: no Event. A new one then
        // arrives alone; Events are written in order, so none came of the repeats.
        let mut reworded = f.clone();
        reworded.message = "the same drift, said differently.".into();
        reporter.after_scan(std::slice::from_ref(&f));
        reporter.after_scan(&[reworded.clone()]);
        let other = finding(Kind::MissingEndpoint, Severity::Warning, 30080, Some("shop/web"));
        reporter.after_scan(&[reworded, other]);
        eventually("the second Event", Duration::from_secs(10), || {
            events(&server).len() >= 2
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(reasons(&server), ["MissingEndpointRule", "StaleEndpointRule"]);
        eventually("two Events counted", Duration::from_secs(5), || {
            metrics.events("sent") == 2
        })
        .await;

        // Cleared, then back within the window (6 minutes, client-go's): the same
        // Event, whose series counts it; no new one.
        reporter.after_scan(&[]);
        reporter.after_scan(&[f]);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(events(&server).len(), 2);
        assert_eq!(metrics.events("dropped"), 0);
        assert_eq!(metrics.events("failed"), 0);
        assert_eq!(metrics.over_budget(), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_findings_and_deleted_services_go_to_the_node_info_findings_nowhere() {
    scenario(async {
        let server = server().await;
        let (mut reporter, metrics) = start(&server, events_only(25));
        let squatter = finding(Kind::Squatter, Severity::Warning, 31000, None);
        let orphan = finding(Kind::OrphanChain, Severity::Info, 30090, None);
        let mut pending = finding(Kind::MissingRule, Severity::Info, 30080, Some("shop/web"));
        pending.pending_seconds = Some(20);
        // kube-proxy's comment names a Service that no longer exists.
        let gone = finding(Kind::StaleNodeport, Severity::Warning, 30999, Some("shop/gone"));
        reporter.after_scan(&[squatter, orphan, pending, gone]);
        eventually("two Events", Duration::from_secs(10), || {
            events(&server).len() == 2
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(reasons(&server), ["NodePortSquatter", "StaleNodePortRule"]);
        for e in events(&server) {
            assert_eq!(e["metadata"]["namespace"], "default", "{e}");
            assert_eq!(e["regarding"]["kind"], "Node", "{e}");
            assert_eq!(e["regarding"]["name"], NODE);
            // kubectl describe node looks for the node's name as its UID, as the kubelet writes it.
            assert_eq!(e["regarding"]["uid"], NODE);
            assert!(e["regarding"].get("namespace").is_none_or(Value::is_null), "{e}");
        }
        eventually("two Events counted", Duration::from_secs(5), || {
            metrics.events("sent") == 2
        })
        .await;
    })
    .await;
}

/// `PATCH`es of this Node's status the server received.
fn condition_patches(server: &FakeApiServer) -> usize {
    let target = format!("/api/v1/nodes/{NODE}/status?");
    server
        .writes()
        .iter()
        .filter(|w| w.method == "PATCH" && w.target == target)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_condition_is_patched_only_when_its_status_changes() {
    scenario(async {
        let server = server().await;
        let (mut reporter, metrics) = start(&server, config(None, Some(ConditionConfig::default())));
        let warning = finding(Kind::MissingEndpoint, Severity::Warning, 30081, Some("shop/web"));
        reporter.after_scan(&[stale_endpoint(), warning.clone()]);
        eventually("the condition", Duration::from_secs(10), || {
            condition(&server).is_some()
        })
        .await;
        let c = condition(&server).unwrap();
        assert_eq!(c["status"], "True", "{c}");
        assert_eq!(c["reason"], "NodePortDrift");
        assert_eq!(
            c["message"],
            "1 critical NodePort finding: 1 stale-endpoint; ports tcp/30080"
        );
        // A strategic merge: the kubelet's condition is still there.
        let nodes = server.stored(ApiKind::Node);
        let conditions = nodes[0]["status"]["conditions"].as_array().unwrap();
        assert!(conditions.iter().any(|c| c["type"] == "Ready"), "{conditions:?}");
        let patch = server
            .writes()
            .into_iter()
            .find(|w| w.method == "PATCH")
            .expect("a patch");
        assert_eq!(patch.target, format!("/api/v1/nodes/{NODE}/status?"));
        assert_eq!(
            patch.content_type.as_deref(),
            Some("application/strategic-merge-patch+json")
        );
        eventually("the patch counted", Duration::from_secs(5), || {
            metrics.condition_patches("ok") == 1
        })
        .await;

        // The same status with another message (a second critical finding), scan after
        // scan: no patch, and no heartbeat.
        let transition = condition_field(&server, "lastTransitionTime");
        let other = finding(Kind::MissingRule, Severity::Critical, 30082, Some("shop/web"));
        for _ in 0..5 {
            reporter.after_scan(&[stale_endpoint(), other.clone(), warning.clone()]);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(condition_patches(&server), 1);

        // A restarted agent reads the Node's condition and patches nothing.
        drop(reporter);
        let (mut reporter, metrics) = start(&server, config(None, Some(ConditionConfig::default())));
        reporter.after_scan(&[stale_endpoint()]);
        let read_node = format!("GET /api/v1/nodes/{NODE}");
        eventually("the Node read after the restart", Duration::from_secs(5), || {
            server
                .requests_with_methods()
                .iter()
                .filter(|r| r.split('?').next() == Some(read_node.as_str()))
                .count()
                == 2
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(condition_patches(&server), 1);
        assert_eq!(metrics.condition_patches("ok"), 0);

        // Cleared: False at once, with a new transition time. The time is in whole
        // seconds (metav1.Time), so the clear comes in a later second than the set.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        reporter.after_scan(&[warning]);
        eventually("the condition cleared", Duration::from_secs(5), || {
            condition_field(&server, "status") == "False"
        })
        .await;
        assert_eq!(condition_field(&server, "reason"), "NoNodePortDrift");
        assert_ne!(condition_field(&server, "lastTransitionTime"), transition);
        assert_eq!(condition_patches(&server), 2);
        assert_eq!(metrics.condition_patches("failed"), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_are_counted_and_reporting_recovers() {
    scenario(async {
        let server = server().await;
        let condition_config = ConditionConfig {
            max_backoff: Duration::from_secs(1),
        };
        let (mut reporter, metrics) = start(
            &server,
            config(Some(EventsConfig::default()), Some(condition_config)),
        );
        server.set_write_failure(Failure::Status(500));
        let started = std::time::Instant::now();
        reporter.after_scan(&[stale_endpoint()]);
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "after_scan waited for the API"
        );
        eventually("a failed patch", Duration::from_secs(10), || {
            metrics.condition_patches("failed") == 1
        })
        .await;
        // Scans during the backoff (at least 1 s) do not hurry the retry.
        for _ in 0..5 {
            reporter.after_scan(&[stale_endpoint()]);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(metrics.condition_patches("failed"), 1);
        eventually("the failed Event counted", Duration::from_secs(10), || {
            metrics.events("failed") == 1
        })
        .await;
        // Three attempts, then it gave up.
        let posts = server.writes().iter().filter(|w| w.method == "POST").count();
        assert_eq!(posts, 3);
        eventually("failed patches counted", Duration::from_secs(10), || {
            metrics.condition_patches("failed") >= 2
        })
        .await;
        assert!(events(&server).is_empty() && condition(&server).is_none());

        // The server recovers: the condition is retried without a new scan, and new
        // findings make Events again.
        server.set_write_failure(Failure::None);
        eventually("the condition patched", Duration::from_secs(10), || {
            condition(&server).is_some()
        })
        .await;
        assert_eq!(condition_field(&server, "status"), "True");
        let other = finding(Kind::MissingRule, Severity::Critical, 30082, Some("shop/web"));
        reporter.after_scan(&[stale_endpoint(), other]);
        // The server stores an Event before the client has its answer (and counts it).
        eventually("an Event, counted", Duration::from_secs(10), || {
            events(&server).len() == 1 && metrics.events("sent") == 1
        })
        .await;
        assert_eq!(events(&server)[0]["reason"], "MissingNodePortRule");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_gone_or_hangs_costs_the_scan_nothing() {
    scenario(async {
        let server = server().await;
        let (mut hanging, hang_metrics) = start(&server, config(Some(EventsConfig::default()), None));
        server.set_failure(Failure::Hang);
        let started = std::time::Instant::now();
        hanging.after_scan(&[stale_endpoint()]);
        assert!(started.elapsed() < Duration::from_millis(100));
        // Each request times out after 2 s: a Service lookup, then one create (a hang is
        // not retried forever: three attempts).
        eventually("the timed-out Event counted", Duration::from_secs(20), || {
            hang_metrics.events("failed") == 1
        })
        .await;
        server.set_failure(Failure::None);

        let config = server.config();
        drop(server);
        let metrics = ReportMetrics::default();
        let client = kube_client(config).unwrap();
        let mut reporter = KubeReporter::start(
            client,
            self::config(Some(EventsConfig::default()), Some(ConditionConfig::default())),
            metrics.clone(),
        );
        reporter.after_scan(&[stale_endpoint()]);
        eventually("the failures counted", Duration::from_secs(15), || {
            metrics.events("failed") == 1 && metrics.condition_patches("failed") >= 1
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_refuses_what_the_api_server_refuses() {
    scenario(async {
        let server = server().await;
        let client = kube_client(server.config()).unwrap();
        let api: Api<Event> = Api::namespaced(client.clone(), "shop");
        let mut event = Event::default();
        event.metadata.name = Some("web.1".into());
        let refused = api.create(&PostParams::default(), &event).await.unwrap_err();
        let kube::Error::Api(status) = refused else {
            panic!("{refused:?}")
        };
        assert_eq!(
            (status.code, status.reason.as_str()),
            (422, "Invalid"),
            "{status:?}"
        );
        assert!(
            status.message.contains("reportingController"),
            "{}",
            status.message
        );

        let nodes: Api<Node> = Api::all(client);
        let missing = nodes.get("worker-9").await.unwrap_err();
        assert!(matches!(missing, kube::Error::Api(s) if s.code == 404));
        let json_patch = kube::api::Patch::Json::<()>(Default::default());
        let unsupported = nodes
            .patch_status(NODE, &Default::default(), &json_patch)
            .await
            .unwrap_err();
        assert!(matches!(unsupported, kube::Error::Api(s) if s.code == 415));
    })
    .await;
}

/// Log lines written on this thread while the guard lives (the reporter decides and
/// logs on the caller's thread; its writers log elsewhere).
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let logs = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || logs.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    /// The lines that contain `text`.
    fn lines(&self, text: &str) -> Vec<String> {
        let all = String::from_utf8_lossy(&self.0.lock().unwrap()).to_string();
        all.lines()
            .filter(|l| l.contains(text))
            .map(str::to_string)
            .collect()
    }
}

/// Requests to Events: `(POSTs, PATCHes)`.
fn event_writes(server: &FakeApiServer) -> (usize, usize) {
    let writes = server.writes();
    let to_events = |method: &str| {
        writes
            .iter()
            .filter(|w| w.method == method && w.target.starts_with("/apis/events.k8s.io/v1/"))
            .count()
    };
    (to_events("POST"), to_events("PATCH"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_200_findings_makes_a_burst_of_events_then_the_rest_as_the_budget_refills() {
    scenario(async {
        let server = server().await;
        const N: u16 = 200;
        let services: Vec<_> = (0..N)
            .map(|i| objects::service("shop", &format!("svc-{i}"), "10.96.0.10", 30000 + i32::from(i)))
            .collect();
        server.apply_all(&services);
        // The default budget, but a fast refill, so that the test drains it in seconds.
        let refill = Duration::from_millis(100);
        let budget = EventsConfig {
            refill_every: refill,
            ..EventsConfig::default()
        };
        let burst = budget.burst as usize;
        let (mut reporter, metrics) = start(&server, config(Some(budget), Some(ConditionConfig::default())));
        let findings: Vec<Finding> = (0..N)
            .map(|i| {
                let mut f = finding(Kind::StaleEndpoint, Severity::Critical, 30000 + i, None);
                f.service = Some(format!("shop/svc-{i}"));
                f.target = Some(format!("10.244.2.{}:8080", i % 250));
                f
            })
            .collect();

        // Two scans at once: a burst of Events, the rest wait, counted once.
        let logs = Logs::default();
        let guard = logs.capture();
        let started = std::time::Instant::now();
        reporter.after_scan(&findings);
        reporter.after_scan(&findings);
        let took = started.elapsed();
        drop(guard);
        assert!(
            took < refill,
            "two scans took {took:?}: the bucket refilled in between"
        );
        assert_eq!(metrics.over_budget(), u64::from(N) - burst as u64);
        assert_eq!(metrics.pending(), i64::from(N) - burst as i64);
        let began = logs.lines("Event budget spent");
        assert_eq!(began.len(), 1, "{began:?}");
        assert!(
            began[0].contains(&format!("waiting={}", N as usize - burst)),
            "{began:?}"
        );
        eventually("the burst written", Duration::from_secs(10), || {
            metrics.events("sent") == burst as u64
        })
        .await;
        eventually("the condition", Duration::from_secs(10), || {
            condition(&server).is_some()
        })
        .await;
        // Nothing more comes of those two scans.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(events(&server).len(), burst);
        assert_eq!(event_writes(&server), (burst, 0));
        assert_eq!(condition_patches(&server), 1);

        // Scans go on while the bucket refills: the waiting ones get their Events, one
        // per token, and none twice.
        let logs = Logs::default();
        let deadline = std::time::Instant::now() + Duration::from_secs(45);
        while metrics.pending() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "{} still pending",
                metrics.pending()
            );
            tokio::time::sleep(refill).await;
            let _guard = logs.capture();
            reporter.after_scan(&findings);
        }
        eventually("every Event written", Duration::from_secs(10), || {
            metrics.events("sent") == u64::from(N)
        })
        .await;
        let stored = events(&server);
        let notes: std::collections::BTreeSet<&str> =
            stored.iter().filter_map(|e| e["note"].as_str()).collect();
        assert_eq!((stored.len(), notes.len()), (N as usize, N as usize));
        assert_eq!(event_writes(&server), (N as usize, 0));
        let ended = logs.lines("every finding it deferred");
        assert_eq!(ended.len(), 1, "{ended:?}");
        assert!(
            ended[0].contains(&format!("deferred={}", N as usize - burst)),
            "{ended:?}"
        );
        assert_eq!(metrics.over_budget(), u64::from(N) - burst as u64, "counted once");
        assert_eq!(condition_patches(&server), 1);
        assert_eq!(metrics.events("failed"), 0);
    })
    .await;
}

/// Events config for the series tests: a bucket that does not run dry, and short
/// series times.
fn series_config(every: Duration, window: Duration) -> ReportConfig {
    config(
        Some(EventsConfig {
            burst: 10,
            refill_every: Duration::from_secs(3600),
            series_every: every,
            series_window: window,
        }),
        None,
    )
}

/// A reporter started on `server` with `config` that has reported `f` and seen its
/// Event sent: the reporter, its metrics and the Event's name.
async fn first_event(
    server: &FakeApiServer,
    config: ReportConfig,
    f: &Finding,
) -> (KubeReporter, ReportMetrics, String) {
    let (mut reporter, metrics) = start(server, config);
    reporter.after_scan(std::slice::from_ref(f));
    eventually("the Event", Duration::from_secs(10), || {
        metrics.events("sent") == 1
    })
    .await;
    let name = events(server)[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    (reporter, metrics, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persisting_finding_has_its_events_series_patched_not_a_new_event() {
    scenario(async {
        let server = server().await;
        let every = Duration::from_secs(1);
        let window = Duration::from_secs(2);
        let f = stale_endpoint();
        let (mut reporter, metrics, name) = first_event(&server, series_config(every, window), &f).await;

        // Still there a series period later: a patch of the series, counting the scans.
        tokio::time::sleep(every + Duration::from_millis(100)).await;
        reporter.after_scan(std::slice::from_ref(&f));
        eventually("the series written", Duration::from_secs(10), || {
            metrics.series_updates("ok") == 1
        })
        .await;
        let patch = server
            .writes()
            .into_iter()
            .find(|w| w.method == "PATCH")
            .expect("a patch");
        assert_eq!(
            patch.target,
            format!("/apis/events.k8s.io/v1/namespaces/shop/events/{name}?")
        );
        assert_eq!(
            patch.content_type.as_deref(),
            Some("application/strategic-merge-patch+json")
        );
        assert_eq!(patch.body["series"]["count"], 2, "{}", patch.body);
        assert_eq!(
            patch.body.as_object().unwrap().len(),
            1,
            "the series alone: {}",
            patch.body
        );
        let e = &events(&server)[0];
        assert_eq!(e["series"]["count"], 2, "{e}");
        assert!(e["series"]["lastObservedTime"].is_string(), "{e}");

        // Seen once more, then gone for the window: the series ends with its count.
        reporter.after_scan(std::slice::from_ref(&f));
        reporter.after_scan(&[]);
        assert_eq!(metrics.series_updates("ok"), 1);
        tokio::time::sleep(window + Duration::from_millis(100)).await;
        reporter.after_scan(&[]);
        eventually("the series ended", Duration::from_secs(10), || {
            metrics.series_updates("ok") == 2
        })
        .await;
        assert_eq!(events(&server)[0]["series"]["count"], 3);
        // Back after that: a new Event.
        reporter.after_scan(&[f]);
        eventually("a new Event", Duration::from_secs(10), || {
            events(&server).len() == 2
        })
        .await;
        assert_eq!(event_writes(&server), (2, 2));
        assert_eq!(metrics.series_updates("failed"), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_gone_before_its_series_is_written_is_created_again_with_it() {
    scenario(async {
        let server = server().await;
        let every = Duration::from_millis(500);
        let f = stale_endpoint();
        let config = series_config(every, Duration::from_secs(60));
        let (mut reporter, metrics, name) = first_event(&server, config, &f).await;
        // Its TTL passed (the API server's --event-ttl, 1 hour by default).
        assert!(server.delete::<Event>(Some("shop"), &name));
        tokio::time::sleep(every + Duration::from_millis(100)).await;
        reporter.after_scan(&[f]);
        eventually("the series written", Duration::from_secs(10), || {
            metrics.series_updates("ok") == 1
        })
        .await;
        let stored = events(&server);
        assert_eq!(stored.len(), 1);
        assert_ne!(stored[0]["metadata"]["name"], name.as_str());
        assert_eq!(stored[0]["series"]["count"], 2, "{}", stored[0]);
        assert_eq!(stored[0]["reason"], "StaleEndpointRule");
        let patches_refused = server
            .writes()
            .iter()
            .filter(|w| w.method == "PATCH" && w.status == 404)
            .count();
        assert_eq!((event_writes(&server), patches_refused), ((2, 1), 1));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_refuses_the_event_patches_the_api_server_refuses() {
    scenario(async {
        let server = server().await;
        // Bound, not `_`: the reporter keeps running to the end of the test.
        let (_reporter, _metrics, name) = first_event(&server, events_only(10), &stale_endpoint()).await;
        let client = kube_client(server.config()).unwrap();
        let api: Api<Event> = Api::namespaced(client, "shop");
        let params = kube::api::PatchParams::default();
        let code = |e: kube::Error| match e {
            kube::Error::Api(s) => (s.code, s.message),
            other => panic!("{other:?}"),
        };
        let now = "2026-12-01T10:00:00.000000Z";
        let cases = [
            (
                serde_json::json!({"series": {"count": 1, "lastObservedTime": now}}),
                "series.count",
            ),
            (
                serde_json::json!({"series": {"count": 2}}),
                "series.lastObservedTime",
            ),
            (serde_json::json!({"note": "reworded"}), "note"),
            (serde_json::json!({"reason": "Other"}), "reason"),
        ];
        for (patch, field) in cases {
            let refused = api
                .patch(&name, &params, &kube::api::Patch::Strategic(&patch))
                .await
                .unwrap_err();
            let (status, message) = code(refused);
            assert_eq!(status, 422, "{patch}: {message}");
            assert!(message.contains(field), "{patch}: {message}");
        }
        let ok = serde_json::json!({"series": {"count": 2, "lastObservedTime": now}});
        let patched = api
            .patch(&name, &params, &kube::api::Patch::Merge(&ok))
            .await
            .expect("a valid series patch");
        assert_eq!(patched.series.map(|s| s.count), Some(2));
        let missing = api
            .patch("gone.1", &params, &kube::api::Patch::Strategic(&ok))
            .await
            .unwrap_err();
        assert_eq!(code(missing).0, 404);
    })
    .await;
}
