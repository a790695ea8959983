//! The agent's `/explain`, end to end: inside a bundle's node (real rules in a private
//! network namespace) with the bundle's cluster state served by the fake API server.
//! The bundle's udp/30514 DNATs to a deleted syslog pod; `/explain` says so from the
//! running agent as `portdrift explain` does from a snapshot, is served on the
//! findings listener only, and refuses a bad query with a reason.
//!
//! Needs root (CI runs as root and must not skip it).

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::time::Duration;

use support::agent_node::{assert_ran, in_node, read_raw};
use tempfile::TempDir;

const ASK: &str = r#"
start_api
start_agent
wait_for 15 ready || fail "the agent never became ready"
ex="$findings_url/explain"
curl -s -m 30 -o "$dir/explain.json" -w '%{http_code}' "$ex?port=udp/30514" >"$dir/explain.status"
curl -s -m 30 -o "$dir/explain.txt" -w '%{http_code}' "$ex?port=udp/30514&format=text" >"$dir/text.status"
curl -s -m 5 -o "$dir/bad.txt" -w '%{http_code}' "$ex?port=udp/notaport" >"$dir/bad.status"
curl -s -m 5 -o /dev/null -w '%{http_code}' "$url/explain?port=udp/30514" >"$dir/public.status"
stop_agent
"#;

#[test]
fn the_agent_explains_a_port_as_the_command_does() {
    if !support::require_root("the agent in a bundle's node") {
        return;
    }
    let scratch = TempDir::new().unwrap();
    let dir = scratch.path();
    let out = in_node("udp-stale-endpoint", ASK, &[], dir, Duration::from_secs(90));
    assert_ran(&out, dir);
    assert_eq!(
        read_raw(dir, "explain.status"),
        "200",
        "{}",
        read_raw(dir, "explain.json")
    );
    let served: serde_json::Value = serde_json::from_str(&read_raw(dir, "explain.json")).unwrap();
    assert_eq!(served["kind"], "Explanation");
    assert_eq!(served["node"], support::agent_node::node_of("udp-stale-endpoint"));
    if let Some(result) = support::schema::check("explanation", &[dir.join("explain.json").as_path()]) {
        result.unwrap_or_else(|said| panic!("/explain does not follow the schema: {said}"));
    }

    // The same answer as the command on the bundle captured from this node.
    let bundle = support::root().join("testdata/udp-stale-endpoint");
    let cmd = support::portdrift(&[
        "explain",
        "udp/30514",
        "--from",
        bundle.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let offline: serde_json::Value = serde_json::from_slice(&cmd.stdout).unwrap();
    assert_eq!(served["outcome"], offline["outcome"]);
    assert_eq!(served["endpoints"], offline["endpoints"], "{served:#}");
    assert_eq!(
        served["differences"].as_array().unwrap().len(),
        offline["differences"].as_array().unwrap().len()
    );
    assert!(
        !served["differences"].as_array().unwrap().is_empty(),
        "the stale endpoint differs from the API"
    );

    assert_eq!(read_raw(dir, "text.status"), "200");
    assert!(
        read_raw(dir, "explain.txt").contains("Outcome: dnat"),
        "{}",
        read_raw(dir, "explain.txt")
    );
    assert_eq!(read_raw(dir, "bad.status"), "400");
    assert!(
        read_raw(dir, "bad.txt").contains("PROTO/PORT"),
        "{}",
        read_raw(dir, "bad.txt")
    );
    assert_eq!(
        read_raw(dir, "public.status"),
        "404",
        "not on the public listener"
    );
}
