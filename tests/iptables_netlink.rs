//! iptables-nft's tables read over netlink print exactly what `iptables-nft-save`
//! prints: every shipped dump (both families; kube-proxy's rules with session affinity,
//! SCTP, nfacct, conntrack, marks, masquerade, and the CNI hostport plugin's multiport
//! rules), a fixture of the remaining shapes (interfaces, port ranges, goto, inverted
//! matches), and a generated node with drift are loaded with the real
//! `iptables-nft-restore` into a private network namespace, and the two texts read
//! there are identical; so are the findings of a live scan each way. A rule the reader
//! cannot print exactly sends that family to `iptables-nft-save`, and says so.
//!
//! Needs root (CI runs as root and must not skip these). Nothing touches the host's own
//! network namespace.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use support::source;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const PORTDRIFT: &str = env!("CARGO_BIN_EXE_portdrift");

/// The shapes no shipped dump has, next to kube-proxy's usual ones.
const SHAPES: &str = r#"*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-SEP-A - [0:0]
:KUBE-SVC-A - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-NODEPORTS
-A KUBE-NODEPORTS -p tcp -m comment --comment "ns/svc:http" -m tcp --dport 30080 -j KUBE-SVC-A
-A KUBE-NODEPORTS -d 127.0.0.1/32 -p udp -m comment --comment "ns/svc:http" -m udp --dport 30080 -j KUBE-SVC-A
-A KUBE-NODEPORTS -i eth0 -p tcp -m tcp --dport 30081 -g KUBE-SVC-A
-A KUBE-NODEPORTS ! -i veth+ -p tcp -m tcp ! --dport 30082 -j KUBE-SVC-A
-A KUBE-NODEPORTS -o eth1 -p tcp -m tcp --sport 1024:65000 --dport 30000:30005 -j KUBE-SVC-A
-A KUBE-NODEPORTS -s 10.1.2.0/23 -d 10.96.0.0/12 -p tcp -m tcp --dport 30083 -j KUBE-SVC-A
-A KUBE-SVC-A -m statistic --mode random --probability 0.33333333349 -j KUBE-SEP-A
-A KUBE-SVC-A -m statistic --mode nth --every 3 --packet 1 -j KUBE-SEP-A
-A KUBE-SVC-A ! -s 10.244.0.0/16 -d 10.96.0.1/32 -p tcp -m comment --comment "say \"hi\"" -m tcp --dport 80 -j KUBE-MARK-MASQ
-A KUBE-SEP-A -s 10.244.1.2/32 -j KUBE-MARK-MASQ
-A KUBE-SEP-A -p tcp -m tcp -j DNAT --to-destination 10.244.1.2:8080
-A KUBE-SEP-A -p udp -m udp -j DNAT --to-destination 10.244.1.2-10.244.1.3:8080-8090 --random --persistent
-A KUBE-SEP-A -p tcp -m recent --set --name KUBE-SEP-A --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 10.244.1.2:8080
-A KUBE-SVC-A -m comment --comment aff -m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-A --mask 255.255.255.255 --rsource -j KUBE-SEP-A
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment c -j MASQUERADE --random-fully
-A KUBE-POSTROUTING -p tcp -j MASQUERADE --to-ports 1000-2000
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FIREWALL - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment k -j KUBE-EXTERNAL-SERVICES
-A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment n -m addrtype --dst-type LOCAL -m tcp --dport 20000 -j REJECT --reject-with icmp-port-unreachable
-A KUBE-EXTERNAL-SERVICES -p tcp -m addrtype ! --src-type LOCAL,BROADCAST -m tcp --dport 20001 -j DROP
-A KUBE-EXTERNAL-SERVICES -p tcp -m tcp --dport 20002 -j REJECT --reject-with tcp-reset
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment b -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A KUBE-FIREWALL -m conntrack --ctstate INVALID -j DROP
-A KUBE-FIREWALL -m mark --mark 0x8000 -j ACCEPT
-A KUBE-FIREWALL -p tcp -m multiport --dports 80,443,8000:8080 -j ACCEPT
COMMIT
"#;

/// The nfacct objects a dump's `-m nfacct` rules need before it can be restored.
fn nfacct_setup(dump: &str) -> String {
    let mut names: Vec<&str> = dump
        .split("--nfacct-name")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .iter()
        .map(|n| format!("nfacct add {n} >/dev/null; "))
        .collect()
}

/// What one namespace printed, both ways.
struct BothWays {
    tool: String,
    netlink: String,
    scan_netlink: Option<Value>,
    scan_save: Option<Value>,
}

/// Restores `dump` (IPv6 when `v6`) into a fresh namespace and reads it there both ways,
/// scanning against `cluster` when given.
fn read_both_ways(dump_text: &str, v6: bool, cluster: Option<&Path>) -> BothWays {
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("dump");
    std::fs::write(&dump, dump_text).unwrap();
    let out = |name: &str| dir.path().join(name).display().to_string();
    let (restore, save, family) = if v6 {
        ("ip6tables-nft-restore", "ip6tables-nft-save", "ipv6")
    } else {
        ("iptables-nft-restore", "iptables-nft-save", "ipv4")
    };
    let mut shell = format!(
        "set -e; ip link set lo up; {nfacct} {restore} < {dump}; \
         {save} > {tool}; {PORTDRIFT} dev iptables-save --family {family} > {netlink} || true;",
        nfacct = nfacct_setup(dump_text),
        dump = dump.display(),
        tool = out("tool"),
        netlink = out("netlink"),
    );
    if let Some(cluster) = cluster {
        support::push_scans(&mut shell, cluster, "iptables-via", &["netlink", "save"], |via| {
            out(&format!("scan-{via}"))
        });
    }
    support::run_in_fresh_netns("iptables", &shell);
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    let scan =
        |via: &str| cluster.map(|_| serde_json::from_str::<Value>(&read(&format!("scan-{via}"))).unwrap());
    BothWays {
        tool: read("tool"),
        netlink: read("netlink"),
        scan_netlink: scan("netlink"),
        scan_save: scan("save"),
    }
}

/// A dump without its comment lines (the tool's carry timestamps).
fn body(dump: &str) -> Vec<&str> {
    dump.lines().filter(|l| !l.starts_with('#')).collect()
}

fn assert_same(name: &str, both: &BothWays, v6: bool) {
    let (tool, netlink) = (body(&both.tool), body(&both.netlink));
    assert!(
        tool.iter().any(|l| l.starts_with('*')),
        "{name}: the tool printed no table"
    );
    if let Some(i) = (0..tool.len().max(netlink.len())).find(|&i| tool.get(i) != netlink.get(i)) {
        panic!(
            "{name}: netlink and the tool differ at line {i}:\ntool:    {:?}\nnetlink: {:?}",
            tool.get(i),
            netlink.get(i)
        );
    }
    if let (Some(x), Some(y)) = (&both.scan_netlink, &both.scan_save) {
        let findings = |r: &Value| support::finding_multiset(r["findings"].as_array().unwrap());
        assert_eq!(findings(x), findings(y), "{name}: findings differ");
        let dump = if v6 {
            "ip6tables-nft-save.txt"
        } else {
            "iptables-nft-save.txt"
        };
        let (a, b) = (source(x, dump), source(y, dump));
        assert_eq!(a["status"], "ok", "{name}: {a:#}");
        let expected = if v6 {
            "netlink: nf_tables ip6 (ip6tables-nft)"
        } else {
            "netlink: nf_tables ip (iptables-nft)"
        };
        assert_eq!(a["origin"], expected, "{name}: {a:#}");
        assert_eq!(
            b["origin"],
            if v6 {
                "ip6tables-nft-save"
            } else {
                "iptables-nft-save"
            }
        );
        assert_eq!(a["items"], b["items"], "{name}");
    }
}

#[test]
fn every_shipped_iptables_nft_dump_reads_the_same_over_netlink() {
    if !support::require_root("iptables netlink equality")
        || !support::require_tool("iptables-nft-restore", "iptables netlink equality")
        || !support::require_tool("nfacct", "iptables netlink equality")
    {
        return;
    }
    let root = support::root();
    let mut bundles: Vec<_> = std::fs::read_dir(root.join("testdata"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    bundles.sort();
    let mut read = 0;
    for bundle in bundles {
        for (file, v6) in [("iptables-nft-save.txt", false), ("ip6tables-nft-save.txt", true)] {
            let path = bundle.join(file);
            let Ok(dump) = std::fs::read_to_string(&path) else {
                continue;
            };
            // A backend without tables: nothing to read either way. IPVS mode's ipset
            // matches (`-m set`) are not rendered over netlink: such a family is read with
            // the tool (the fallback docs/scan.md describes), so there is nothing to compare.
            if dump.trim().is_empty() || dump.contains("--match-set") {
                continue;
            }
            let cluster = bundle.join("cluster.json");
            let both = read_both_ways(&dump, v6, cluster.is_file().then_some(cluster.as_path()));
            assert_same(&path.display().to_string(), &both, v6);
            read += 1;
        }
    }
    assert!(read >= 12, "only {read} dumps");
}

#[test]
fn every_rule_shape_of_the_fixture_reads_the_same_over_netlink() {
    if !support::require_root("iptables netlink shapes") {
        return;
    }
    let both = read_both_ways(SHAPES, false, None);
    assert_same("shapes", &both, false);
    assert_eq!(body(&both.netlink).len(), SHAPES.lines().count());
    // The IPv6 forms of the addresses, the DNAT with brackets, and REJECT's IPv6 names.
    let v6 = SHAPES
        .replace("127.0.0.0/8", "::1/128")
        .replace("127.0.0.1/32", "::1/128")
        .replace("10.244.0.0/16", "fd00:10:244::/56")
        .replace("10.244.1.2/32", "fd00:10:244:1::2/128")
        .replace("10.96.0.1/32", "fd00:10:96::1/128")
        .replace("10.96.0.0/12", "fd00:10:96::/108")
        .replace("10.1.2.0/23", "fd00:1:2::/63")
        .replace("10.244.1.2-10.244.1.3:8080-8090", "[fd00::2-fd00::3]:8080-8090")
        .replace("10.244.1.2:8080", "[fd00:10:244:1::2]:8080")
        .replace(
            "--mask 255.255.255.255",
            "--mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        )
        .replace("icmp-port-unreachable", "icmp6-port-unreachable")
        .replace("LOCAL,BROADCAST", "LOCAL,ANYCAST");
    let both = read_both_ways(&v6, true, None);
    assert_same("shapes, IPv6", &both, true);
}

#[test]
fn a_generated_node_with_drift_reads_the_same_over_netlink() {
    if !support::require_root("iptables netlink, generated") {
        return;
    }
    let node = portdrift_test_support::synth::SynthConfig {
        services: 300,
        endpoints_per_service: 3,
        ..Default::default()
    };
    // The cluster lost its last three Services; their rules are still on the node.
    let cluster = portdrift_test_support::synth::SynthConfig {
        services: 297,
        ..node.clone()
    };
    let dir = tempfile::tempdir().unwrap();
    let cluster_json = dir.path().join("cluster.json");
    std::fs::write(
        &cluster_json,
        portdrift_test_support::synth::generate(&cluster).cluster_json,
    )
    .unwrap();
    let both = read_both_ways(
        &portdrift_test_support::synth::generate(&node).iptables_save,
        false,
        Some(&cluster_json),
    );
    assert_same("generated", &both, false);
    let scan = both.scan_netlink.unwrap();
    let stale = scan["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "stale-nodeport")
        .count();
    assert!(stale >= 3, "{scan:#}");
}

#[test]
fn a_rule_the_reader_cannot_print_sends_the_family_to_the_tool() {
    if !support::require_root("iptables netlink fallback") {
        return;
    }
    let dump = SHAPES.replace(
        "-A KUBE-FIREWALL -m conntrack --ctstate INVALID -j DROP",
        "-A KUBE-FIREWALL -m limit --limit 5/sec -j LOG --log-prefix dropped",
    );
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster.json");
    std::fs::write(&cluster, r#"{"apiVersion": "v1", "kind": "List", "items": []}"#).unwrap();
    let both = read_both_ways(&dump, false, Some(&cluster));
    let (x, y) = (both.scan_netlink.unwrap(), both.scan_save.unwrap());
    let status = source(&x, "iptables-nft-save.txt");
    assert_eq!(
        status["status"],
        source(&y, "iptables-nft-save.txt")["status"],
        "{status:#}"
    );
    assert_eq!(status["origin"], "iptables-nft-save", "{status:#}");
    let notes = status["notes"].to_string();
    assert!(
        notes.contains("reading over netlink failed") && notes.contains("limit"),
        "{notes}"
    );
    let findings = |r: &Value| support::finding_multiset(r["findings"].as_array().unwrap());
    assert_eq!(findings(&x), findings(&y));
    // The dev reader itself refuses rather than print the rule wrong.
    assert!(!both.netlink.contains("limit"), "{}", both.netlink);
}

#[test]
fn without_iptables_nft_tables_netlink_reads_empty() {
    if !support::require_root("iptables netlink, empty") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster.json");
    std::fs::write(&cluster, r#"{"apiVersion": "v1", "kind": "List", "items": []}"#).unwrap();
    let run = Command::new("unshare")
        .args([
            "-n",
            PORTDRIFT,
            "scan",
            "--format",
            "json",
            "--kube-proxy-healthz",
            "off",
        ])
        .args(["--node", "worker-1", "--cluster-state"])
        .arg(&cluster)
        .output()
        .expect("unshare runs");
    let report: Value = serde_json::from_slice(&run.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        )
    });
    let status = source(&report, "iptables-nft-save.txt");
    assert_eq!(status["status"], "empty", "{status:#}");
    assert_eq!(status["origin"], "netlink: nf_tables ip (iptables-nft)");
}

/// Where [`capture_in_this_namespace`] writes; set only in the namespace it runs in.
const CAPTURE_OUT: &str = "PORTDRIFT_NETLINK_CAPTURE_OUT";

/// The decoder fixture's files, recorded from [`SHAPES`] loaded in a namespace.
const FIXTURE: &str = "iptables-nft-ipv4";

#[test]
fn recorded_messages_decode_as_the_live_read() {
    if !support::require_root("iptables netlink recording") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("dump");
    std::fs::write(&dump, SHAPES).unwrap();
    // scripts/capture-netlink-fixtures.sh sets this to rewrite the decoder fixtures.
    let out = match std::env::var_os("PORTDRIFT_CAPTURE_FIXTURES") {
        Some(_) => support::root().join("tests/fixtures/netlink"),
        None => dir.path().to_path_buf(),
    };
    let shell = format!(
        "set -e; ip link set lo up; iptables-nft-restore < {dump}; \
         {CAPTURE_OUT}={out} {me} --exact capture_in_this_namespace --ignored --test-threads=1",
        dump = dump.display(),
        out = out.display(),
        me = std::env::current_exe().unwrap().display(),
    );
    support::run_in_fresh_netns("iptables recording", &shell);
    let saved = std::fs::read_to_string(out.join(format!("{FIXTURE}.save"))).unwrap();
    assert_eq!(
        saved.lines().filter(|l| l.starts_with("-A ")).count(),
        SHAPES.lines().filter(|l| l.starts_with("-A ")).count()
    );
}

/// Run by [`recorded_messages_decode_as_the_live_read`] inside its namespace: records a
/// live read, checks its messages decode to the same lines, and writes both.
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
    let family = portdrift::heart::model::Family::Ipv4;
    let (lines, recorded) = portdrift::sources::netlink::iptables::record_save(family, limits).unwrap();
    let mut decoded = Vec::new();
    portdrift::decode::netlink::iptables::render_save(family, &recorded, &mut |l| {
        decoded.push(l.to_string())
    })
    .unwrap();
    assert_eq!(decoded, lines);
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join(format!("{FIXTURE}.messages")), &recorded).unwrap();
    std::fs::write(out.join(format!("{FIXTURE}.save")), lines.join("\n") + "\n").unwrap();
}
