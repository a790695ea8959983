//! `portdrift fleet`, end to end, inside a bundle's node (real rules in a private
//! network namespace, by `scripts/capture-testdata.sh --exec`), with the fake API
//! server (`examples/fake_apiserver --agent-pod`) proxying to five agent pods, which it
//! serves Running and Ready (the view starts once the real agents' `/readyz` says so):
//!
//! - node-a and node-b: real `portdrift run --node-condition` agents on the bundle's
//!   rules, whose Nodes carry the `NodePortDrift` condition they set;
//! - node-c: a real HTTP server serving the `/findings` that `portdrift scan --from`
//!   gives for another bundle (a node with other drift);
//! - node-d: accepts connections and never answers (hangs);
//! - node-e: gone (nothing listens on its address);
//! - node-f: a real agent as deployed by default, whose `/findings` is on its node's
//!   loopback, out of the pod proxy's reach: the view says so and points at
//!   `--prometheus`.
//!
//! node-c to node-f have no Node in the fake, so the view asks their agents too (a pod
//! on a node the list lacks is never taken as clean).
//!
//! The view must put each finding on exactly the nodes whose own `/findings` have it,
//! list node-d and node-e as not answering, and finish within about one timeout even
//! though node-d never answers.
//!
//! Needs root (CI runs as root and must not skip it), curl and python3 in the namespace.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

const PORTDRIFT: &str = env!("CARGO_BIN_EXE_portdrift");

/// Inside the namespace. Arguments: portdrift, the fake API server, the scratch
/// directory, the other bundle's directory.
const SCRIPT: &str = r#"
set -u
pd=$1; fake=$2; dir=$3; other=$4
ready() { [ "$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://$1:9741/readyz")" = 200 ]; }

"$fake" --objects "$BUNDLE/cluster.json" --node node-a --node node-b --dir "$dir" --listen 127.0.0.1:6443 \
  --agent-pod node-a@127.0.0.2:9741 --agent-pod node-b@127.0.0.3:9741 \
  --agent-pod node-c@127.0.0.4:9741 --agent-pod node-d@127.0.0.5:9741 \
  --agent-pod node-e@127.0.0.6:9741 --agent-pod node-f@127.0.0.7:9741 2>>"$dir/server.log" < <(sleep 300) &
wait_for 10 test -f "$dir/kubeconfig" || fail "the fake API server did not start"

# The pod proxy reaches an agent at its pod's address: these serve /findings there too,
# as an agent given its --listen address as --findings-listen does.
for n in a:2 b:3; do
  "$pd" run --node "node-${n%:*}" --listen "127.0.0.${n#*:}:9741" --findings-listen "127.0.0.${n#*:}:9741" \
    --interval 1s --node-condition \
    --kubeconfig "$dir/kubeconfig" --kube-proxy-healthz off --startup-jitter 0s 2>>"$dir/agent-${n%:*}.log" &
done
# node-f: --findings-listen left at its default, the node's loopback.
"$pd" run --node node-f --listen 127.0.0.7:9741 --interval 1s \
  --kubeconfig "$dir/kubeconfig" --kube-proxy-healthz off --startup-jitter 0s 2>>"$dir/agent-f.log" &
mkdir -p "$dir/static"
"$pd" scan --from "$other" --format json >"$dir/static/findings"
python3 -m http.server --bind 127.0.0.4 9741 --directory "$dir/static" 2>/dev/null &
python3 -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.5", 9741)); s.listen(16); time.sleep(300)' &
wait_for 20 ready 127.0.0.2 || fail "agent node-a not ready"
wait_for 20 ready 127.0.0.3 || fail "agent node-b not ready"
wait_for 10 curl -sf -m 1 -o /dev/null http://127.0.0.4:9741/findings || fail "node-c's server"
wait_for 10 curl -sf -m 1 -o /dev/null http://127.0.0.7:9741/healthz || fail "node-f's agent"
# The real agents' NodePortDrift conditions, as the fleet view reads them.
has_condition() { curl -sf -m 2 "http://127.0.0.1:6443/api/v1/nodes/$1" | grep -q '"NodePortDrift"'; }
wait_for 20 has_condition node-a || fail "node-a's condition"
wait_for 20 has_condition node-b || fail "node-b's condition"

# What each agent says itself, for the comparison.
for n in a:2 b:3 c:4; do
  curl -sf -m 2 "http://127.0.0.${n#*:}:9741/findings" >"$dir/own-${n%:*}.json"
done
start=$(now_ms)
"$pd" fleet --kubeconfig "$dir/kubeconfig" --timeout 3s --concurrency 2 --format json \
  >"$dir/fleet.json" 2>"$dir/fleet.err"
echo $? >"$dir/fleet.exit"
echo $(( $(now_ms) - start )) >"$dir/fleet.ms"
"$pd" fleet --kubeconfig "$dir/kubeconfig" --timeout 3s >"$dir/fleet.txt" 2>&1 || true
"#;

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

fn json(dir: &Path, name: &str) -> Value {
    let text = read(dir, name);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} is not JSON ({e}): {text}"))
}

/// The key a fleet view groups by.
fn key(f: &Value) -> String {
    ["kind", "severity", "protocol", "port", "service", "target"]
        .iter()
        .map(|k| f[*k].to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn the_fleet_view_groups_real_agents_findings_and_names_the_silent_ones() {
    if !support::require_root("the fleet view over real agents")
        || !support::require_tool("python3", "the fleet view over real agents")
    {
        return;
    }
    let bundle = "udp-stale-endpoint";
    let other = support::root().join("testdata/duplicate-dnat-30080");
    let scratch = TempDir::new().unwrap();
    let dir = scratch.path();
    let out = Command::new("timeout")
        .args(["--kill-after=5", "90", "bash"])
        .arg(support::root().join("scripts/capture-testdata.sh"))
        .args(["--exec", bundle, "--", "bash", "-c"])
        .arg(format!("{}{SCRIPT}", support::SHELL_HELPERS))
        .args(["bash", PORTDRIFT])
        .arg(support::fake_apiserver_bin())
        .arg(dir)
        .arg(&other)
        .output()
        .expect("the capture script runs");
    assert!(
        out.status.success(),
        "{:?}\nstderr: {}\nagent a:\n{}\nAPI server:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        read(dir, "agent-a.log"),
        read(dir, "server.log")
    );

    let view = json(dir, "fleet.json");
    assert_eq!(read(dir, "fleet.exit").trim(), "1", "{}", read(dir, "fleet.err"));
    assert_eq!(
        (view["agents"].as_u64(), view["answered"].as_u64()),
        (Some(6), Some(3))
    );

    // The real agents' conditions say drift on node-a and node-b; the other pods'
    // nodes are not in the Node list, so their agents are asked too.
    let drift: Vec<(&str, &str)> = view["nodes"]["drift"]
        .as_array()
        .unwrap_or_else(|| panic!("no nodes in {view}"))
        .iter()
        .map(|n| (n["node"].as_str().unwrap(), n["message"].as_str().unwrap()))
        .collect();
    assert_eq!(view["nodes"]["total"], 2, "{view}");
    assert_eq!(drift.len(), 2, "{view}");
    assert_eq!((drift[0].0, drift[1].0), ("node-a", "node-b"));
    assert!(drift[0].1.contains("critical NodePort finding"), "{drift:?}");

    // Each finding on exactly the nodes whose own /findings have it.
    let mut expected: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for node in ["a", "b", "c"] {
        let own = json(dir, &format!("own-{node}.json"));
        for f in own["findings"].as_array().unwrap() {
            expected.entry(key(f)).or_default().insert(format!("node-{node}"));
        }
    }
    let got: BTreeMap<String, BTreeSet<String>> = view["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let nodes = f["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_string());
            (key(f), nodes.collect())
        })
        .collect();
    assert_eq!(got, expected);
    // The bundle's stale UDP endpoint is on both real agents, the other bundle's
    // drift on node-c alone.
    let nodes_of = |kind: &str, protocol: &str| -> Vec<BTreeSet<String>> {
        got.iter()
            .filter(|(k, _)| k.starts_with(&format!("\"{kind}\"")) && k.contains(&format!("\"{protocol}\"")))
            .map(|(_, n)| n.clone())
            .collect()
    };
    let pair: BTreeSet<String> = ["node-a".to_string(), "node-b".to_string()].into();
    assert_eq!(nodes_of("stale-endpoint", "udp"), [pair]);
    assert_eq!(
        nodes_of("duplicate-rule", "tcp"),
        [BTreeSet::from(["node-c".to_string()])]
    );

    let silent: Vec<(String, String)> = view["unanswered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["node"].as_str().unwrap().to_string(),
                u["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(silent.len(), 3, "{silent:?}");
    assert_eq!(silent[0].0, "node-d");
    assert!(silent[0].1.contains("no answer within 3s"), "{silent:?}");
    assert_eq!(silent[1].0, "node-e");
    assert!(
        silent[1].1.contains("503") && silent[1].1.contains("127.0.0.6:9741"),
        "{silent:?}"
    );
    assert_eq!(silent[2].0, "node-f");
    assert!(
        silent[2].1.contains("loopback only") && silent[2].1.contains("--prometheus"),
        "{silent:?}"
    );

    // The hung agent costs one timeout, not the run.
    let ms: u64 = read(dir, "fleet.ms").trim().parse().unwrap();
    assert!(Duration::from_millis(ms) < Duration::from_secs(8), "took {ms} ms");

    let text = read(dir, "fleet.txt");
    assert!(
        text.starts_with("2 nodes by their NodePortDrift condition: 2 drift, 0 clean, 0 unknown\n"),
        "{text}"
    );
    assert!(text.contains("3 of 6 agents answered"), "{text}");
    assert!(text.contains(": 2 of 6 nodes: node-a, node-b"), "{text}");
    assert!(
        text.contains("node-d (portdrift-node-d): no answer within 3s"),
        "{text}"
    );
}
