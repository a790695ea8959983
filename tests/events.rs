//! Reporting findings to the API (`kube_report`: `run --events`, `--node-condition`)
//! with the real kube client over HTTP against the fake API server: what reaches the
//! server, how often, and what happens when the server fails. Every scenario runs under
//! a timeout.

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
        assert_eq!(e["note"], f.message.as_str());
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

        // Cleared, then back: a new Event.
        reporter.after_scan(&[]);
        reporter.after_scan(&[f]);
        eventually(
            "the Event of the returning finding",
            Duration::from_secs(10),
            || events(&server).len() == 3,
        )
        .await;
        assert_eq!(metrics.events("dropped"), 0);
        assert_eq!(metrics.events("failed"), 0);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_beyond_the_bucket_is_capped_and_the_rest_counted() {
    scenario(async {
        let server = server().await;
        let (mut reporter, metrics) = start(&server, events_only(5));
        let many: Vec<Finding> = (0..12)
            .map(|i| finding(Kind::StaleNodeport, Severity::Warning, 31000 + i, None))
            .collect();
        let started = std::time::Instant::now();
        reporter.after_scan(&many);
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "after_scan waited for the API"
        );
        assert_eq!(metrics.events("dropped"), 7);
        eventually("five Events", Duration::from_secs(10), || {
            metrics.events("sent") == 5
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(events(&server).len(), 5);
        // They persist: nothing more, dropped or sent.
        reporter.after_scan(&many);
        assert_eq!(metrics.events("dropped"), 7);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_condition_follows_critical_findings_and_keeps_its_transition_time() {
    scenario(async {
        let server = server().await;
        let heartbeat = ConditionConfig {
            heartbeat: Duration::from_secs(1),
            max_backoff: Duration::from_secs(2),
        };
        let (mut reporter, metrics) = start(&server, config(None, Some(heartbeat.clone())));
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

        // Heartbeats refresh lastHeartbeatTime (second precision) and nothing else.
        let transition = condition_field(&server, "lastTransitionTime");
        let beat = condition_field(&server, "lastHeartbeatTime");
        reporter.after_scan(&[stale_endpoint(), warning.clone()]);
        eventually("a heartbeat", Duration::from_secs(5), || {
            condition_field(&server, "lastHeartbeatTime") != beat
        })
        .await;
        assert_eq!(condition_field(&server, "lastTransitionTime"), transition);
        assert_eq!(condition_field(&server, "status"), "True");

        // A restarted agent keeps the Node's transition time.
        drop(reporter);
        let (mut reporter, _) = start(&server, config(None, Some(heartbeat)));
        reporter.after_scan(&[stale_endpoint()]);
        let patches = || server.writes().iter().filter(|w| w.method == "PATCH").count();
        let before = patches();
        eventually("a patch after the restart", Duration::from_secs(5), || {
            patches() > before
        })
        .await;
        assert_eq!(condition_field(&server, "lastTransitionTime"), transition);

        // Cleared: False at once, with a new transition time.
        reporter.after_scan(&[warning]);
        eventually("the condition cleared", Duration::from_secs(5), || {
            condition_field(&server, "status") == "False"
        })
        .await;
        assert_eq!(condition_field(&server, "reason"), "NoNodePortDrift");
        assert_ne!(condition_field(&server, "lastTransitionTime"), transition);
        assert_eq!(metrics.condition_patches("failed"), 0);
        assert!(metrics.condition_patches("ok") >= 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_are_counted_and_reporting_recovers() {
    scenario(async {
        let server = server().await;
        let condition_config = ConditionConfig {
            heartbeat: Duration::from_secs(300),
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
