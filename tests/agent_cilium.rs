//! The agent on a node whose Services Cilium forwards: the bundle's maps built in a
//! private BPF filesystem (`scripts/capture-testdata.sh --exec`), the agent reading them
//! with `--bpf-root`, its cluster state from the fake API server. Its `/findings`,
//! metrics and Events cover the maps as they cover kube-proxy's rules.
//!
//! Needs root, bpftool and the fake API server example; with `CI` set nothing is skipped.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::time::Duration;

use support::agent_node::{assert_ran, in_node, node_of, read, read_raw, sample};
use tempfile::TempDir;

const SERVE: &str = r#"
start_api
agent_flags="--events --bpf-root $BPF_ROOT" start_agent
wait_for 15 ready
get /findings >"$dir/findings.json"
reported() {
  curl -s -m 2 "http://$api/apis/events.k8s.io/v1/events" >"$dir/events.json"
  grep -q StaleEndpointRule "$dir/events.json" && grep -q MissingEndpointRule "$dir/events.json"
}
wait_for 5 reported
get /metrics >"$dir/metrics.txt"
stop_agent
"#;

#[test]
fn the_agent_checks_a_cilium_nodes_maps_and_reports_their_drift() {
    if !support::require_root("the agent on a Cilium node") {
        return;
    }
    let bundle = "cilium-stale-backend";
    let scratch = TempDir::new().unwrap();
    let dir = scratch.path();
    let out = in_node(bundle, SERVE, &[], dir, Duration::from_secs(60));
    assert_ran(&out, dir);
    let log = read_raw(dir, "agent.log");

    let findings: serde_json::Value = serde_json::from_str(&read(dir, "findings.json"))
        .unwrap_or_else(|e| panic!("/findings is not JSON ({e}); agent log:\n{log}"));
    assert_eq!(findings["node"], node_of(bundle).as_str());
    let bundle_dir = support::root().join("testdata").join(bundle);
    if let Err(e) = support::compare_with_expected(&bundle_dir, &findings) {
        panic!("/findings: {e}\nagent log:\n{log}");
    }
    assert_eq!(
        findings["coverage"]["proxy_mode"], "replaced",
        "{:#}",
        findings["coverage"]
    );
    assert_eq!(
        findings["coverage"]["complete"], true,
        "{:#}",
        findings["coverage"]
    );
    // Each map is a source of its own, read with bpftool from the BPF filesystem.
    let services = support::source(&findings, "bpf/cilium_lb4_services_v2.json");
    assert_eq!(services["status"], "ok", "{services:#}");
    assert!(
        services["origin"]
            .as_str()
            .is_some_and(|o| o.starts_with("bpftool -j map dump pinned ")),
        "{services:#}"
    );

    let metrics = read_raw(dir, "metrics.txt");
    for (series, want) in [
        ("portdrift_findings{kind=\"stale-endpoint\"}", 1.0),
        ("portdrift_findings{kind=\"missing-endpoint\"}", 1.0),
        ("portdrift_findings{kind=\"missing-backend\"}", 0.0),
        ("portdrift_proxy_mode_info{mode=\"replaced\"}", 1.0),
        ("portdrift_coverage_complete", 1.0),
        // Each map under its own name, as the report names it.
        (
            "portdrift_source_up{source=\"bpf/cilium_lb4_services_v2.json\"}",
            1.0,
        ),
    ] {
        assert_eq!(sample(&metrics, series), Some(want), "{series} in:\n{metrics}");
    }
    if let Some((ok, said)) = support::promtool::check(&metrics) {
        assert!(ok, "promtool check metrics: {said}\n{metrics}");
    }

    // An Event per finding, on the Service.
    let events: serde_json::Value = serde_json::from_str(&read(dir, "events.json"))
        .unwrap_or_else(|e| panic!("the Event list is not JSON ({e}); agent log:\n{log}"));
    let mut reasons: Vec<(String, String)> = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_string(),
                format!(
                    "{}/{}",
                    e["regarding"]["namespace"].as_str().unwrap_or("?"),
                    e["regarding"]["name"].as_str().unwrap_or("?")
                ),
            )
        })
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            ("MissingEndpointRule".to_string(), "shop/web".to_string()),
            ("StaleEndpointRule".to_string(), "shop/web".to_string()),
        ],
        "{events:#}"
    );
}
