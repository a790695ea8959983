//! `portdrift fleet` at 1,000 nodes, against the fake API server over real HTTP: 1,000
//! Nodes with their `NodePortDrift` condition (most `False`, some `True`, a few without
//! one; none renewed since it was set, as the agents patch it only on a change) and
//! 1,000 agent pods, Running and Ready but for two, whose pod IPs are distinct loopback
//! addresses (127.1.x.y) where simulated agents answer `/findings` over real HTTP
//! through the fake's pod proxy. A few agents hang, one resets the connection, one pod
//! is not running, one is running but not ready on a node whose condition says clean,
//! and one node has no agent pod.
//!
//! What a user relies on: one Node list (from the cache, `resourceVersion=0`), one pod
//! list, and pod-proxy requests only for the drifted and unknown nodes (every node with
//! `--all`), a clean condition counting only where an agent pod is ready; no more
//! agents in flight than `--concurrency`; the silent nodes named with the reason within
//! about one `--timeout`; and where RBAC forbids a list or the pod proxy, the view that
//! can still be given, saying what was not checked.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};
use support::fake_apiserver::{FakeApiServer, query_param};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const PORTDRIFT: &str = env!("CARGO_BIN_EXE_portdrift");

/// How a simulated agent behaves.
#[derive(Debug, Clone)]
enum Agent {
    /// Answers `/findings` with this document.
    Answer(String),
    /// Reads the request and never answers.
    Hang,
    /// Resets the connection (a crashed agent).
    Reset,
}

/// The simulated agents: one listener on every address at one port; the address a
/// connection was made to (a pod IP) says which agent it reached.
struct Agents {
    port: u16,
    by_ip: Mutex<BTreeMap<IpAddr, Agent>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    requests: AtomicUsize,
}

impl Agents {
    async fn start() -> Arc<Agents> {
        let listener = TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], 0)))
            .await
            .expect("bind the agents' port");
        let agents = Arc::new(Agents {
            port: listener.local_addr().unwrap().port(),
            by_ip: Mutex::new(BTreeMap::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            requests: AtomicUsize::new(0),
        });
        let serving = agents.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, peer)) = listener.accept().await else {
                    continue;
                };
                if !peer.ip().is_loopback() {
                    continue;
                }
                tokio::spawn(serving.clone().serve(stream));
            }
        });
        agents
    }

    async fn serve(self: Arc<Self>, mut stream: tokio::net::TcpStream) {
        let Ok(local) = stream.local_addr() else { return };
        let agent = self.by_ip.lock().unwrap().get(&local.ip()).cloned();
        let Some(agent) = agent else { return };
        if let Agent::Reset = agent {
            let _ = stream.set_zero_linger();
            return;
        }
        let Some(request) = support::read_request_head(&mut stream).await else {
            return;
        };
        self.requests.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        match agent {
            Agent::Answer(body) if request.starts_with(b"GET /findings ") => {
                // A scan's answer is not instant; long enough for requests to overlap.
                tokio::time::sleep(Duration::from_millis(5)).await;
                let head = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n";
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
            }
            Agent::Answer(_) => {
                let _ = stream.write_all(b"HTTP/1.0 404 Not Found\r\n\r\n").await;
            }
            // Until the caller gives up (the proxy closes the connection).
            _ => {
                let mut buf = [0u8; 1024];
                while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
            }
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Node `i`'s name and its agent's pod IP.
fn node_name(i: usize) -> String {
    format!("node-{i:04}")
}

fn pod_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8)
}

/// What a node is like in the simulated fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Drift,
    Clean,
    /// No condition.
    NoCondition,
    /// A `False` condition, and the node's agent pod running but not ready.
    Unready,
}

fn shape(i: usize) -> Shape {
    match i {
        UNREADY => Shape::Unready,
        _ if i.is_multiple_of(20) => Shape::Drift,
        _ if i % 100 == 7 => Shape::NoCondition,
        _ => Shape::Clean,
    }
}

/// The nodes whose agents hang, reset, are not running, or have no pod.
const HANGS: [usize; 2] = [0, 100];
const RESETS: usize = 200;
const PENDING: usize = 300;
const NO_POD: usize = 7;
const UNREADY: usize = 501;

fn node(i: usize) -> Node {
    // Patched once, days before the view: the heartbeat's age is no sign of trouble.
    let condition = |status: &str, reason: &str, message: &str| {
        json!({"type": "NodePortDrift", "status": status, "reason": reason, "message": message,
               "lastTransitionTime": "2026-11-30T08:00:00Z", "lastHeartbeatTime": "2026-11-30T08:00:00Z"})
    };
    let conditions = match shape(i) {
        Shape::Drift => vec![condition(
            "True",
            "NodePortDrift",
            "1 critical NodePort finding: 1 stale-endpoint; ports tcp/30080",
        )],
        Shape::Clean | Shape::Unready => vec![condition(
            "False",
            "NoNodePortDrift",
            "no critical NodePort drift on this node",
        )],
        Shape::NoCondition => vec![],
    };
    let mut all = vec![
        json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
                              "lastTransitionTime": "2026-11-30T08:00:00Z"}),
    ];
    all.extend(conditions);
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node_name(i), "labels": {"kubernetes.io/hostname": node_name(i)}},
        "status": {"conditions": all}
    }))
    .unwrap()
}

/// Node `i`'s agent pod: Running and Ready (its `/readyz` passes), but for the pending
/// one and the unready one.
fn pod(i: usize, port: u16) -> Pod {
    let ready = |status: &str, reason: Option<&str>| {
        json!([{"type": "Ready", "status": status, "reason": reason,
                "lastTransitionTime": "2026-11-30T08:00:00Z"}])
    };
    let status = match shape(i) {
        _ if i == PENDING => json!({"phase": "Pending"}),
        Shape::Unready => json!({"phase": "Running", "podIP": pod_ip(i).to_string(),
                                  "conditions": ready("False", Some("ContainersNotReady"))}),
        _ => json!({"phase": "Running", "podIP": pod_ip(i).to_string(),
                    "conditions": ready("True", None)}),
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "portdrift", "name": format!("portdrift-{}", node_name(i)),
                     "labels": {"app.kubernetes.io/name": "portdrift"}},
        "spec": {"nodeName": node_name(i), "containers": [{"name": "portdrift", "image": "portdrift",
                 "ports": [{"name": "http", "containerPort": port}]}]},
        "status": status
    }))
    .unwrap()
}

/// What node `i`'s agent says: the drifted ones a stale endpoint each (half of them
/// to one target, half to another), the rest nothing.
fn findings(i: usize) -> String {
    let findings = if shape(i) == Shape::Drift {
        let target = if i.is_multiple_of(40) {
            "10.244.1.5:8080"
        } else {
            "10.244.2.9:8080"
        };
        json!([{"kind": "stale-endpoint", "severity": "critical", "protocol": "tcp", "port": 30080,
                "service": "shop/web", "target": target, "message": "stale"}])
    } else {
        json!([])
    };
    json!({"findings": findings, "coverage": {"complete": true, "not_checked": []}}).to_string()
}

/// A fake API server with `n` nodes and their agents.
async fn fleet(n: usize) -> (FakeApiServer, Arc<Agents>) {
    let server = FakeApiServer::start().await;
    let agents = Agents::start().await;
    let nodes: Vec<Node> = (0..n).map(node).collect();
    server.apply_all(&nodes);
    let pods: Vec<Pod> = (0..n)
        .filter(|i| *i != NO_POD)
        .map(|i| pod(i, agents.port))
        .collect();
    server.apply_all(&pods);
    let mut by_ip = agents.by_ip.lock().unwrap();
    for i in 0..n {
        let agent = match i {
            _ if HANGS.contains(&i) => Agent::Hang,
            RESETS => Agent::Reset,
            _ => Agent::Answer(findings(i)),
        };
        by_ip.insert(IpAddr::V4(pod_ip(i)), agent);
    }
    drop(by_ip);
    (server, agents)
}

/// Runs `portdrift fleet --format json` against `server`: exit status, view, time.
async fn run_fleet(server: &FakeApiServer, agents: &Agents, extra: &[&str]) -> (i32, Value, Duration) {
    let scratch = TempDir::new().unwrap();
    let kubeconfig = server.write_kubeconfig(scratch.path());
    let port = agents.port.to_string();
    let started = Instant::now();
    let out = tokio::process::Command::new(PORTDRIFT)
        .args(["fleet", "--format", "json", "--timeout", "2s", "--port", &port])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(extra)
        .output()
        .await
        .expect("portdrift runs");
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let view = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().expect("an exit status"), view, took)
}

/// `portdrift fleet --timeout 2s EXTRA...` in text: its exit status and what it printed.
async fn run_fleet_text(server: &FakeApiServer, extra: &[&str]) -> (Option<i32>, String) {
    let scratch = TempDir::new().unwrap();
    let kubeconfig = server.write_kubeconfig(scratch.path());
    let out = tokio::process::Command::new(PORTDRIFT)
        .args(["fleet", "--timeout", "2s"])
        .args(extra)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code(), text)
}

/// The pods asked through the pod proxy, and the other requests, as the server saw them.
fn split_requests(server: &FakeApiServer) -> (BTreeSet<String>, Vec<String>) {
    let mut proxied = BTreeSet::new();
    let mut other = Vec::new();
    for r in server.requests() {
        match r.strip_prefix("/api/v1/namespaces/portdrift/pods/") {
            Some(rest) if rest.contains("/proxy/") => {
                let pod = rest.split(':').next().unwrap().to_string();
                assert!(proxied.insert(pod.clone()), "{pod} asked twice");
            }
            _ => other.push(r),
        }
    }
    (proxied, other)
}

fn names(view: &Value, list: &str) -> BTreeSet<String> {
    view[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list}: {view}"))
        .iter()
        .map(|u| u["node"].as_str().unwrap().to_string())
        .collect()
}

fn reason_of(view: &Value, node: &str) -> String {
    view["unanswered"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["node"] == node)
        .map(|u| u["reason"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("{node} is not unanswered: {view}"))
}

/// Runs the view again once the hung agents answer: what asking costs without a
/// timeout in the way. The same requests; only the reset, pending and missing agents
/// stay silent.
async fn rerun_healed(server: &FakeApiServer, agents: &Agents, n: usize, args: &[&str], proxied: usize) {
    {
        let mut by_ip = agents.by_ip.lock().unwrap();
        for i in HANGS {
            by_ip.insert(IpAddr::V4(pod_ip(i)), Agent::Answer(findings(i)));
        }
    }
    let before = server.requests().len();
    let (code, view, took) = run_fleet(server, agents, args).await;
    let requests = server.requests().len() - before;
    eprintln!(
        "fleet at {n} nodes ({}), no agent hanging: {took:?}, {requests} requests",
        args.join(" ")
    );
    assert_eq!(code, 1, "{view}");
    assert_eq!(requests, 2 + proxied);
    assert_eq!(names(&view, "unanswered").len(), 3, "{view}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

/// The list requests: exactly one Node list from the cache and one pod list.
fn assert_two_lists(other: &[String]) {
    assert_eq!(other.len(), 2, "{other:?}");
    let nodes = &other[0];
    assert!(nodes.starts_with("/api/v1/nodes?"), "{other:?}");
    assert_eq!(query_param(nodes, "resourceVersion").as_deref(), Some("0"));
    assert_eq!(query_param(nodes, "limit"), None);
    let pods = &other[1];
    assert!(
        pods.starts_with("/api/v1/namespaces/portdrift/pods?"),
        "{other:?}"
    );
    assert_eq!(
        query_param(pods, "labelSelector").as_deref(),
        Some("app.kubernetes.io/name=portdrift")
    );
}

/// `portdrift fleet` with `extra` over the `n` nodes of `fleet(n)`, its time and
/// requests printed under `label`: the view, the time and the pods asked through the
/// proxy, checked to exit 1 (drift) after the two lists.
async fn run_big_fleet(
    server: &FakeApiServer,
    agents: &Agents,
    n: usize,
    label: &str,
    extra: &[&str],
) -> (Value, Duration, BTreeSet<String>) {
    let (code, view, took) = run_fleet(server, agents, extra).await;
    let (proxied, other) = split_requests(server);
    eprintln!(
        "fleet at {n} nodes ({label}): {took:?}, {} requests ({} proxied)",
        other.len() + proxied.len(),
        proxied.len()
    );
    assert_eq!(code, 1, "{view}");
    assert_two_lists(&other);
    (view, took, proxied)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_nodes_cost_two_lists_and_a_request_per_drifted_or_unknown_node() {
    let n = 1000;
    let (server, agents) = fleet(n).await;
    let (view, took, proxied) = run_big_fleet(&server, &agents, n, "default", &["--concurrency", "8"]).await;

    // Asked: the drifted and the unknown nodes, each once; none of the clean ones.
    let by_shape =
        |want: &[Shape]| -> BTreeSet<usize> { (0..n).filter(|i| want.contains(&shape(*i))).collect() };
    let to_ask = by_shape(&[Shape::Drift, Shape::NoCondition, Shape::Unready]);
    assert_eq!(to_ask.len(), 50 + 10 + 1);
    let expected: BTreeSet<String> = to_ask
        .iter()
        .filter(|i| ![NO_POD, PENDING].contains(i))
        .map(|i| format!("portdrift-{}", node_name(*i)))
        .collect();
    assert_eq!(proxied, expected);
    // One entry per node asked, the one without an agent pod included.
    assert_eq!(view["agents"], 61, "{view}");

    // The conditions: 50 drift, 11 unknown (10 without a condition, 1 clean without a
    // ready agent, which was asked and answered, and is noted as not ready).
    let nodes = &view["nodes"];
    assert_eq!(nodes["total"], n);
    assert_eq!(names(nodes, "drift").len(), 50);
    let unknown = names(nodes, "unknown");
    assert_eq!(unknown.len(), 11);
    assert!(unknown.contains(&node_name(UNREADY)), "{unknown:?}");
    assert_eq!(nodes["clean"].as_array().unwrap().len(), n - 61);
    assert!(
        !nodes["clean"]
            .as_array()
            .unwrap()
            .contains(&json!(node_name(UNREADY)))
    );

    // The details: the stale endpoint on exactly the drifted nodes that answered.
    let silent: BTreeSet<usize> = [HANGS[0], HANGS[1], RESETS, PENDING, NO_POD].into();
    assert_eq!(
        names(&view, "unanswered"),
        silent.iter().map(|i| node_name(*i)).collect()
    );
    let with_finding: BTreeSet<String> = view["findings"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f["nodes"].as_array().unwrap().iter())
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    let drift_answering: BTreeSet<String> = by_shape(&[Shape::Drift])
        .into_iter()
        .filter(|i| !silent.contains(i))
        .map(node_name)
        .collect();
    assert_eq!(with_finding, drift_answering);
    assert!(reason_of(&view, &node_name(0)).contains("no answer within 2s"));
    assert!(reason_of(&view, &node_name(RESETS)).starts_with("503 from the pod proxy"));
    assert!(reason_of(&view, &node_name(PENDING)).contains("not running"));
    assert!(reason_of(&view, &node_name(NO_POD)).contains("no agent pod on this node"));
    assert!(!names(&view, "unanswered").contains(&node_name(UNREADY)));
    let notes = view["notes"].to_string();
    assert!(
        notes.contains("node-0501: the agent is not ready (pod portdrift-node-0501: not ready"),
        "{notes}"
    );

    // Never more agents at once than asked for; and they did overlap.
    let max = agents.max_in_flight.load(Ordering::SeqCst);
    assert!((2..=8).contains(&max), "max in flight {max}");
    // Two hung agents cost about one timeout, not two, nor the run.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    rerun_healed(&server, &agents, n, &["--concurrency", "8"], 59).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_all_every_agent_is_asked_once() {
    let n = 1000;
    let (server, agents) = fleet(n).await;
    let extra = ["--all", "--concurrency", "16"];
    let (view, took, proxied) = run_big_fleet(&server, &agents, n, "--all", &extra).await;
    assert_eq!(
        proxied.len(),
        n - 2,
        "every pod but the missing and the pending one"
    );
    assert_eq!(view["agents"], n);
    assert_eq!(view["answered"], n - 5);
    assert_eq!(names(&view, "unanswered").len(), 5);
    let max = agents.max_in_flight.load(Ordering::SeqCst);
    assert!((2..=16).contains(&max), "max in flight {max}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    rerun_healed(&server, &agents, n, &["--all", "--concurrency", "16"], n - 2).await;
}

/// A server with six clean Nodes (1 .. 6 are all Clean by shape), the agents, and a
/// ready agent pod for each node, not served yet so that a test can change one first.
async fn six_clean_nodes() -> (FakeApiServer, Arc<Agents>, Vec<Pod>) {
    let server = FakeApiServer::start().await;
    let agents = Agents::start().await;
    let nodes: Vec<Node> = (1..7).map(node).collect();
    server.apply_all(&nodes);
    let pods = (1..7).map(|i| pod(i, agents.port)).collect();
    (server, agents, pods)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_fleet_costs_two_lists_and_exits_zero() {
    let (server, agents, pods) = six_clean_nodes().await;
    server.apply_all(&pods);
    let (code, view, _) = run_fleet(&server, &agents, &[]).await;
    assert_eq!(code, 0, "{view}");
    assert_two_lists(&server.requests());
    assert_eq!(agents.requests.load(Ordering::SeqCst), 0);
    assert_eq!(view["agents"], 0);
    assert_eq!(view["nodes"]["clean"].as_array().unwrap().len(), 6);
}

/// A small clean fleet in which node 3's agent pod runs but is not ready: its clean
/// condition may be out of date, so node 3 is unknown, its agent asked and, while it
/// cannot answer, named as silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_condition_without_a_ready_agent_is_unknown_asked_and_named() {
    let (server, agents, mut pods) = six_clean_nodes().await;
    pods[2] = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "portdrift", "name": "portdrift-node-0003",
                     "labels": {"app.kubernetes.io/name": "portdrift"}},
        "spec": {"nodeName": node_name(3), "containers": [{"name": "portdrift", "image": "portdrift",
                 "ports": [{"name": "http", "containerPort": agents.port}]}]},
        "status": {"phase": "Running", "podIP": pod_ip(3).to_string(),
                   "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}]}
    }))
    .unwrap();
    server.apply_all(&pods);
    {
        let mut by_ip = agents.by_ip.lock().unwrap();
        for i in 1..7 {
            let agent = if i == 3 {
                Agent::Hang
            } else {
                Agent::Answer(findings(i))
            };
            by_ip.insert(IpAddr::V4(pod_ip(i)), agent);
        }
    }
    let (code, view, _) = run_fleet(&server, &agents, &[]).await;
    assert_eq!(code, 1, "{view}");
    let (proxied, other) = split_requests(&server);
    assert_two_lists(&other);
    assert_eq!(proxied, BTreeSet::from(["portdrift-node-0003".to_string()]));
    let nodes = &view["nodes"];
    assert_eq!(names(nodes, "unknown"), BTreeSet::from([node_name(3)]));
    assert_eq!(
        nodes["unknown"][0]["message"],
        "NodePortDrift says no drift, but no ready agent on this node \
         (pod portdrift-node-0003: not ready (ContainersNotReady)): the condition may be out of date"
    );
    assert_eq!(nodes["clean"].as_array().unwrap().len(), 5);
    assert!(reason_of(&view, &node_name(3)).contains("no answer within 2s"));

    // The text names it, with why.
    let (code, text) = run_fleet_text(&server, &["--port", &agents.port.to_string()]).await;
    assert_eq!(code, Some(1), "{text}");
    eprintln!("{text}");
    assert!(
        text.starts_with(
            "6 nodes by their NodePortDrift condition: 0 drift, 5 clean, 1 unknown\n\
             unknown:\n  node-0003: NodePortDrift says no drift, but no ready agent on this node"
        ),
        "{text}"
    );
    assert!(
        text.contains("\nno answer from 1 agents:\n  node-0003 (portdrift-node-0003): no answer within 2s\n"),
        "{text}"
    );

    // Its agent answers, a full check without findings, but it is still not ready (its
    // last scan may be old): shown, not trusted.
    agents
        .by_ip
        .lock()
        .unwrap()
        .insert(IpAddr::V4(pod_ip(3)), Agent::Answer(findings(3)));
    let (code, view, _) = run_fleet(&server, &agents, &[]).await;
    assert_eq!(code, 1, "{view}");
    assert_eq!(
        (view["agents"].as_u64(), view["answered"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        view["notes"],
        json!([
            "node-0003: the agent is not ready (pod portdrift-node-0003: not ready (ContainersNotReady)): \
             its answer may be out of date"
        ])
    );

    // Ready again: the condition stands, and nobody is asked.
    server.apply(&pod(3, agents.port));
    let before = agents.requests.load(Ordering::SeqCst);
    let (code, view, _) = run_fleet(&server, &agents, &[]).await;
    assert_eq!(code, 0, "{view}");
    assert_eq!(view["agents"], 0);
    assert_eq!(view["nodes"]["clean"].as_array().unwrap().len(), 6);
    assert_eq!(agents.requests.load(Ordering::SeqCst), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_list_on_nodes_every_agent_is_asked_and_the_view_says_why() {
    let n = 30;
    let (server, agents) = fleet(n).await;
    server.forbid("list", "nodes");
    let (code, view, _) = run_fleet(&server, &agents, &[]).await;
    let (proxied, other) = split_requests(&server);
    assert_eq!(code, 1, "{view}");
    assert_eq!(other.len(), 2, "{other:?}");
    assert_eq!(view.get("nodes"), Some(&Value::Null), "{view}");
    assert_eq!(proxied.len(), n - 1, "every agent's pod");
    let notes = view["notes"].to_string();
    assert!(
        notes.contains("cannot list the Nodes (403 nodes is forbidden")
            && notes.contains("every agent was asked instead"),
        "{notes}"
    );
}

/// `portdrift fleet --format json` over `n` nodes where RBAC denies `verb` on
/// `resource`, so that no agent can be asked: the fleet and the view, checked to exit 1
/// with the two drifted nodes from their conditions and no agent reached.
async fn fleet_view_with_no_agent_asked(
    n: usize,
    verb: &str,
    resource: &str,
) -> (FakeApiServer, Arc<Agents>, Value) {
    let (server, agents) = fleet(n).await;
    server.forbid(verb, resource);
    let (code, view, _) = run_fleet(&server, &agents, &[]).await;
    assert_eq!(code, 1, "{view}");
    assert_eq!(agents.requests.load(Ordering::SeqCst), 0);
    assert_eq!(names(&view["nodes"], "drift"), [0, 20].map(node_name).into());
    (server, agents, view)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_pod_proxy_the_conditions_are_shown_and_the_rest_named_unchecked() {
    let (server, _agents, view) = fleet_view_with_no_agent_asked(30, "get", "pods/proxy").await;
    assert_eq!(view["answered"], 0);
    assert!(
        reason_of(&view, &node_name(20))
            .starts_with("403 from the pod proxy: pods \"portdrift-node-0020\" is forbidden"),
        "{view}"
    );
    let notes = view["notes"].to_string();
    assert!(notes.contains("the pod proxy is forbidden"), "{notes}");

    // The text names what the conditions say and what was not checked.
    let (_, text) = run_fleet_text(&server, &[]).await;
    assert!(
        text.starts_with("30 nodes by their NodePortDrift condition: 2 drift, 27 clean, 1 unknown\n"),
        "{text}"
    );
    assert!(
        text.contains("node-0020 (since 2026-11-30T08:00:00Z): 1 critical NodePort finding"),
        "{text}"
    );
    assert!(text.contains("not checked:\n"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_text_names_the_drifted_unknown_and_silent_nodes() {
    let n = 30;
    let (server, agents) = fleet(n).await;
    let (code, text) = run_fleet_text(&server, &["--port", &agents.port.to_string()]).await;
    assert_eq!(code, Some(1), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..6],
        [
            "30 nodes by their NodePortDrift condition: 2 drift, 27 clean, 1 unknown",
            "drift:",
            "  node-0000 (since 2026-11-30T08:00:00Z): 1 critical NodePort finding: 1 stale-endpoint; ports tcp/30080",
            "  node-0020 (since 2026-11-30T08:00:00Z): 1 critical NodePort finding: 1 stale-endpoint; ports tcp/30080",
            "unknown:",
            "  node-0007: no NodePortDrift condition (no agent reporting, or --node-condition off)",
        ],
        "{text}"
    );
    assert!(
        text.contains("\n1 of 3 agents answered; 1 distinct findings\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "critical stale-endpoint tcp/30080 shop/web → 10.244.2.9:8080: 1 of 3 nodes: node-0020\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("  node-0000 (portdrift-node-0000): no answer within 2s\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "  node-0007: no agent pod on this node (namespace portdrift, app.kubernetes.io/name=portdrift)\n"
        ),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_list_on_pods_the_conditions_are_shown_and_none_confirmed_clean() {
    let n = 30;
    let (_server, _agents, view) = fleet_view_with_no_agent_asked(n, "list", "pods").await;
    let nodes = &view["nodes"];
    // No agent's readiness read: the clean conditions are not taken on trust.
    assert_eq!(nodes["clean"], json!([]), "{view}");
    assert_eq!(names(nodes, "unknown").len(), n - 2);
    let unconfirmed = nodes["unknown"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["node"] == node_name(1))
        .unwrap()["message"]
        .as_str()
        .unwrap();
    assert!(
        unconfirmed.starts_with(
            "NodePortDrift says no drift, but no ready agent on this node \
             (the agents' pods could not be listed: cannot list the agents' pods"
        ) && unconfirmed.contains("pods is forbidden"),
        "{unconfirmed}"
    );
    assert_eq!(
        names(&view, "unanswered"),
        (0..n).map(node_name).collect(),
        "the drifted and the unknown nodes, named"
    );
    assert!(reason_of(&view, &node_name(7)).starts_with("not asked: cannot list the agents' pods"));
    let notes = view["notes"].to_string();
    assert!(
        notes.contains("no agent was asked") && notes.contains("pods is forbidden"),
        "{notes}"
    );
    assert!(
        notes.contains("the 27 nodes whose NodePortDrift condition says no drift were not confirmed clean"),
        "{notes}"
    );
}
