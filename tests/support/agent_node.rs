//! The agent inside a bundle's node (real rules in a private network namespace, by
//! `scripts/capture-testdata.sh --exec`) with the bundle's cluster state served by the
//! fake API server (`examples/fake_apiserver`): the scenario scaffolding that the agent,
//! and the deploy tests share.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// What every scenario starts with, inside the namespace. Its arguments: portdrift, the
/// fake API server, the scratch directory, the node's name, then the scenario's own.
/// A step that fails ends the script with its reason on stderr; `fail`, `now_ms` and
/// `wait_for` come from [`super::SHELL_HELPERS`], added after it.
pub const PRELUDE: &str = r#"
set -u
pd=$1; fake=$2; dir=$3; node=$4; shift 4
url=http://127.0.0.1:9741
# /findings is on the agent's loopback listener (--findings-listen, by default).
findings_url=http://127.0.0.1:9742
# A fixed address, so that a stopped API server can come back where the kubeconfig points.
api=127.0.0.1:6443
# Where a path is served: /findings on the findings listener, the rest on --listen.
at() { case $1 in /findings) echo "$findings_url$1" ;; *) echo "$url$1" ;; esac; }
status() { curl -s -m 2 -o /dev/null -w '%{http_code}' "$(at "$1")"; }
# The body of a 200 answer (nothing, and false, for any other).
get() { curl -s -f -m 2 "$(at "$1")"; }
ready() { [ "$(status /readyz)" = 200 ]; }
# The fake API server with the bundle's cluster state. It writes the kubeconfig once
# everything is served, and stops when its stdin closes: a long sleep holds that open
# (through a FIFO, so that no other process inherits it), and stop_api ends the sleep.
start_api() {
  rm -f "$dir/kubeconfig" "$dir/api-in"
  mkfifo "$dir/api-in"
  sleep 300 >"$dir/api-in" &
  api_sleep_pid=$!
  # shellcheck disable=SC2086 # api_flags: words to split.
  "$fake" --objects "$BUNDLE/cluster.json" --node "$node" --dir "$dir" --listen "$api" ${api_flags:-} \
    2>>"$dir/server.log" <"$dir/api-in" &
  api_pid=$!
  wait_for 10 test -f "$dir/kubeconfig" || fail "the fake API server did not start"
}
# Closes the fake API server's stdin and waits for it to finish (and write its
# --request-log, when it has one).
stop_api() {
  kill "$api_sleep_pid"
  wait "$api_pid" || fail "the fake API server failed: $(cat "$dir/server.log")"
}
start_agent() {
  "$pd" run --node "$node" --listen 127.0.0.1:9741 --interval 1s --kubeconfig "$dir/kubeconfig" \
    --kube-proxy-healthz off --startup-jitter 0s --log-format "${log_format:-json}" ${agent_flags:-} 2>"$dir/agent.log" &
  agent_pid=$!
}
# SIGTERM, timed. A watchdog kills an agent that ignores it after 10 s (the test fails).
stop_agent() {
  local start
  start=$(now_ms)
  kill -TERM "$agent_pid"
  (sleep 10; kill -KILL "$agent_pid" 2>/dev/null) &
  wait "$agent_pid"
  echo $? >"$dir/exit"
  echo $(( $(now_ms) - start )) >"$dir/stop_ms"
}
"#;

/// The node a bundle was captured on.
pub fn node_of(bundle: &str) -> String {
    let path = super::root().join("testdata").join(bundle).join("node");
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

/// Runs `PRELUDE` + `script` (bash) inside `bundle`'s node, with `args` after the
/// prelude's, under `timeout`. Its files land in `dir`.
pub fn in_node(bundle: &str, script: &str, args: &[&str], dir: &Path, limit: Duration) -> Output {
    Command::new("timeout")
        .args(["--kill-after=5", &limit.as_secs().to_string(), "bash"])
        .arg(super::root().join("scripts/capture-testdata.sh"))
        .args(["--exec", bundle, "--", "bash", "-c"])
        .arg(format!("{PRELUDE}{}\n{script}", super::SHELL_HELPERS))
        .arg("bash")
        .arg(super::bin())
        .arg(super::fake_apiserver_bin())
        .arg(dir)
        .arg(node_of(bundle))
        .args(args)
        .output()
        .expect("the capture script runs")
}

/// Panics with the scenario's output and the agent's log unless it succeeded.
pub fn assert_ran(out: &Output, dir: &Path) {
    assert!(
        out.status.success(),
        "{:?}\nstdout: {}\nstderr: {}\nagent log:\n{}\nAPI server log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        read_raw(dir, "agent.log"),
        read_raw(dir, "server.log"),
    );
}

/// A file the script wrote, as is.
pub fn read_raw(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

/// A one-line file the script wrote, without its newline.
pub fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name))
        .unwrap_or_default()
        .trim_end()
        .to_string()
}

/// The value of the sample `name` (with its labels) in a Prometheus text exposition.
pub fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
