//! The JSON contract's schemas (`docs/schema/`, one per kind of document): generated
//! from the types that write the JSON and checked in, and every kind of document the
//! tool writes validates against its schema with the real `check-jsonschema`: the
//! report of every shipped bundle, `ports`, `lint`, `fleet`, and in a bundle's node the
//! agent's `/findings` and a snapshot's `snapshot.json`. Documents that break the
//! contract are rejected, each for what it broke.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::agent_node::{assert_ran, in_node, read_raw};
use support::fake_apiserver::FakeApiServer;
use tempfile::TempDir;
use tokio::io::AsyncWriteExt;

/// Every kind of document, by its schema file's name.
const KINDS: [(&str, &str); 5] = [
    ("scan-report", "ScanReport"),
    ("fleet-view", "FleetView"),
    ("port-allocation", "PortAllocation"),
    ("lint-report", "LintReport"),
    ("snapshot", "Snapshot"),
];

/// The keys every document begins with.
const ENVELOPE: [&str; 5] = ["apiVersion", "kind", "generated_at", "portdrift_version", "node"];

const REGENERATE: &str = "regenerate them with `cargo run -- dev schema docs/schema`";

/// The `*.json` files of `dir`, by name.
fn json_files(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// Every object schema in `schema` (its `$defs` included) with its path.
fn object_schemas<'a>(schema: &'a Value, at: String, out: &mut Vec<(String, &'a Value)>) {
    match schema {
        Value::Object(map) => {
            if map.contains_key("properties") {
                out.push((at.clone(), schema));
            }
            for (key, value) in map {
                object_schemas(value, format!("{at}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (i, value) in items.iter().enumerate() {
                object_schemas(value, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_checked_in_schemas_are_what_the_types_generate() {
    let scratch = TempDir::new().unwrap();
    let dir = scratch.path().join("schema");
    let out = support::portdrift(&["dev", "schema", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let generated = json_files(&dir);
    let checked_in = json_files(&support::root().join("docs/schema"));
    let names = |files: &BTreeMap<String, String>| files.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&checked_in),
        names(&generated),
        "docs/schema/ does not hold one schema per kind: {REGENERATE}"
    );
    for (name, now) in &generated {
        assert!(
            checked_in[name] == *now,
            "docs/schema/{name} is not what the types generate: {REGENERATE}"
        );
    }

    for (name, kind) in KINDS {
        let schema: Value = serde_json::from_str(&generated[&format!("{name}.json")]).unwrap();
        assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert_eq!(schema["title"], format!("portdrift.io/v1 {kind}"));
        assert_eq!(schema["properties"]["apiVersion"]["const"], "portdrift.io/v1");
        assert_eq!(schema["properties"]["kind"]["const"], kind);
        assert_eq!(schema["properties"]["generated_at"]["format"], "date-time");
        assert_eq!(schema["properties"]["node"]["type"], json!(["string", "null"]));
        // Keys are always present (null or [] when they do not apply): every key of
        // every object is required, the envelope's first.
        let mut objects = Vec::new();
        object_schemas(&schema, String::new(), &mut objects);
        for (at, object) in objects {
            let mut keys: Vec<&String> = object["properties"].as_object().unwrap().keys().collect();
            let mut required: Vec<&str> = object["required"]
                .as_array()
                .unwrap_or_else(|| panic!("{name}{at}: no required keys"))
                .iter()
                .map(|k| k.as_str().unwrap())
                .collect();
            if at.is_empty() {
                assert_eq!(required[..5], ENVELOPE, "{name}");
            }
            keys.sort();
            required.sort();
            assert_eq!(required, keys, "{name}{at}: a key the JSON may leave out");
        }
    }

    // Enumerations are closed lists of the documented spellings; a finding's id is
    // required even though serde's derive does not write it.
    let scan: Value = serde_json::from_str(&generated["scan-report.json"]).unwrap();
    let defs = &scan["$defs"];
    assert_eq!(defs["Severity"]["enum"], json!(["critical", "warning", "info"]));
    assert_eq!(
        defs["Backend"]["enum"],
        json!(["iptables-nft", "iptables-legacy", "nftables"])
    );
    assert_eq!(defs["Kind"]["enum"].as_array().unwrap().len(), 20);
    assert!(
        defs["Finding"]["required"]
            .as_array()
            .unwrap()
            .contains(&"id".into())
    );
    let lint: Value = serde_json::from_str(&generated["lint-report.json"]).unwrap();
    assert_eq!(lint["$defs"]["LintCheck"]["enum"].as_array().unwrap().len(), 8);
}

/// Writes each document into `dir` as `NAME.json`: the paths.
fn write_all(dir: &Path, documents: &[(String, Vec<u8>)]) -> Vec<PathBuf> {
    documents
        .iter()
        .map(|(name, bytes)| {
            let path = dir.join(format!("{name}.json"));
            std::fs::write(&path, bytes).unwrap();
            path
        })
        .collect()
}

/// Checks `documents` against schema `name`, panicking with what check-jsonschema said.
fn assert_valid(name: &str, documents: &[PathBuf]) {
    let documents: Vec<&Path> = documents.iter().map(PathBuf::as_path).collect();
    if let Some(result) = support::schema::check(name, &documents) {
        result.unwrap_or_else(|said| panic!("not valid against docs/schema/{name}.json:\n{said}"));
    }
}

/// Every directory under testdata/ (and testdata/wild/) that `scan --from` reads.
fn bundles() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for top in ["testdata", "testdata/wild"] {
        for entry in std::fs::read_dir(support::root().join(top)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && path.file_name().is_some_and(|n| n != "wild" && n != "views") {
                dirs.push(path);
            }
        }
    }
    dirs.sort();
    dirs
}

#[test]
fn every_bundles_report_follows_the_schema() {
    let scratch = TempDir::new().unwrap();
    let mut reports = Vec::new();
    for (i, bundle) in bundles().iter().enumerate() {
        let out = support::portdrift(&["scan", "--from", bundle.to_str().unwrap(), "--format", "json"]);
        // 2: a bundle refused whole (a wild paste that is no dump) prints no report.
        if out.status.code() == Some(2) {
            continue;
        }
        reports.push((format!("{i}"), out.stdout));
    }
    assert!(reports.len() >= 40, "only {} bundles scanned", reports.len());
    assert_valid("scan-report", &write_all(scratch.path(), &reports));
}

/// `portdrift ARGS`, which exits with one of `codes`: what it printed.
fn stdout_of(args: &[&str], codes: &[i32]) -> Vec<u8> {
    let out = support::portdrift(args);
    let code = out.status.code().unwrap_or(-1);
    assert!(
        codes.contains(&code),
        "{args:?} exited {code}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn ports_and_lint_documents_follow_their_schemas() {
    let views = support::root().join("testdata/views");
    let cluster = views.join("cluster.json");
    let cluster = cluster.to_str().unwrap();
    let manifests = views.join("manifests");
    let manifests = manifests.to_str().unwrap();
    let malformed = views.join("malformed");
    let scratch = TempDir::new().unwrap();

    // The table with collisions, and one with no Service at all.
    let empty = scratch.path().join("empty.json");
    std::fs::write(&empty, r#"{"apiVersion": "v1", "kind": "List", "items": []}"#).unwrap();
    let ports = [
        (
            "ports".to_string(),
            stdout_of(&["ports", "--cluster-state", cluster, "--format", "json"], &[1]),
        ),
        (
            "ports-empty".to_string(),
            stdout_of(
                &[
                    "ports",
                    "--cluster-state",
                    empty.to_str().unwrap(),
                    "--format",
                    "json",
                ],
                &[0],
            ),
        ),
    ];
    assert_valid("port-allocation", &write_all(scratch.path(), &ports));

    // Every check's findings, with and without the cluster, and a file that is no YAML.
    let lint = [
        (
            "lint-cluster".to_string(),
            stdout_of(
                &["lint", "--format", "json", manifests, "--cluster-state", cluster],
                &[1],
            ),
        ),
        (
            "lint-files".to_string(),
            stdout_of(&["lint", "--format", "json", manifests], &[1]),
        ),
        (
            "lint-malformed".to_string(),
            stdout_of(&["lint", "--format", "json", malformed.to_str().unwrap()], &[1]),
        ),
    ];
    assert_valid("lint-report", &write_all(scratch.path(), &lint));
    let checks: Vec<Value> = lint
        .iter()
        .flat_map(|(_, bytes)| {
            let doc: Value = serde_json::from_slice(bytes).unwrap();
            doc["findings"].as_array().unwrap().clone()
        })
        .map(|f| f["check"].clone())
        .collect();
    for check in ["yaml", "allocated", "static-nodeport", "out-of-range"] {
        assert!(checks.contains(&check.into()), "no {check} finding: {checks:?}");
    }
}

/// A stand-in agent on 127.0.0.1: answers every request with `body`. Its port.
async fn agent_answering(body: Vec<u8>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                support::read_request_head(&mut stream).await;
                let head = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n";
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&body).await;
            });
        }
    });
    port
}

/// A Node with a `NodePortDrift` condition of `status`, or none.
fn node(name: &str, status: Option<&str>) -> k8s_openapi::api::core::v1::Node {
    let conditions: Vec<Value> = status
        .map(|status| {
            json!({"type": "NodePortDrift", "status": status, "reason": "NodePortDrift",
                   "message": "1 critical NodePort finding", "lastTransitionTime": "2026-11-30T08:00:00Z"})
        })
        .into_iter()
        .collect();
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                                  "status": {"conditions": conditions}}),
    )
    .unwrap()
}

/// The agent pod on `node`, Running and Ready at `ip`.
fn agent_pod(node: &str, ip: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "portdrift", "name": format!("portdrift-{node}"),
                     "labels": {"app.kubernetes.io/name": "portdrift"}},
        "spec": {"nodeName": node, "containers": [{"name": "portdrift", "image": "portdrift"}]},
        "status": {"phase": "Running", "podIP": ip,
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

/// `portdrift fleet --format json` against `server`, agents on `port`.
async fn fleet_json(server: &FakeApiServer, port: u16) -> Vec<u8> {
    let scratch = TempDir::new().unwrap();
    let kubeconfig = server.write_kubeconfig(scratch.path());
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_portdrift"))
        .args([
            "fleet",
            "--format",
            "json",
            "--timeout",
            "2s",
            "--port",
            &port.to_string(),
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .await
        .unwrap();
    // 1: a node drifted and an agent did not answer.
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_documents_follow_their_schema() {
    // The agents answer with a real report: the one of a bundle with a finding.
    let (_, report) = support::scan_json(&support::root().join("testdata/udp-stale-endpoint"), &[]);
    let port = agent_answering(serde_json::to_vec(&report).unwrap()).await;
    let server = FakeApiServer::start().await;
    server.apply_all(&[
        node("drifted", Some("True")),
        node("clean", Some("False")),
        node("unknown", None),
    ]);
    // The unknown node's agent is at an address where nothing listens.
    server.apply_all(&[
        agent_pod("drifted", "127.0.0.1"),
        agent_pod("clean", "127.0.0.1"),
        agent_pod("unknown", "127.0.0.2"),
    ]);
    let scratch = TempDir::new().unwrap();
    let by_condition = fleet_json(&server, port).await;
    // Without the Node list every agent is asked, and there are no node states.
    server.forbid("list", "nodes");
    let agents_only = fleet_json(&server, port).await;

    let views: Vec<Value> = [&by_condition, &agents_only]
        .iter()
        .map(|bytes| serde_json::from_slice(bytes).unwrap())
        .collect();
    assert_eq!(views[0]["nodes"]["drift"][0]["node"], "drifted", "{:#}", views[0]);
    assert_eq!(views[0]["nodes"]["unknown"][0]["since"], Value::Null);
    assert_eq!(views[0]["findings"][0]["kind"], "stale-endpoint");
    assert_eq!(views[0]["unanswered"][0]["node"], "unknown");
    assert_eq!(
        (&views[1]["nodes"], &views[1]["source"]),
        (&Value::Null, &Value::Null)
    );
    assert_eq!(views[1]["agents"], 3);
    let documents = [
        ("by-condition".to_string(), by_condition),
        ("agents-only".to_string(), agents_only),
    ];
    assert_valid("fleet-view", &write_all(scratch.path(), &documents));
}

/// In the bundle's node: the agent's `/findings` once it is ready, and a snapshot.
const FINDINGS_AND_SNAPSHOT: &str = r#"
start_api
start_agent
wait_for 15 ready || fail "the agent never became ready"
get /findings >"$dir/findings.json" || fail "no /findings"
stop_agent
"$pd" snapshot --out "$dir/bundle" --cluster-state "$BUNDLE/cluster.json" --node "$node" \
  >"$dir/snapshot.log" 2>&1 || fail "snapshot failed: $(cat "$dir/snapshot.log")"
stop_api
"#;

#[test]
fn the_agents_findings_and_a_snapshot_follow_their_schemas() {
    if !support::require_root("the agent and a snapshot in a bundle's node") {
        return;
    }
    let bundle = "udp-stale-endpoint";
    let scratch = TempDir::new().unwrap();
    let dir = scratch.path();
    let out = in_node(bundle, FINDINGS_AND_SNAPSHOT, &[], dir, Duration::from_secs(60));
    assert_ran(&out, dir);
    let findings: Value = serde_json::from_str(&read_raw(dir, "findings.json")).unwrap();
    let node = support::agent_node::node_of(bundle);
    assert_eq!(findings["node"], node.as_str());
    assert_valid("scan-report", &[dir.join("findings.json")]);

    let snapshot = dir.join("bundle/snapshot.json");
    let manifest: Value = serde_json::from_slice(&std::fs::read(&snapshot).unwrap()).unwrap();
    assert_eq!(
        (&manifest["kind"], &manifest["node"]),
        (&"Snapshot".into(), &node.as_str().into())
    );
    assert_valid("snapshot", &[snapshot]);
}

/// How a test document breaks the contract, and what check-jsonschema says of it.
type Breaks = fn(&mut Value);

/// Each broken copy of `document` is rejected by schema `name`, with `said` on its
/// line of check-jsonschema's answer (all checked in one run).
fn assert_rejected(name: &str, document: &Value, broken: &[(&str, Breaks, &str)]) {
    let scratch = TempDir::new().unwrap();
    let copies: Vec<(String, Vec<u8>)> = broken
        .iter()
        .enumerate()
        .map(|(i, (_, breaks, _))| {
            let mut copy = document.clone();
            breaks(&mut copy);
            (format!("broken-{i}"), serde_json::to_vec(&copy).unwrap())
        })
        .collect();
    let paths = write_all(scratch.path(), &copies);
    let documents: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let Some(result) = support::schema::check(name, &documents) else {
        return;
    };
    let said = result.expect_err("every broken document passed");
    for ((what, _, expected), path) in broken.iter().zip(&paths) {
        let line = said
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{}::", path.display())))
            .unwrap_or_else(|| panic!("{what} passed docs/schema/{name}.json:\n{said}"));
        assert!(line.contains(expected), "{what}: {line}");
    }
}

#[test]
fn documents_that_break_the_contract_are_rejected() {
    let (_, report) = support::scan_json(&support::root().join("testdata/haproxy-squatter"), &[]);
    assert!(!report["findings"].as_array().unwrap().is_empty());
    assert_rejected(
        "scan-report",
        &report,
        &[
            (
                "an unknown severity",
                |r| r["findings"][0]["severity"] = "urgent".into(),
                "$.findings[0].severity: 'urgent' is not one of",
            ),
            (
                "no finding id",
                |r| {
                    r["findings"][0].as_object_mut().unwrap().remove("id");
                },
                "'id' is a required property",
            ),
            (
                "a key left out rather than null",
                |r| {
                    r["findings"][0].as_object_mut().unwrap().remove("inode");
                },
                "'inode' is a required property",
            ),
            (
                "no node in the envelope",
                |r| {
                    r.as_object_mut().unwrap().remove("node");
                },
                "'node' is a required property",
            ),
            (
                "another contract",
                |r| r["apiVersion"] = "portdrift.io/v2".into(),
                "$.apiVersion: 'portdrift.io/v1' was expected",
            ),
            (
                "another kind",
                |r| r["kind"] = "FleetView".into(),
                "$.kind: 'ScanReport' was expected",
            ),
            (
                "a time that is no RFC 3339",
                |r| r["generated_at"] = "yesterday".into(),
                "is not a 'date-time'",
            ),
        ],
    );

    let lint = stdout_of(
        &[
            "lint",
            "--format",
            "json",
            support::root().join("testdata/views/manifests").to_str().unwrap(),
        ],
        &[1],
    );
    assert_rejected(
        "lint-report",
        &serde_json::from_slice(&lint).unwrap(),
        &[(
            "a check that is not documented",
            |r| r["findings"][0]["check"] = "spelling".into(),
            "$.findings[0].check: 'spelling' is not one of",
        )],
    );
}
