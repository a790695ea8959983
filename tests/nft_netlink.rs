//! kube-proxy's nftables tables read over netlink give exactly what `nft -j` gives: every
//! nftables shape the shipped bundles and fixtures use (and a generated node with
//! injected drift) is loaded with the real `nft -f` into a private network namespace,
//! and the rule model read both ways there is identical, and so are the findings of a
//! live scan each way.
//!
//! Needs root (CI runs as root and must not skip these). Nothing touches the host's own
//! network namespace.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const PORTDRIFT: &str = env!("CARGO_BIN_EXE_portdrift");

/// What one namespace printed: the model read each way, and a live scan each way.
struct BothWays {
    netlink: String,
    nft: String,
    scan_netlink: Option<Value>,
    scan_nft: Option<Value>,
}

/// Loads `script` with `nft -f` into a fresh namespace and reads it there both ways.
fn read_both_ways(script: &Path, cluster: Option<&Path>) -> BothWays {
    let dir = tempfile::tempdir().unwrap();
    let out = |name: &str| dir.path().join(name).display().to_string();
    let mut shell = format!(
        "set -e; nft -f {script}; \
         {PORTDRIFT} dev nft-sources --via netlink > {nl}; \
         {PORTDRIFT} dev nft-sources --via nft > {js};",
        script = script.display(),
        nl = out("netlink"),
        js = out("nft"),
    );
    if let Some(cluster) = cluster {
        support::push_scans(&mut shell, cluster, "nftables-via", &["netlink", "nft"], |via| {
            out(&format!("scan-{via}"))
        });
    }
    support::run_in_fresh_netns(&script.display().to_string(), &shell);
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    let scan =
        |via: &str| cluster.map(|_| serde_json::from_str::<Value>(&read(&format!("scan-{via}"))).unwrap());
    BothWays {
        netlink: read("netlink"),
        nft: read("nft"),
        scan_netlink: scan("netlink"),
        scan_nft: scan("nft"),
    }
}

/// The model without the status lines (which say how it was read).
fn model(printed: &str) -> String {
    printed
        .lines()
        .filter(|l| !l.starts_with("# "))
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_same(name: &str, both: &BothWays) {
    assert!(
        both.netlink
            .contains("# nft.json Ok [\"read from the kernel over netlink\"]")
            || both.netlink.contains("# nft.json Empty"),
        "{name}: not read over netlink:\n{}",
        both.netlink.lines().next().unwrap_or_default()
    );
    assert!(model(&both.nft).contains("RuleDump"), "{name}: nothing read");
    let (a, b) = (model(&both.netlink), model(&both.nft));
    if a != b {
        let first = a
            .lines()
            .zip(b.lines())
            .position(|(x, y)| x != y)
            .unwrap_or(a.lines().count().min(b.lines().count()));
        panic!(
            "{name}: netlink and nft -j differ from line {first}:\nnetlink: {:?}\nnft -j:  {:?}",
            a.lines().nth(first),
            b.lines().nth(first)
        );
    }
    if let (Some(x), Some(y)) = (&both.scan_netlink, &both.scan_nft) {
        let findings = |r: &Value| support::finding_multiset(r["findings"].as_array().unwrap());
        assert_eq!(findings(x), findings(y), "{name}: findings differ");
        let via = |r: &Value| {
            r["sources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["source"] == "nft.json")
                .map(|s| s["origin"].clone())
        };
        assert_eq!(via(x), Some(Value::from("netlink: nf_tables ip|ip6 kube-proxy")));
        assert_eq!(via(y), Some(Value::from("nft -j list table ip|ip6 kube-proxy")));
    }
}

#[test]
fn every_shipped_nftables_shape_reads_the_same_over_netlink() {
    if !support::require_root("netlink equality") || !support::require_tool("nft", "netlink equality") {
        return;
    }
    let root = support::root();
    let mut cases = Vec::new();
    // The fixtures' nft -f scripts (both families, match-all dispatch, hand-written rules).
    for name in ["basic", "match-all"] {
        cases.push((root.join(format!("testdata/nft/{name}.nft")), None));
    }
    // Every bundle with an nftables ruleset, loaded from its `nft list ruleset` listing,
    // scanned against its own cluster state.
    let mut bundles: Vec<_> = std::fs::read_dir(root.join("testdata"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("nft.txt").is_file())
        .collect();
    bundles.sort();
    assert!(bundles.len() >= 3, "{bundles:?}");
    for bundle in bundles {
        let cluster = bundle.join("cluster.json");
        cases.push((bundle.join("nft.txt"), cluster.is_file().then_some(cluster)));
    }
    for (script, cluster) in cases {
        let both = read_both_ways(&script, cluster.as_deref());
        assert_same(&script.display().to_string(), &both);
    }
}

#[test]
fn a_generated_node_with_drift_reads_the_same_over_netlink() {
    if !support::require_root("netlink equality, generated") || !support::require_tool("nft", "netlink") {
        return;
    }
    let config = portdrift_test_support::synth::SynthConfig {
        services: 300,
        endpoints_per_service: 3,
        stale: 3,
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("kube-proxy.nft");
    let cluster = dir.path().join("cluster.json");
    std::fs::write(&script, portdrift_test_support::synth::nft_script(&config)).unwrap();
    std::fs::write(
        &cluster,
        portdrift_test_support::synth::generate(&config).cluster_json,
    )
    .unwrap();
    let both = read_both_ways(&script, Some(&cluster));
    assert_same("generated", &both);
    // Clean but for the injected drift.
    let scan = both.scan_netlink.unwrap();
    let kinds: Vec<_> = scan["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, vec!["stale-nodeport"; 3], "{scan:#}");
}

/// The counts `dev nft-sources` prints of how a read got its maps: (key by key, dumped).
fn map_fetches(printed: &str) -> (usize, usize) {
    let line = printed
        .lines()
        .find_map(|l| l.strip_prefix("# maps read key by key "))
        .expect("the read says how it got its maps");
    let numbers: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

/// A `numgen` verdict map is read key by key only when that gives the whole map: all
/// its keys below the modulus present and no room for more. A map missing a key, or
/// holding more elements than the modulus, is dumped whole, and every way reads what
/// `nft -j` reads.
#[test]
fn numgen_maps_are_read_key_by_key_only_when_that_is_the_whole_map() {
    if !support::require_root("netlink, maps by key") || !support::require_tool("nft", "netlink") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // NodePorts 3001-3003 lead to Services a, b and c, whose endpoints DNAT to
    // 10.0.0.1-8, so the maps' targets are in the model the detector reads.
    let mut script = String::from(
        "add table ip kube-proxy\n\
         add set ip kube-proxy nodeport-ips { type ipv4_addr ; }\n\
         add map ip kube-proxy service-nodeports { type inet_proto . inet_service : verdict ; }\n\
         add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }\n\
         add chain ip kube-proxy services\n\
         add rule ip kube-proxy nat-prerouting jump services\n\
         add rule ip kube-proxy services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports\n\
         add element ip kube-proxy nodeport-ips { 192.168.0.2 }\n",
    );
    for (i, chain) in ["a1", "a2", "b1", "b2", "b3", "c1", "c2", "c3"]
        .iter()
        .enumerate()
    {
        script += &format!("add chain ip kube-proxy endpoint-{chain}\n");
        script += &format!(
            "add rule ip kube-proxy endpoint-{chain} meta l4proto tcp dnat to 10.0.0.{}:80\n",
            i + 1
        );
    }
    for (port, service) in [(3001, "a"), (3002, "b"), (3003, "c")] {
        script += &format!("add chain ip kube-proxy service-{service}\n");
        script += &format!(
            "add element ip kube-proxy service-nodeports {{ tcp . {port} : goto service-{service} }}\n"
        );
    }
    // Whole: keys 0 and 1 of mod 2.
    script += "add rule ip kube-proxy service-a numgen random mod 2 vmap { 0 : goto endpoint-a1, 1 : goto endpoint-a2 }\n";
    // Key 2 missing (traffic for it falls through): dumped.
    script += "add rule ip kube-proxy service-b numgen random mod 3 vmap { 0 : goto endpoint-b1, 1 : goto endpoint-b2, 5 : goto endpoint-b3 }\n";
    // An element past the modulus: dumped.
    script += "add rule ip kube-proxy service-c numgen random mod 2 vmap { 0 : goto endpoint-c1, 1 : goto endpoint-c2, 2 : goto endpoint-c3 }\n";
    let path = dir.path().join("maps.nft");
    std::fs::write(&path, &script).unwrap();
    let both = read_both_ways(&path, None);
    assert_same("maps by key", &both);
    // Service a's map by key; b's, c's and the named map dumped.
    assert_eq!(map_fetches(&both.netlink), (1, 3), "{}", both.netlink);
    let model = model(&both.netlink);
    for ip in ["10.0.0.2", "10.0.0.5", "10.0.0.8"] {
        assert!(model.contains(ip), "{ip} is read:\n{model}");
    }
}

#[test]
fn without_kube_proxy_tables_netlink_reads_empty() {
    if !support::require_root("netlink, empty") {
        return;
    }
    let run = Command::new("unshare")
        .args(["-n", PORTDRIFT, "dev", "nft-sources", "--via", "netlink"])
        .output()
        .expect("unshare runs");
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{text}");
    assert!(text.starts_with("# nft.json Empty"), "{text}");
    assert!(!text.contains("RuleDump"), "{text}");
}

/// The agent keeps kube-proxy's constant anonymous maps between reads. After a rule is
/// replaced, its new map (which the kernel may give the old one's name) must be read
/// afresh: the second read equals a fresh read by either path, and reused the maps
/// that did not change.
#[test]
fn kept_maps_are_reused_and_a_replaced_rules_map_is_read_afresh() {
    if !support::require_root("netlink, kept maps") || !support::require_tool("nft", "netlink") {
        return;
    }
    let config = portdrift_test_support::synth::SynthConfig {
        services: 40,
        endpoints_per_service: 3,
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let script = portdrift_test_support::synth::nft_script(&config);
    let load = dir.path().join("kube-proxy.nft");
    std::fs::write(&load, &script).unwrap();
    // The first Service's dispatch rule is replaced by one sending everything to the
    // second Service's first endpoint.
    let dispatch: Vec<&str> = script
        .lines()
        .filter(|l| l.contains(" numgen random mod "))
        .collect();
    assert!(dispatch.len() >= 2, "the generator writes numgen vmaps");
    let chain_of = |line: &str| line.split_whitespace().nth(4).unwrap().to_string();
    let first_endpoint = |line: &str| {
        let at = line.find("goto ").unwrap() + 5;
        line[at..].split([',', ' ']).next().unwrap().to_string()
    };
    let (victim, target) = (chain_of(dispatch[0]), first_endpoint(dispatch[1]));
    let change = dir.path().join("change.nft");
    std::fs::write(
        &change,
        format!(
            "flush chain ip kube-proxy {victim}\n\
             add rule ip kube-proxy {victim} numgen random mod 1 vmap {{ 0 : goto {target} }}\n"
        ),
    )
    .unwrap();
    let out = |name: &str| dir.path().join(name).display().to_string();
    let shell = format!(
        "set -e; nft -f {load}; \
         {PORTDRIFT} dev nft-sources --via netlink --reread-after {change} > {kept}; \
         {PORTDRIFT} dev nft-sources --via netlink > {fresh}; \
         {PORTDRIFT} dev nft-sources --via nft > {nft};",
        load = load.display(),
        change = change.display(),
        kept = out("kept"),
        fresh = out("fresh"),
        nft = out("nft"),
    );
    support::run_in_fresh_netns("kept maps", &shell);
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    let (kept, fresh, nft) = (read("kept"), read("fresh"), read("nft"));
    let reused: usize = kept
        .lines()
        .find_map(|l| l.strip_prefix("# reused "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("the second read says what it reused");
    let maps = dispatch.len();
    assert_eq!(reused, maps - 1, "every map but the replaced rule's is reused");
    assert_eq!(
        model(&kept),
        model(&fresh),
        "the kept read differs from a fresh one"
    );
    assert_eq!(model(&kept), model(&nft), "the kept read differs from nft -j");
    assert!(model(&kept).contains(&target), "the new map's target is read");
}

/// Where [`capture_in_this_namespace`] writes; set only in the namespace it runs in.
const CAPTURE_OUT: &str = "PORTDRIFT_NETLINK_CAPTURE_OUT";

/// The decoder fixture's files, recorded from `testdata/nft/basic.nft` in a namespace.
const FIXTURE: &str = "nft-kube-proxy";

#[test]
fn recorded_messages_decode_as_the_live_read() {
    if !support::require_root("nft netlink recording") || !support::require_tool("nft", "netlink recording") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // scripts/capture-netlink-fixtures.sh sets this to rewrite the decoder fixtures.
    let out = match std::env::var_os("PORTDRIFT_CAPTURE_FIXTURES") {
        Some(_) => support::root().join("tests/fixtures/netlink"),
        None => dir.path().to_path_buf(),
    };
    let shell = format!(
        "set -e; nft -f {script}; nft -j list ruleset > {out}/{FIXTURE}.json; \
         {CAPTURE_OUT}={out} {me} --exact capture_in_this_namespace --ignored --test-threads=1",
        script = support::root().join("testdata/nft/basic.nft").display(),
        out = out.display(),
        me = std::env::current_exe().unwrap().display(),
    );
    support::run_in_fresh_netns("nft recording", &shell);
    assert!(out.join(format!("{FIXTURE}.messages")).is_file());
}

/// Run by [`recorded_messages_decode_as_the_live_read`] inside its namespace: records a
/// live read, checks its messages decode to the same rule sources, and so does the
/// `nft -j` listing written beside them, then writes the messages.
#[test]
#[ignore = "run inside a namespace by recorded_messages_decode_as_the_live_read"]
fn capture_in_this_namespace() {
    let Some(out) = std::env::var_os(CAPTURE_OUT).map(std::path::PathBuf::from) else {
        return;
    };
    let limits = portdrift::sources::netlink::NetlinkLimits {
        timeout: std::time::Duration::from_secs(30),
        max_bytes: 1 << 30,
    };
    let origin = "recorded";
    let (live, recorded) =
        portdrift::sources::netlink::nftables::record_tables_netlink(origin, limits).unwrap();
    let decoded = portdrift::decode::netlink::nftables::decode_rule_dumps(&recorded, origin).unwrap();
    assert_eq!(format!("{decoded:#?}"), format!("{live:#?}"));
    let json = std::fs::read(out.join(format!("{FIXTURE}.json"))).unwrap();
    let listed = portdrift::decode::nftables::parse_ruleset_json(&json, origin).unwrap();
    assert_eq!(format!("{decoded:#?}"), format!("{listed:#?}"));
    std::fs::write(out.join(format!("{FIXTURE}.messages")), &recorded).unwrap();
}
