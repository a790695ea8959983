//! A live finding names its rule so that a person on the node can find it: the table,
//! the chain, the rule's number as `iptables -L --line-numbers` counts it, and the
//! nf_tables handle as `nft -a list` prints it. Each bundle's node is built in a private
//! network namespace with the real tools, scanned live, and each citation is looked up
//! in what those tools list in the same namespace.
//!
//! Needs root (CI runs as root and must not skip these).

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::process::Command;

use serde_json::Value;
use tempfile::TempDir;

const PORTDRIFT: &str = env!("CARGO_BIN_EXE_portdrift");

/// Scans the bundle's node live (JSON to $2), then lists its rules as a person would:
/// `nft -a list ruleset` ($2.nft) and each iptables backend's nat table with rule
/// numbers ($2.iptables-nft, $2.iptables-legacy).
const SCAN_AND_LIST: &str = r#"
pd=$1 out=$2
node=$(cat "$BUNDLE/node")
$pd scan --cluster-state "$BUNDLE/cluster.json" --node "$node" -o json \
    --kube-proxy-healthz off --kube-proxy-metrics off >"$out"
nft -a list ruleset >"$out.nft"
iptables-nft -t nat -L -n --line-numbers >"$out.iptables-nft" 2>/dev/null
iptables-legacy -t nat -L -n --line-numbers >"$out.iptables-legacy" 2>/dev/null
exit 0
"#;

struct Listed {
    report: Value,
    nft: String,
    iptables: [(String, String); 2],
}

fn scan_and_list(bundle: &str) -> Listed {
    let scratch = TempDir::new().unwrap();
    let out = scratch.path().join("scan.json");
    let status = Command::new("bash")
        .arg(support::root().join("scripts/capture-testdata.sh"))
        .args([
            "--exec",
            bundle,
            "--",
            "/bin/sh",
            "-c",
            SCAN_AND_LIST,
            "sh",
            PORTDRIFT,
        ])
        .arg(&out)
        .status()
        .expect("the capture script runs");
    assert!(status.success(), "{bundle}: building the node failed: {status}");
    let read =
        |suffix: &str| std::fs::read_to_string(format!("{}{suffix}", out.display())).unwrap_or_default();
    Listed {
        report: serde_json::from_str(&read("")).expect("the scan's JSON"),
        nft: read(".nft"),
        iptables: [
            ("iptables-nft".into(), read(".iptables-nft")),
            ("iptables-legacy".into(), read(".iptables-legacy")),
        ],
    }
}

/// The lines of `iptables -L`'s block for `chain`.
fn iptables_chain<'a>(listing: &'a str, chain: &str) -> Vec<&'a str> {
    let head = format!("Chain {chain} (");
    listing
        .lines()
        .skip_while(|l| !l.starts_with(&head))
        .skip(2)
        .take_while(|l| !l.is_empty())
        .collect()
}

/// The lines of `nft list`'s block for `kind` (`chain`, `map`) `name` in `table`.
fn nft_block<'a>(listing: &'a str, table: &str, kind: &str, name: &str) -> Vec<&'a str> {
    // With -a a block's first line ends in its own handle: `chain X { # handle 7`.
    let head = |l: &str| l.split(" # handle ").next().unwrap_or("").trim().to_string();
    let table_head = format!("table {table} {{");
    let heads = [format!("{kind} {name} {{"), format!("{kind} \"{name}\" {{")];
    listing
        .lines()
        .skip_while(|l| head(l) != table_head)
        .skip_while(|l| !heads.contains(&head(l)))
        .skip(1)
        .take_while(|l| l.trim() != "}")
        .collect()
}

/// Looks a citation up in the listings; returns the rule's line as they print it.
fn look_up(listed: &Listed, cited: &str) -> String {
    let words: Vec<&str> = cited.split(' ').collect();
    match words.as_slice() {
        [tool, "table", table, "chain", chain, "rule", number, rest @ ..] => {
            let listing = &listed.iptables.iter().find(|(t, _)| t == tool).unwrap().1;
            let line = iptables_chain(listing, chain)
                .into_iter()
                .find(|l| l.split_whitespace().next() == Some(*number))
                .unwrap_or_else(|| panic!("{cited}: no rule {number} in {tool}'s {chain}:\n{listing}"));
            if let ["handle", handle] = rest {
                // The same rule by its handle, in nft's listing of iptables-nft's table.
                assert_eq!(*tool, "iptables-nft", "{cited}");
                let by_handle = nft_block(&listed.nft, &format!("ip {table}"), "chain", chain)
                    .into_iter()
                    .find(|l| l.ends_with(&format!("# handle {handle}")))
                    .unwrap_or_else(|| {
                        panic!("{cited}: no handle {handle} in nft's {chain}:\n{}", listed.nft)
                    });
                return format!("{line} | {by_handle}");
            }
            assert!(rest.is_empty(), "{cited}");
            line.to_string()
        }
        ["nft", "table", family, table, "chain", chain, "handle", handle] => {
            nft_block(&listed.nft, &format!("{family} {table}"), "chain", chain)
                .into_iter()
                .find(|l| l.ends_with(&format!("# handle {handle}")))
                .unwrap_or_else(|| panic!("{cited}: no such handle in:\n{}", listed.nft))
                .to_string()
        }
        ["nft", "table", family, table, "map", map, "element", key @ ..] => {
            let key = key.join(" ");
            let block = nft_block(&listed.nft, &format!("{family} {table}"), "map", map).join("\n");
            assert!(block.contains(&key), "{cited}: no element {key} in:\n{block}");
            block
        }
        _ => panic!("{cited}: not a citation of a live rule"),
    }
}

/// The citations in a finding's evidence: `(...)` at the end of a line.
fn cited_in_evidence(f: &Value) -> Vec<String> {
    f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            let e = e.as_str()?;
            let start = e.rfind(" (")?;
            let cited = e[start + 2..].split(')').next()?;
            (cited.contains(" table ")).then(|| cited.to_string())
        })
        .collect()
}

fn findings<'a>(listed: &'a Listed, kind: &str) -> Vec<&'a Value> {
    let found: Vec<&Value> = listed.report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect();
    assert!(!found.is_empty(), "no {kind}: {:#}", listed.report);
    found
}

#[test]
fn a_rule_read_over_netlink_is_cited_by_chain_number_and_handle() {
    if !support::require_root("live citations") {
        return;
    }
    let listed = scan_and_list("udp-stale-endpoint");
    let f = findings(&listed, "stale-endpoint")[0];
    let cited = f["rule_source"].as_str().unwrap();
    assert!(
        cited.starts_with("iptables-nft table nat chain KUBE-SEP-"),
        "{cited}"
    );
    assert!(cited.contains(" handle "), "{cited}");
    // Both listings show the stale DNAT at what the finding cites.
    let line = look_up(&listed, cited);
    let target = f["target"].as_str().unwrap();
    assert!(line.contains(&format!("to:{target}")), "{cited}: {line}");
    assert!(line.contains(&format!("dnat to {target}")), "{cited}: {line}");
    // The NodePort rule in the evidence too.
    let evidence = cited_in_evidence(f);
    assert_eq!(evidence.len(), 1, "{f:#}");
    let line = look_up(&listed, &evidence[0]);
    assert!(
        line.contains(&format!("dpt:{}", f["port"])),
        "{}: {line}",
        evidence[0]
    );
}

#[test]
fn a_rule_the_legacy_tool_printed_is_cited_by_chain_and_number() {
    if !support::require_root("live citations") {
        return;
    }
    let listed = scan_and_list("iptables-backend-split");
    for f in findings(&listed, "stale-endpoint") {
        let cited = f["rule_source"].as_str().unwrap();
        assert!(
            cited.starts_with("iptables-legacy table nat chain KUBE-SEP-"),
            "{cited}"
        );
        let line = look_up(&listed, cited);
        let target = f["target"].as_str().unwrap();
        assert!(line.contains(&format!("to:{target}")), "{cited}: {line}");
    }
    // The backend split cites every forwarding rule of the other backend.
    let split = &findings(&listed, "backend-split")[0];
    let cited = cited_in_evidence(split);
    assert!(!cited.is_empty(), "{split:#}");
    for c in cited {
        let line = look_up(&listed, &c);
        assert!(line.contains("dpt:"), "{c}: {line}");
    }
}

#[test]
fn an_nftables_rule_is_cited_by_handle_and_a_map_element_by_key() {
    if !support::require_root("live citations") {
        return;
    }
    let listed = scan_and_list("nftables-stale-element");
    let f = findings(&listed, "stale-nodeport")[0];
    let cited = f["rule_source"].as_str().unwrap();
    assert!(cited.starts_with("nft table ip kube-proxy map "), "{cited}");
    look_up(&listed, cited);
    let evidence = cited_in_evidence(f);
    assert!(!evidence.is_empty(), "{f:#}");
    for c in evidence {
        let line = look_up(&listed, &c);
        assert!(line.contains("dnat"), "{c}: {line}");
    }
}
