//! Coverage judged on real bundles, with one input taken away or spoilt at a time: the
//! verdict of `heart::coverage` on what `scan::input` read.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

use std::path::{Path, PathBuf};

use portdrift::heart::detect::DetectConfig;
use portdrift::heart::model::ProxyMode;
use portdrift::heart::outcome::{ScanReport, run_scan};
use portdrift::scan::input::read_bundle;
use portdrift_test_support::files::copy_dir;

fn testdata(bundle: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(bundle)
}

/// A copy of a shipped bundle, changed by `change`, then scanned.
fn scan_changed(bundle: &str, change: impl FnOnce(&Path)) -> ScanReport {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&testdata(bundle), dir.path());
    change(dir.path());
    scan_with(dir.path(), &DetectConfig::default())
}

fn scan_with(dir: &Path, config: &DetectConfig) -> ScanReport {
    run_scan(read_bundle(dir, None).unwrap(), config)
}

fn remove(dir: &Path, name: &str) {
    std::fs::remove_file(dir.join(name)).unwrap();
}

fn says(report: &ScanReport, words: &str) -> bool {
    report.coverage.not_checked.iter().any(|s| s.contains(words))
}

#[test]
fn a_whole_bundle_is_a_complete_check() {
    for (bundle, mode) in [
        ("clean-iptables", ProxyMode::Iptables),
        ("clean-nftables", ProxyMode::Nftables),
    ] {
        let r = scan_changed(bundle, |_| {});
        assert_eq!(r.coverage.proxy_mode, mode);
        assert!(r.coverage.complete, "{bundle}: {:?}", r.coverage.not_checked);
        assert!(r.coverage.cluster_state);
        assert_eq!(r.exit_code(), 0);
    }
}

#[test]
fn without_cluster_state_nothing_is_an_all_clear() {
    let r = scan_changed("clean-iptables", |d| remove(d, "cluster.json"));
    assert!(!r.coverage.cluster_state);
    assert!(!r.coverage.complete);
    assert!(says(&r, "The cluster state was not read"), "{:?}", r.coverage);
    assert!(r.findings.is_empty());
    assert_eq!(r.exit_code(), 3);
}

#[test]
fn a_backend_not_read_is_named() {
    let r = scan_changed("clean-iptables", |d| remove(d, "iptables-legacy-save.txt"));
    assert!(says(&r, "iptables-legacy ipv4"), "{:?}", r.coverage);
    assert_eq!(r.exit_code(), 3);
    // In nftables mode iptables leftovers are judged when given, not required.
    let r = scan_changed("clean-nftables", |d| remove(d, "iptables-legacy-save.txt"));
    assert!(r.coverage.complete, "{:?}", r.coverage);
}

#[test]
fn a_cut_dump_is_partial_and_concludes_nothing_from_absence() {
    let r = scan_changed("canary-rollout-leftovers", |d| {
        let path = d.join("iptables-nft-save.txt");
        let text = std::fs::read_to_string(&path).unwrap();
        let cut = text.rfind("COMMIT").unwrap();
        std::fs::write(&path, &text[..cut]).unwrap();
    });
    assert!(says(&r, "read only in part"), "{:?}", r.coverage);
    assert!(!r.coverage.complete);
    let kinds: Vec<&str> = r.findings.iter().map(|f| f.kind.as_str()).collect();
    // The stale DNATs are proven by what is there; orphans and missing endpoints would
    // rest on what is not.
    assert!(kinds.contains(&"stale-endpoint"), "{kinds:?}");
    assert!(!kinds.contains(&"orphan-chain"), "{kinds:?}");
    assert!(!kinds.contains(&"missing-endpoint"), "{kinds:?}");
}

#[test]
fn a_dump_that_could_not_be_read_is_not_taken_for_a_node_without_a_proxy() {
    // kube-proxy's rules given as `iptables -L`: refused, so no proxy is found, and the
    // report must not say the node has none.
    let r = scan_changed("clean-iptables", |d| {
        std::fs::write(
            d.join("iptables-nft-save.txt"),
            "Chain KUBE-NODEPORTS (1 references)\ntarget     prot opt source               destination\n",
        )
        .unwrap();
    });
    assert_eq!(r.coverage.proxy_mode, ProxyMode::None);
    assert_eq!(r.exit_code(), 3);
    let first = &r.coverage.not_checked[0];
    assert!(
        first.contains("in the rule dumps that could be read")
            && first.contains("the 1 dump that could not be read"),
        "{first}"
    );
    assert!(!says(&r, "it has programmed nothing"), "{:?}", r.coverage);
    assert!(
        says(
            &r,
            "iptables-nft-save.txt could not be read (error: not an iptables-save dump"
        ),
        "{:?}",
        r.coverage
    );
    // With every dump read, a node without rules is said to have none.
    let r = scan_changed("clean-iptables", |d| {
        for name in ["iptables-nft-save.txt", "iptables-legacy-save.txt"] {
            std::fs::write(d.join(name), "").unwrap();
        }
    });
    assert!(
        says(&r, "it has programmed nothing the dumps show"),
        "{:?}",
        r.coverage
    );
}

#[test]
fn sockets_not_read_leave_squatters_unchecked() {
    let r = scan_changed("clean-iptables", |d| remove(d, "proc/net/udp6"));
    assert!(says(&r, "proc/net/udp6"), "{:?}", r.coverage);
    assert_eq!(r.exit_code(), 3);
}

#[test]
fn a_stale_cluster_state_is_not_complete() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&testdata("clean-iptables"), dir.path());
    let r = scan_with(
        dir.path(),
        &DetectConfig {
            cluster_state_stale: true,
            ..DetectConfig::default()
        },
    );
    assert!(!r.coverage.cluster_state);
    assert!(says(&r, "not current"), "{:?}", r.coverage);
    assert_eq!(r.exit_code(), 3);
}

#[test]
fn kube_proxys_mode_answer_is_read_and_a_mode_without_rules_is_said() {
    // kube-proxy says iptables, but the node has none of its rules: not an all-clear.
    let r = scan_changed("clean-iptables", |d| {
        std::fs::write(d.join("kube-proxy-mode.txt"), "iptables").unwrap();
        std::fs::write(d.join("iptables-nft-save.txt"), "").unwrap();
    });
    assert_eq!(r.coverage.proxy_mode, ProxyMode::Iptables);
    assert!(r.coverage.proxy_mode_evidence.contains("/proxyMode"));
    assert!(
        says(&r, "none of its iptables-mode NodePort rules"),
        "{:?}",
        r.coverage
    );
    assert_eq!(r.exit_code(), 3);
    // An answer this does not know is an error of that source, not a mode.
    let r = scan_changed("clean-iptables", |d| {
        std::fs::write(d.join("kube-proxy-mode.txt"), "userspace").unwrap();
    });
    assert_eq!(r.coverage.proxy_mode, ProxyMode::Iptables);
    assert!(r.coverage.complete, "{:?}", r.coverage);
}

#[test]
fn an_ipvs_node_is_named_and_not_judged_as_iptables() {
    let r = scan_changed("clean-iptables", |d| {
        std::fs::write(d.join("iptables-nft-save.txt"), IPVS_NAT).unwrap();
        std::fs::create_dir_all(d.join("proc/net")).unwrap();
        std::fs::write(
            d.join("proc/net/ip_vs"),
            "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\nTCP  0A600001:01BB rr\n  -> AC110002:192B      Masq    1      0          0\n",
        )
        .unwrap();
    });
    assert_eq!(r.coverage.proxy_mode, ProxyMode::Ipvs);
    // The table holds only a ClusterIP: nothing shows the node's NodePort addresses.
    assert!(
        says(&r, "which node addresses carry NodePorts"),
        "{:?}",
        r.coverage
    );
    // Every Service has endpoints, yet no missing-rule: IPVS programs them elsewhere.
    assert!(
        r.findings.iter().all(|f| f.kind.as_str() != "missing-rule"),
        "{:?}",
        r.findings.first()
    );
    assert_eq!(r.exit_code(), 3);
    // Without the virtual servers, the mode is named and its forwarding not checked.
    let r = scan_changed("clean-iptables", |d| {
        std::fs::write(d.join("iptables-nft-save.txt"), IPVS_NAT).unwrap();
    });
    assert_eq!(r.coverage.proxy_mode, ProxyMode::Ipvs);
    assert!(says(&r, "IPVS virtual servers were not read"), "{:?}", r.coverage);
    assert_eq!(r.exit_code(), 3);
}

/// kube-proxy's IPVS mode as `iptables-save` prints it (nat only).
const IPVS_NAT: &str = "# Generated by iptables-save v1.8.9 (nf_tables) on x
*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
-A KUBE-NODE-PORT -p tcp -m comment --comment \"Kubernetes nodeport TCP port for masquerade purpose\" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
COMMIT
*filter
:INPUT ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
COMMIT
";
