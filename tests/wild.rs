//! Rule dumps people posted publicly (`testdata/wild/`, sources in its README), scanned
//! as a new user would scan them: with no cluster state, in the forms they were pasted.
//! None may be an all-clear; each must be read whole where it is whole, its proxy mode
//! named, and nothing concluded from what a fragment leaves out.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

/// What scanning one dump must say.
struct Expect {
    dir: &'static str,
    mode: &'static str,
    /// Every rule source read whole (`ok`), or each one `partial`.
    whole: bool,
    /// The backend the dump's header (or its absence) gives.
    backend: &'static str,
    /// NodePort rules read from the dump.
    nodeports: u64,
    /// Findings by kind (none but these).
    findings: &'static [(&'static str, usize)],
    /// Words one of the coverage's sentences holds.
    not_checked: &'static [&'static str],
}

const NFT: &str = "nftables";
const NFT_IPT: &str = "iptables-nft";
const LEGACY: &str = "iptables-legacy";
/// The sentence of a dump that leaves lines outside any table.
const FRAGMENT: &str = "stand outside any table";
const NO_FILTER: &str = "holds no filter table";

const EXPECTED: &[Expect] = &[
    Expect {
        dir: "ack-ipvs-cilium-nft-ruleset",
        // A `grep -i cilium` of the dump cannot show that kube-proxy's chains are absent.
        mode: "none",
        whole: false,
        backend: NFT_IPT,
        nodeports: 0,
        findings: &[],
        not_checked: &["Cilium's chain CILIUM_POST_nat in a partial dump", FRAGMENT],
    },
    Expect {
        dir: "calico-felix-v1.4.21-cutoff",
        mode: "iptables",
        whole: false,
        backend: LEGACY,
        nodeports: 0,
        findings: &[],
        not_checked: &["has no COMMIT", NO_FILTER],
    },
    Expect {
        dir: "calico-only-no-kube-proxy-fv-fixture",
        mode: "none",
        whole: true,
        backend: LEGACY,
        nodeports: 0,
        findings: &[],
        not_checked: &["no kube-proxy chains or table"],
    },
    Expect {
        dir: "eks-vpc-cni-iptables-t-nat-S",
        // `iptables -t nat -S`: the nat listing is whole, the filter table is not in it.
        mode: "iptables",
        whole: true,
        backend: NFT_IPT,
        nodeports: 0,
        findings: &[],
        not_checked: &[NO_FILTER, "iptables-legacy ipv4"],
    },
    Expect {
        dir: "eks-xlb-local-grep-fragments",
        // The same lines in two greps are one rule, not a duplicate.
        mode: "iptables",
        whole: false,
        backend: NFT_IPT,
        nodeports: 2,
        findings: &[],
        not_checked: &[FRAGMENT],
    },
    Expect {
        dir: "eks-xlb-no-local-endpoints-grep",
        mode: "iptables",
        whole: false,
        backend: NFT_IPT,
        nodeports: 2,
        findings: &[],
        not_checked: &[FRAGMENT],
    },
    Expect {
        dir: "flannel-v1.6.1-ubuntu-node1",
        mode: "iptables",
        whole: true,
        backend: LEGACY,
        nodeports: 0,
        findings: &[],
        not_checked: &["iptables-nft ipv4"],
    },
    Expect {
        dir: "iorchard-bind-externalip-v1.4.21",
        mode: "iptables",
        whole: true,
        backend: LEGACY,
        nodeports: 0,
        findings: &[],
        not_checked: &["iptables-nft ipv4"],
    },
    Expect {
        dir: "ipvs-2018-addrtype-local-pr65803",
        mode: "ipvs",
        whole: false,
        backend: NFT_IPT,
        nodeports: 0,
        findings: &[],
        not_checked: &["IPVS mode (nat KUBE-SERVICES", FRAGMENT],
    },
    Expect {
        dir: "ipvs-2018-nodeport-ipset-k8s65574",
        mode: "ipvs",
        whole: false,
        backend: NFT_IPT,
        nodeports: 0,
        findings: &[],
        not_checked: &["ipset KUBE-NODE-PORT", FRAGMENT],
    },
    Expect {
        dir: "ipvs-after-mode-switch-calico-v1.8.4",
        // Just switched to IPVS: the iptables mode's chains are still declared, empty,
        // and the dump is whole, so they are orphans (harmless, info).
        mode: "ipvs",
        whole: true,
        backend: LEGACY,
        nodeports: 0,
        findings: &[("orphan-chain", 20)],
        // Its ipvsadm.txt is read: IPVS mode itself is checked, against no cluster state.
        not_checked: &["The cluster state was not read", NO_FILTER],
    },
    Expect {
        dir: "ipvs-azure-calico-grep-kube",
        mode: "ipvs",
        whole: false,
        backend: NFT_IPT,
        nodeports: 0,
        findings: &[],
        // Its ipvsadm.txt is read: IPVS mode itself is checked, against no cluster state.
        not_checked: &["The cluster state was not read", FRAGMENT],
    },
    Expect {
        dir: "ipvs-calico-2019-nat-raw-mangle-fragments",
        mode: "ipvs",
        whole: false,
        backend: NFT_IPT,
        nodeports: 0,
        findings: &[],
        not_checked: &["chain KUBE-LOAD-BALANCER", "has no COMMIT"],
    },
    Expect {
        dir: "ipvs-lb-local-S-k8s89869",
        mode: "ipvs",
        whole: false,
        backend: NFT_IPT,
        nodeports: 0,
        findings: &[],
        not_checked: &["chain KUBE-LOAD-BALANCER", FRAGMENT],
    },
    Expect {
        dir: "k3s-v1.30-pi-nft-dualstack",
        mode: "iptables",
        whole: true,
        backend: NFT_IPT,
        nodeports: 3,
        findings: &[],
        not_checked: &["iptables-legacy ipv4, iptables-legacy ipv6"],
    },
    Expect {
        dir: "k8s-34006-restore-input-unquoted-no-endpoints",
        // kube-proxy's restore input: the nat table is only the chains it changes.
        mode: "iptables",
        whole: false,
        backend: NFT_IPT,
        nodeports: 0,
        findings: &[],
        not_checked: &["declares none of its built-in chains"],
    },
    Expect {
        dir: "k8s-34563-v1.6.0-nat-cutoff",
        mode: "iptables",
        whole: false,
        backend: LEGACY,
        nodeports: 0,
        findings: &[],
        not_checked: &["has no COMMIT", NO_FILTER],
    },
    Expect {
        dir: "k8s-43969-v1.6.0-filter-list-rules-no-endpoints",
        // `iptables --list-rules` of the filter table: whole, with no nat table.
        mode: "iptables",
        whole: true,
        backend: NFT_IPT,
        nodeports: 0,
        findings: &[],
        not_checked: &["holds no nat table"],
    },
    Expect {
        dir: "k8s-45426-iptables-save-c-fragment",
        mode: "iptables",
        whole: false,
        backend: NFT_IPT,
        nodeports: 0,
        findings: &[],
        not_checked: &[FRAGMENT],
    },
    Expect {
        dir: "k8s-85397-xlb-udp-v1.16.6-save-c",
        // One rule in two greps, with the counters of two saves: one rule, no duplicate.
        mode: "iptables",
        whole: false,
        backend: NFT_IPT,
        nodeports: 2,
        findings: &[],
        not_checked: &[FRAGMENT],
    },
    Expect {
        dir: "k8s-docs-debug-service-grep-hostnames",
        mode: "iptables",
        whole: false,
        backend: NFT_IPT,
        nodeports: 0,
        findings: &[],
        not_checked: &[FRAGMENT],
    },
    Expect {
        dir: "kind-v1.23-iptables-save",
        mode: "iptables",
        whole: true,
        backend: LEGACY,
        nodeports: 0,
        findings: &[],
        not_checked: &["iptables-nft ipv4"],
    },
    Expect {
        dir: "kind-worker-S-nat-grep-services",
        mode: "iptables",
        whole: false,
        backend: NFT_IPT,
        nodeports: 0,
        findings: &[],
        not_checked: &[FRAGMENT],
    },
    Expect {
        dir: "kubo-275-xlb-unnamed-port-v1.9-grep",
        mode: "iptables",
        whole: false,
        backend: NFT_IPT,
        nodeports: 1,
        findings: &[],
        not_checked: &[FRAGMENT],
    },
    Expect {
        dir: "lvbibir-v1.22-nodeport-unnamed-port-grep",
        // With the post's Service and pods: today's naming of an unnamed port, owned.
        mode: "iptables",
        whole: false,
        backend: NFT_IPT,
        nodeports: 1,
        findings: &[],
        not_checked: &["looks filtered by namespace or label", FRAGMENT],
    },
    Expect {
        dir: "nftables-k3s-latency-aware",
        mode: NFT,
        whole: true,
        backend: NFT,
        nodeports: 1,
        findings: &[],
        not_checked: &[],
    },
    Expect {
        dir: "nftables-kubeadm-flannel-handles",
        mode: NFT,
        whole: false,
        backend: NFT,
        nodeports: 0,
        findings: &[],
        not_checked: &["cut short"],
    },
    Expect {
        dir: "openshift3-origin-nodeports-fragment",
        mode: "iptables",
        whole: false,
        backend: NFT_IPT,
        nodeports: 3,
        findings: &[],
        not_checked: &[FRAGMENT],
    },
    Expect {
        dir: "openshift3-origin-svc-recent-fragment",
        mode: "iptables",
        whole: false,
        backend: NFT_IPT,
        nodeports: 0,
        findings: &[],
        not_checked: &[FRAGMENT],
    },
    Expect {
        dir: "openshift4-octavia-lb-unnamed-port-grep",
        // With the post's Services: a working rule in v1.18's naming is its owner's, never
        // a stale rule to delete.
        mode: "iptables",
        whole: false,
        backend: NFT_IPT,
        nodeports: 2,
        findings: &[],
        not_checked: &["no endpoint was compared", FRAGMENT],
    },
    Expect {
        dir: "submariner-iptables-save-c-fragment",
        mode: "iptables",
        whole: false,
        backend: NFT_IPT,
        nodeports: 0,
        findings: &[],
        not_checked: &[FRAGMENT],
    },
    Expect {
        dir: "weave-1.9.7-nodeport-fragment",
        mode: "iptables",
        whole: false,
        backend: NFT_IPT,
        nodeports: 1,
        findings: &[],
        not_checked: &[FRAGMENT],
    },
    Expect {
        dir: "weave-filter-v1.6.1-escaped-quotes-cutoff",
        // kube-proxy's KUBE-FORWARD is there, but nothing that shows its mode.
        mode: "none",
        whole: false,
        backend: LEGACY,
        nodeports: 0,
        findings: &[],
        not_checked: &["kube-proxy's chain KUBE-FORWARD, but none that tell"],
    },
    Expect {
        dir: "weave-nat-filter-boundary-cutoff",
        mode: "iptables",
        whole: false,
        backend: LEGACY,
        nodeports: 0,
        findings: &[],
        not_checked: &["has no COMMIT"],
    },
];

fn wild() -> PathBuf {
    support::root().join("testdata/wild")
}

/// The rule sources of a report (those with a backend).
fn rule_sources(report: &Value) -> Vec<&Value> {
    report["sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["backend"].is_string())
        .collect()
}

fn check(e: &Expect) -> Result<(), String> {
    let dir = wild().join(e.dir);
    let (code, report) = support::scan_json(&dir, &[]);
    let fail = |what: String| Err(format!("{}: {what}\n{:#}", e.dir, report["coverage"]));
    let coverage = &report["coverage"];
    // A cluster state comes with a dump only where its post showed the Services
    // (`cluster.json`, built from the post's `kubectl get svc`). No post shows the
    // node's sockets, so no check is complete: never "no drift", never exit 0.
    let with_cluster = dir.join("cluster.json").exists();
    let loud = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["severity"] != "info");
    let want_code = if loud { 1 } else { 3 };
    if code != want_code {
        return fail(format!("exit {code}, expected {want_code}"));
    }
    // A post shows some Services, never all with their EndpointSlices: the state is
    // read, yet not in full.
    if coverage["complete"] != false || coverage["cluster_state"] != false {
        return fail(format!(
            "complete {}, cluster state {}: expected an incomplete check and a partial cluster state",
            coverage["complete"], coverage["cluster_state"]
        ));
    }
    if coverage["proxy_mode"] != e.mode {
        return fail(format!(
            "proxy mode {}, expected {}",
            coverage["proxy_mode"], e.mode
        ));
    }
    let sentences: Vec<&str> = coverage["not_checked"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let unread = sentences
        .iter()
        .any(|s| s.starts_with("The cluster state was not read"));
    if unread == with_cluster {
        return fail(format!(
            "cluster.json given: {with_cluster}, yet \"the cluster state was not read\" said: {unread}"
        ));
    }
    for words in e.not_checked {
        if !sentences.iter().any(|s| s.contains(words)) {
            return fail(format!("no sentence says {words:?}"));
        }
    }
    let sources = rule_sources(&report);
    if sources.is_empty() {
        return fail("no rule source read".into());
    }
    for s in &sources {
        let want = if e.whole { "ok" } else { "partial" };
        // A dump's own status; a second dump of a bundle (an nft text beside an
        // iptables fragment) may be whole where the fragment is not.
        if s["status"] != want && !(s["status"] == "ok" && !e.whole && sources.len() > 1) {
            return fail(format!("{} is {}, expected {want}", s["source"], s["status"]));
        }
        // Every line of every form people paste is understood.
        if s["unparsed"] != 0 {
            return fail(format!(
                "{} has {} lines not understood: {}",
                s["source"], s["unparsed"], s["notes"]
            ));
        }
    }
    // The source's note and the mode line come from one reading: no note says "no
    // kube-proxy chains" beside a mode line that names kube-proxy's mode or chains.
    let evidence = coverage["proxy_mode_evidence"].as_str().unwrap_or("");
    let cites_kube_proxy =
        ["iptables", "ipvs", "nftables"].contains(&e.mode) || evidence.contains("kube-proxy's chain");
    for s in &sources {
        if cites_kube_proxy && s["notes"].to_string().contains("no kube-proxy chains") {
            return fail(format!(
                "{} notes \"no kube-proxy chains\" beside the mode line {evidence:?}",
                s["source"]
            ));
        }
    }
    if sources[0]["backend"] != e.backend {
        return fail(format!(
            "backend {}, expected {}",
            sources[0]["backend"], e.backend
        ));
    }
    let nodeports: u64 = sources.iter().filter_map(|s| s["items"].as_u64()).sum();
    if nodeports != e.nodeports {
        return fail(format!(
            "{nodeports} NodePort rules read, expected {}",
            e.nodeports
        ));
    }
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for f in report["findings"].as_array().unwrap() {
        *kinds.entry(f["kind"].as_str().unwrap().to_string()).or_default() += 1;
    }
    let want: BTreeMap<String, usize> = e.findings.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    if kinds != want {
        return fail(format!("findings {kinds:?}, expected {want:?}"));
    }
    // The text report says the same, first.
    let out = support::portdrift(&["scan", "--from", dir.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    if !text.lines().next().unwrap_or("").contains("INCOMPLETE CHECK") || text.contains("No drift") {
        return fail(format!("the text report reads as an all-clear:\n{text}"));
    }
    Ok(())
}

#[test]
fn every_wild_dump_is_read_and_none_is_an_all_clear() {
    let mut on_disk: Vec<String> = std::fs::read_dir(wild())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let listed: Vec<&str> = EXPECTED.iter().map(|e| e.dir).collect();
    assert_eq!(
        on_disk, listed,
        "every wild dump has its expectation, and none is gone"
    );
    assert!(listed.len() >= 12, "the corpus holds {} dumps", listed.len());
    let readme = std::fs::read_to_string(wild().join("README.md")).unwrap();
    let failures: Vec<String> = EXPECTED
        .iter()
        .filter_map(|e| {
            if !readme.contains(&format!("`{}`", e.dir)) {
                return Some(format!("{}: not listed in testdata/wild/README.md", e.dir));
            }
            check(e).err()
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn headers_before_iptables_1_8_are_read_as_legacy_and_say_so() {
    for dir in ["flannel-v1.6.1-ubuntu-node1", "iorchard-bind-externalip-v1.4.21"] {
        let (_, report) = support::scan_json(&wild().join(dir), &[]);
        let source = rule_sources(&report)[0];
        assert_eq!(source["backend"], LEGACY, "{dir}");
        assert!(
            source["notes"]
                .to_string()
                .contains("predates the nf_tables backend (1.8)"),
            "{dir}: {}",
            source["notes"]
        );
    }
}
