//! Serves a generated cluster from the fake API server of the integration tests
//! (`portdrift_test_support::fake_apiserver`), for benchmarks of the API watch:
//!
//! ```text
//! cargo run --release --example fake_apiserver -- --services 10000 --endpoints 5 --dir /tmp/fake
//! ```
//!
//! Writes `DIR/kubeconfig` (plain http to 127.0.0.1, no auth) once the objects are
//! loaded, then serves until stdin closes or the process is killed. Lines on stdin
//! control it: `gone` ends every watch with `410 Gone` (clients relist), `phase NAME`
//! counts the requests and bytes that follow under NAME (`--traffic-report`). It also takes the
//! agent's writes (Events, the Node's status); read them back over HTTP, e.g.
//! `GET /apis/events.k8s.io/v1/events` and `GET /api/v1/nodes/NAME`. With `--agent-pod
//! NODE@IP:PORT` it also serves a portdrift agent's Pod on NODE (namespace `portdrift`,
//! label `app.kubernetes.io/name=portdrift`), Running and Ready, whose pod-proxy path
//! forwards to IP:PORT. It serves streaming lists unless `--no-streaming-lists`;
//! `--request-log FILE` and `--traffic-report FILE` write, when it stops, what it was
//! asked and the bytes it served.

use std::path::PathBuf;

use clap::Parser;
use portdrift_test_support::fake_apiserver;
use tokio::io::AsyncBufReadExt;

#[derive(Parser)]
struct Args {
    /// How many NodePort Services.
    #[arg(long, default_value_t = 10_000)]
    services: usize,
    /// Endpoints per Service (one EndpointSlice each).
    #[arg(long, default_value_t = 5)]
    endpoints: usize,
    /// Where to write the kubeconfig.
    #[arg(long)]
    dir: PathBuf,
    /// Ends every watch with `410 Gone` this often (seconds), so that clients relist.
    #[arg(long)]
    gone_every: Option<u64>,
    /// Serve the Services, EndpointSlices and Nodes of this `kubectl get -o json` List
    /// instead of a generated cluster.
    #[arg(long)]
    objects: Option<PathBuf>,
    /// Listen here (port 0: a free port), e.g. to come back where a stopped server was.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// Also serve a Node of this name (with `--objects`; a bundle's `cluster.json` has
    /// none), so that its status can be patched (repeatable).
    #[arg(long)]
    node: Vec<String>,
    /// When it stops (stdin closed), write every request it was asked, one
    /// `METHOD path?query` a line: what the client needs RBAC for.
    #[arg(long)]
    request_log: Option<PathBuf>,
    /// When it stops, write the requests and response body bytes by phase and kind of
    /// request, tab-separated: `phase signature requests bytes` (see
    /// `request_signature` in crates/portdrift-test-support/src/fake_apiserver.rs).
    #[arg(long)]
    traffic_report: Option<PathBuf>,
    /// Serve Nodes worker-1 … worker-N (a generated cluster), one per agent.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// Send every watch that allows them a bookmark this often (seconds; the API
    /// server's watch cache sends one a minute).
    #[arg(long, default_value_t = fake_apiserver::BOOKMARK_INTERVAL.as_secs_f64())]
    bookmark_every: f64,
    /// Serve a portdrift agent's Pod `portdrift-NODE` on NODE, reached through the pod
    /// proxy at IP:PORT (repeatable). The Pod is Running and Ready, as the kubelet
    /// reports it once the agent's `/readyz` passes: the caller waits for that.
    #[arg(long, value_name = "NODE@IP:PORT")]
    agent_pod: Vec<String>,
    /// Answer streaming lists as a server without them does (`422 Invalid`, as
    /// servers before Kubernetes 1.32 do by default), so that clients list instead.
    #[arg(long)]
    no_streaming_lists: bool,
}

/// A DaemonSet pod of the agent, as the API server stores it (running and ready, with
/// its IP).
fn agent_pod(spec: &str) -> anyhow::Result<k8s_openapi::api::core::v1::Pod> {
    let (node, addr) = spec
        .split_once('@')
        .ok_or_else(|| anyhow::anyhow!("--agent-pod {spec:?}: expected NODE@IP:PORT"))?;
    let addr: std::net::SocketAddr = addr.parse()?;
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "portdrift", "name": format!("portdrift-{node}"),
                     "labels": {"app.kubernetes.io/name": "portdrift"}},
        "spec": {"nodeName": node, "containers": [{"name": "portdrift", "image": "portdrift",
                 "ports": [{"name": "http", "containerPort": addr.port()}]}]},
        "status": {"phase": "Running", "podIP": addr.ip().to_string(),
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))?)
}

/// Loads a `kubectl get … -o json` List into the server, item by item by kind.
fn serve_list(server: &fake_apiserver::FakeApiServer, path: &std::path::Path) -> anyhow::Result<()> {
    use k8s_openapi::api::{core::v1::Node, core::v1::Service, discovery::v1::EndpointSlice};
    let list: serde_json::Value = serde_json::from_slice(&std::fs::read(path)?)?;
    for item in list["items"].as_array().into_iter().flatten() {
        match item["kind"].as_str() {
            Some("Service") => {
                server.apply(&serde_json::from_value::<Service>(item.clone())?);
            }
            Some("EndpointSlice") => {
                server.apply(&serde_json::from_value::<EndpointSlice>(item.clone())?);
            }
            Some("Node") => {
                server.apply(&serde_json::from_value::<Node>(item.clone())?);
            }
            _ => {}
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let request_log = args.request_log.clone();
    let traffic_report = args.traffic_report.clone();
    let server = serve(args).await?;
    if let Some(path) = request_log {
        let mut text = server.requests_with_methods().join("\n");
        text.push('\n');
        std::fs::write(path, text)?;
    }
    if let Some(path) = traffic_report {
        let lines = server
            .traffic()
            .into_iter()
            .map(|t| format!("{}\t{}\t{}\t{}\n", t.phase, t.signature, t.requests, t.bytes));
        std::fs::write(path, lines.collect::<String>())?;
    }
    Ok(())
}

/// Serves until stdin closes; the server, for what it was asked.
async fn serve(args: Args) -> anyhow::Result<fake_apiserver::FakeApiServer> {
    let bookmarks = Some(std::time::Duration::try_from_secs_f64(args.bookmark_every)?);
    let server = fake_apiserver::FakeApiServer::start_at(args.listen, bookmarks).await;
    if args.no_streaming_lists {
        server.set_streaming_lists(fake_apiserver::StreamingLists::Refused);
    }
    match &args.objects {
        Some(path) => {
            serve_list(&server, path)?;
            for node in &args.node {
                server.apply(&fake_apiserver::objects::node(node, None));
            }
        }
        None => {
            let (services, slices) =
                fake_apiserver::objects::realistic_cluster(args.services, args.endpoints);
            server.apply_all(&services);
            server.apply_all(&slices);
            for i in 1..=args.nodes.max(1) {
                let zone = format!("zone-{}", (i - 1) % 3);
                server.apply(&fake_apiserver::objects::node(
                    &format!("worker-{i}"),
                    Some(&zone),
                ));
            }
        }
    }
    for spec in &args.agent_pod {
        server.apply(&agent_pod(spec)?);
    }
    // Written last: its appearance tells the caller that everything is served.
    let staging = args.dir.join("staging");
    std::fs::create_dir_all(&staging)?;
    let written = server.write_kubeconfig(&staging);
    std::fs::rename(written, args.dir.join("kubeconfig"))?;
    eprintln!("fake API server on {}", server.url());
    let mut gone_every = args
        .gone_every
        .map(|seconds| tokio::time::interval(std::time::Duration::from_secs(seconds)));
    if let Some(tick) = &mut gone_every {
        tick.tick().await;
    }
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        let gone_tick = async {
            match &mut gone_every {
                Some(tick) => {
                    tick.tick().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = gone_tick => server.force_gone(),
            line = stdin.next_line() => match line {
                Ok(Some(line)) => control(&server, line.trim()),
                Ok(None) | Err(_) => return Ok(server),
            },
        }
    }
}

/// One control line from stdin.
fn control(server: &fake_apiserver::FakeApiServer, line: &str) {
    match line.split_once(' ').unwrap_or((line, "")) {
        ("gone", "") => server.force_gone(),
        ("phase", name) if !name.is_empty() => server.set_traffic_phase(name),
        _ => eprintln!("fake API server: unknown control line {line:?} (gone, phase NAME)"),
    }
}
