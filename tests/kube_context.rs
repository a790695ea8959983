//! `--context` through the real binary, as kubectl reads it: a kubeconfig with two
//! contexts, its current-context pointing at an API server that is not there and the
//! other at the fake API server. `portdrift ports` (the cheapest command that reads the
//! API) must reach the server the context names, from `--kubeconfig` or from
//! `KUBECONFIG`, and name a context the kubeconfig lacks.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::path::Path;
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::Service;
use serde_json::{Value, json};
use support::fake_apiserver::{FakeApiServer, Kind};

/// Runs the binary off the async runtime (the fake API server runs on it), with
/// `KUBECONFIG` set to `kubeconfig` when given and `HOME` pointing nowhere useful.
async fn portdrift(args: &[&str], kubeconfig: Option<&Path>, home: &Path) -> Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let kubeconfig = kubeconfig.map(Path::to_path_buf);
    let home = home.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_portdrift"));
        command.args(&args).env_remove("KUBECONFIG").env("HOME", &home);
        if let Some(path) = kubeconfig {
            command.env("KUBECONFIG", path);
        }
        command.output().expect("the portdrift binary runs")
    })
    .await
    .expect("the binary ran")
}

/// A kubeconfig whose current-context `broken` points at `broken_url` and whose
/// context `good` points at `good_url`.
fn two_contexts(dir: &Path, good_url: &str, broken_url: &str) -> std::path::PathBuf {
    let path = dir.join("two-contexts");
    let text = format!(
        "apiVersion: v1\nkind: Config\n\
         clusters:\n\
         - name: good\n  cluster:\n    server: {good_url}\n\
         - name: broken\n  cluster:\n    server: {broken_url}\n\
         contexts:\n\
         - name: broken\n  context:\n    cluster: broken\n    user: nobody\n\
         - name: good\n  context:\n    cluster: good\n    user: nobody\n\
         current-context: broken\n\
         users:\n- name: nobody\n  user: {{}}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn node_port_service(namespace: &str, name: &str, port: u16) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"type": "NodePort", "selector": {"app": name},
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080,
                            "nodePort": port}]}
    }))
    .unwrap()
}

/// The `service` of every allocation in a `ports --format json` table.
fn allocated(out: &Output) -> Vec<(u64, String)> {
    let table: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    table["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["port"].as_u64().unwrap(),
                a["service"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_picks_the_server_the_kubeconfig_names_for_it() {
    support::scenario(async {
        let server = FakeApiServer::start().await;
        server.apply(&node_port_service("shop", "web", 30080));
        // A port that was free a moment ago: nothing listens there, connections are refused.
        let broken = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", listener.local_addr().unwrap())
        };
        let scratch = tempfile::TempDir::new().unwrap();
        let kubeconfig = two_contexts(scratch.path(), &server.url(), &broken);
        let path = kubeconfig.to_str().unwrap();
        let home = scratch.path();
        let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();

        // --context picks the good server over the current-context.
        let out = portdrift(
            &[
                "ports",
                "--kubeconfig",
                path,
                "--context",
                "good",
                "--format",
                "json",
            ],
            None,
            home,
        )
        .await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(allocated(&out), [(30080, "shop/web".to_string())]);
        let asked = server.requests_for(Kind::Service).len();
        assert!(asked > 0, "the good server was not asked");

        // Without it, the current-context's server: unreachable, a clear error, and the
        // good server is not asked.
        let out = portdrift(
            &["ports", "--kubeconfig", path, "--api-timeout", "5s"],
            None,
            home,
        )
        .await;
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("cannot list services"), "{}", stderr(&out));
        assert_eq!(server.requests_for(Kind::Service).len(), asked);

        // The same from KUBECONFIG, as kubectl infers it.
        let out = portdrift(
            &["ports", "--context", "good", "--format", "json"],
            Some(&kubeconfig),
            home,
        )
        .await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(allocated(&out), [(30080, "shop/web".to_string())]);
        assert!(server.requests_for(Kind::Service).len() > asked);

        // A context the kubeconfig lacks is named, with the ones it has; nothing is asked.
        let asked = server.requests().len();
        for kubeconfig_env in [None, Some(kubeconfig.as_path())] {
            let mut args = vec!["ports", "--context", "staging"];
            if kubeconfig_env.is_none() {
                args.extend(["--kubeconfig", path]);
            }
            let out = portdrift(&args, kubeconfig_env, home).await;
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{err}");
            assert!(
                err.contains("context \"staging\" is not in the kubeconfig") && err.contains("broken, good"),
                "{err}"
            );
        }
        // The commands that read the cluster state first fail the same way, before
        // anything else: a snapshot does not silently go without its cluster.json, nor
        // does the agent start.
        let out_dir = scratch.path().join("bundle");
        let out_dir = out_dir.to_str().unwrap();
        let snapshot = [
            "snapshot",
            "--out",
            out_dir,
            "--kubeconfig",
            path,
            "--context",
            "staging",
        ];
        let run = [
            "run",
            "--node",
            "worker-1",
            "--listen",
            "127.0.0.1:0",
            "--findings-listen",
            "off",
            "--kubeconfig",
            path,
            "--context",
            "staging",
        ];
        for args in [&snapshot[..], &run[..]] {
            let out = portdrift(args, None, home).await;
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains("context \"staging\" is not in the kubeconfig"),
                "{args:?}: {err}"
            );
        }
        assert_eq!(server.requests().len(), asked);

        // --context with no kubeconfig anywhere: said so, not a silent in-cluster try.
        let out = portdrift(&["ports", "--context", "good"], None, home).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("KUBECONFIG or ~/.kube/config") && err.contains("\"good\""),
            "{err}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lint_consults_the_cluster_of_a_context_named_alone() {
    support::scenario(async {
        let server = FakeApiServer::start().await;
        server.apply(&node_port_service("shop", "web", 30080));
        let scratch = tempfile::TempDir::new().unwrap();
        let kubeconfig = two_contexts(scratch.path(), &server.url(), "http://127.0.0.1:1");
        let manifest = scratch.path().join("svc.yaml");
        std::fs::write(
            &manifest,
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: api\n  namespace: team-b\n\
             spec:\n  type: NodePort\n  ports:\n  - port: 80\n    nodePort: 30080\n",
        )
        .unwrap();
        let manifest = manifest.to_str().unwrap();
        let checks = |out: &Output| -> Vec<String> {
            let report: Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
            let findings = report["findings"].as_array().unwrap().iter();
            findings
                .map(|f| f["check"].as_str().unwrap().to_string())
                .collect()
        };
        // KUBECONFIG alone is not asked: a CI job without credentials lints offline.
        let offline = portdrift(
            &["lint", manifest, "--format", "json"],
            Some(&kubeconfig),
            scratch.path(),
        )
        .await;
        assert!(server.requests().is_empty(), "{:?}", server.requests());
        // --context alone names a cluster: it is asked, and the collision found.
        let with_context = portdrift(
            &["lint", manifest, "--context", "good", "--format", "json"],
            Some(&kubeconfig),
            scratch.path(),
        )
        .await;
        assert!(!server.requests_for(Kind::Service).is_empty());
        let (offline, with_context) = (checks(&offline), checks(&with_context));
        assert!(!offline.contains(&"allocated".to_string()), "{offline:?}");
        assert!(
            with_context.contains(&"allocated".to_string()),
            "{with_context:?}"
        );
    })
    .await;
}
