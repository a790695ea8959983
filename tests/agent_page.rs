//! The agent's page (`GET /`) in a real browser: inside a bundle's node (real rules in a
//! private network namespace) with the bundle's cluster state served by the fake API
//! server, plus one stale NodePort rule, loaded with `iptables-nft-restore`, whose
//! kube-proxy comment carries `<script>alert(1)</script>`. Debian's headless Chromium
//! loads `/` from both listeners and dumps the DOM it built:
//!
//! - on the findings listener, the page names the node and each finding (port, kind,
//!   target), links each port to `/explain`, and shows the injected script as text:
//!   the DOM holds no `<script>` element at all;
//! - on the public listener, the page counts the findings by kind and names no pod's
//!   address, no rule and no comment;
//! - both are served as HTML under a Content-Security-Policy that runs no script.
//!
//! Needs root and Chromium (`scripts/test.sh` installs it; CI must not skip this), and a
//! built fake API server (`cargo test` builds it; alone, `cargo build --example
//! fake_apiserver` first).

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::agent_node::{assert_ran, in_node, node_of, read_raw};
use tempfile::TempDir;

const BUNDLE: &str = "udp-stale-endpoint";

/// The bundle's finding: a stale endpoint, the DNAT to a deleted pod.
const POD_ADDRESS: &str = "10.244.3.61";

/// The rule added to the bundle's node: a DNAT for a port no Service owns (a
/// stale-nodeport), its comment written as kube-proxy writes `namespace/name:port`.
const INJECTED_RULE: &str = "*nat\n\
    -A KUBE-NODEPORTS -p tcp -m comment --comment \"shop/<script>alert(1)</script>:http\" \
    -m tcp --dport 31999 -j DNAT --to-destination 10.244.9.9:8080\n\
    COMMIT\n";

/// Inside the namespace: the rule loaded beside the bundle's, the agent started and
/// ready, then each listener's `/` fetched with curl (its head) and by Chromium (its DOM).
const BROWSE: &str = r#"
printf '%s' "$1" | iptables-nft-restore --noflush || fail "cannot load the injected rule"
start_api
start_agent
wait_for 15 ready || fail "the agent never became ready"
found() { get /findings | grep -q '"port": 31999'; }
wait_for 15 found || fail "the injected rule never reached /findings"
curl -s -m 5 -D "$dir/full-head.txt" -o "$dir/full-curl.html" "$findings_url/" || fail "no page on the findings listener"
curl -s -m 5 -D "$dir/public-head.txt" -o "$dir/public-curl.html" "$url/" || fail "no page on the public listener"
# A fresh profile per page; no network beyond the agent (the namespace has none).
browse() {
  local profile
  profile=$(mktemp -d "$dir/chromium-profile.XXXXXX")
  timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --dump-dom "$1" >"$2" 2>>"$dir/chromium.log" ||
    fail "chromium could not load $1: $(tail -5 "$dir/chromium.log")"
}
browse "$findings_url/" "$dir/full-dom.html"
browse "$url/" "$dir/public-dom.html"
stop_agent
"#;

fn assert_has(text: &str, what: &str, name: &str) {
    assert!(text.contains(what), "{name} lacks {what:?}:\n{text}");
}

fn assert_lacks(text: &str, what: &str, name: &str) {
    assert!(!text.contains(what), "{name} holds {what:?}:\n{text}");
}

/// The page's head: HTML, under a policy that runs no script, not to be sniffed.
fn assert_served_safely(dir: &Path, name: &str) {
    let head = read_raw(dir, name).to_ascii_lowercase();
    assert_has(&head, "http/1.1 200", name);
    assert_has(&head, "content-type: text/html; charset=utf-8", name);
    assert_has(
        &head,
        "content-security-policy: default-src 'none'; style-src 'unsafe-inline'",
        name,
    );
    assert_has(&head, "x-content-type-options: nosniff", name);
}

#[test]
fn chromium_shows_the_findings_and_runs_no_injected_script() {
    if !support::require_root("the agent's page in a bundle's node") {
        return;
    }
    if !support::require_tool("chromium", "the agent's page in a browser") {
        return;
    }
    let scratch = TempDir::new().unwrap();
    let dir = scratch.path();
    let started = Instant::now();
    let out = in_node(BUNDLE, BROWSE, &[INJECTED_RULE], dir, Duration::from_secs(150));
    assert_ran(&out, dir);
    eprintln!("the scenario took {:?}", started.elapsed());

    assert_served_safely(dir, "full-head.txt");
    assert_served_safely(dir, "public-head.txt");

    // The findings listener: everything, the injected script as text.
    let full = read_raw(dir, "full-dom.html");
    let name = "the findings listener's DOM";
    assert!(
        full.len() > 1000,
        "{name} is nearly empty:\n{full}\nchromium:\n{}",
        read_raw(dir, "chromium.log")
    );
    assert_has(&full, &format!("portdrift: node {}", node_of(BUNDLE)), name);
    assert_has(&full, "Findings: 1 critical, 1 warning, 0 info", name);
    for shown in [
        "udp/30514",
        "stale-endpoint",
        "10.244.3.61:5140",
        "logging/syslog-ingest",
        "tcp/31999",
        "stale-nodeport",
        "--dport 31999 -j DNAT --to-destination 10.244.9.9:8080",
        "href=\"/explain?port=udp/30514&amp;format=text\"",
        "href=\"/explain?port=tcp/31999&amp;format=text\"",
        "href=\"/findings\"",
        "href=\"/metrics\"",
    ] {
        assert_has(&full, shown, name);
    }
    // Chromium serialises a text node's `<` and `>` as entities: the comment reached
    // the DOM as text, and no element was made of it.
    assert_has(
        &full,
        "--comment \"shop/&lt;script&gt;alert(1)&lt;/script&gt;:http\"",
        name,
    );
    assert_lacks(&full.to_ascii_lowercase(), "<script", name);

    // The public listener: counts, no address, no rule, no comment.
    let public = read_raw(dir, "public-dom.html");
    let name = "the public listener's DOM";
    assert_has(&public, &format!("portdrift: node {}", node_of(BUNDLE)), name);
    assert_has(&public, "Findings: 1 critical, 1 warning, 0 info", name);
    assert_has(&public, "<td>stale-endpoint</td>", name);
    assert_has(&public, "<td>stale-nodeport</td>", name);
    for hidden in [
        POD_ADDRESS,
        "10.244.9.9",
        "alert(1)",
        "KUBE-",
        "logging/syslog-ingest",
        "href=\"/findings\"",
        "href=\"/explain",
    ] {
        assert_lacks(&public, hidden, name);
    }
    assert_lacks(&public.to_ascii_lowercase(), "<script", name);
}
