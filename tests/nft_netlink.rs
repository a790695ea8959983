//! kube-proxy's nftables tables read over netlink give exactly what `nft -j` gives: every
//! nftables shape the shipped bundles and fixtures use (and a generated node with
//! injected drift) is loaded with the real `nft -f` into a private network namespace,
//! and the rule model read both ways there is identical, and so are the findings of a
//! live scan each way.
//!
//! Needs root (CI runs as root and must not skip these). Nothing touches the host's own
//! network namespace.

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
    assert!(model(&both.nft).contains("RuleSource"), "{name}: nothing read");
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
    let config = portdrift::synth::SynthConfig {
        services: 300,
        endpoints_per_service: 3,
        stale: 3,
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("kube-proxy.nft");
    let cluster = dir.path().join("cluster.json");
    std::fs::write(&script, portdrift::synth::nft_script(&config)).unwrap();
    std::fs::write(&cluster, portdrift::synth::generate(&config).cluster_json).unwrap();
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
    assert!(!text.contains("RuleSource"), "{text}");
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
    let config = portdrift::synth::SynthConfig {
        services: 40,
        endpoints_per_service: 3,
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let script = portdrift::synth::nft_script(&config);
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
