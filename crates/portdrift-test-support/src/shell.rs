//! Scripts the tests run in private namespaces: bash helpers, a stand-in for
//! kube-proxy's health endpoint, and a script run in a fresh network namespace.

use std::process::Command;

/// A stand-in for kube-proxy's health endpoint, in Python: the class `Healthz` answers
/// every GET with kube-proxy's `/healthz` body, synced just now. The including script
/// serves it (`HTTPServer((addr, port), Healthz)`).
pub const KUBE_PROXY_HEALTHZ_PY: &str = r#"
import datetime, json
from http.server import BaseHTTPRequestHandler, HTTPServer

class Healthz(BaseHTTPRequestHandler):
    def do_GET(self):
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = json.dumps({"lastUpdated": now, "currentTime": now, "nodeEligible": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass
"#;

/// Bash helpers for the scenarios run inside a node's namespace: `fail MESSAGE`,
/// `now_ms`, and `wait_for SECONDS CMD...` (runs CMD every 0.1 s until it succeeds;
/// false after SECONDS).
pub const SHELL_HELPERS: &str = r#"
fail() { echo "FAILED: $*" >&2; exit 1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
wait_for() {
  local deadline=$(( $(now_ms) + $1 * 1000 )); shift
  until "$@"; do
    (( $(now_ms) < deadline )) || return 1
    sleep 0.1
  done
}
"#;

/// Runs a shell script in a fresh network namespace of its own; panics with what it
/// printed when it fails.
pub fn run_in_fresh_netns(what: &str, shell: &str) {
    let run = Command::new("unshare")
        .args(["-n", "sh", "-c", shell])
        .output()
        .expect("unshare runs");
    assert!(
        run.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    // What the inner test printed, for `--nocapture`.
    eprint!("{}", String::from_utf8_lossy(&run.stderr));
}
