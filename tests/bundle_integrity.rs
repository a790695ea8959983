//! Guards the snapshot bundles under testdata/: every bundle is complete, its
//! expected.json is well formed and follows the severity rules of each finding kind,
//! and its captured /proc/net files parse cleanly with the socket parser into exactly
//! the listeners its source/listeners file started.
//!
//! Whether portdrift *produces* the expected findings is checked by the detector's
//! own tests; this file only makes sure the bundles are sound inputs.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use portdrift::decode::sockets::{WordOrder, parse_proc_net_with};
use portdrift::heart::finding::Kind;
use portdrift::heart::model::Protocol;
use serde_json::Value;

fn bundles() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let mut out: Vec<PathBuf> = fs::read_dir(&root)
        .expect("testdata/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("expected.json").is_file())
        .collect();
    out.sort();
    out
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn the_incident_bundles_are_present() {
    let names: BTreeSet<String> = bundles().iter().map(|p| name(p)).collect();
    for want in [
        "duplicate-dnat-30080",
        "deleted-while-proxy-down",
        "canary-rollout-leftovers",
        "haproxy-squatter",
        "iptables-backend-split",
        "nftables-stale-element",
        "dual-stack",
        "udp-stale-endpoint",
        "clean-iptables",
        "clean-nftables",
        "nftables-mode-switch",
        "local-policy-stale-drop",
        "local-policy-stale-drop-nftables",
        "cilium-stale-backend",
        "clean-cilium",
        "ipvs-stale-real-server",
        "clean-ipvs",
    ] {
        assert!(names.contains(want), "missing bundle {want}");
    }
}

#[test]
fn bundles_are_complete() {
    for b in bundles() {
        let n = name(&b);
        for f in ["cluster.json", "node", "INCIDENT.md", "source/listeners"] {
            assert!(b.join(f).is_file(), "{n}: missing {f}");
        }
        for f in ["tcp", "tcp6", "udp", "udp6"] {
            assert!(b.join("proc/net").join(f).is_file(), "{n}: missing proc/net/{f}");
        }
        let dumps = [
            "iptables-nft-save.txt",
            "iptables-legacy-save.txt",
            "ip6tables-nft-save.txt",
            "ip6tables-legacy-save.txt",
            "nft.json",
        ];
        assert!(dumps.iter().any(|f| b.join(f).is_file()), "{n}: no rule dump");
        // The whole nftables ruleset, for explain: nft.json in nftables mode (captured
        // with `nft -j list ruleset`), nft-ruleset.json otherwise.
        assert!(
            b.join("nft.json").is_file() || b.join("nft-ruleset.json").is_file(),
            "{n}: no nftables ruleset for explain"
        );
        // Every source has its capture, and nftables mode has both nft forms.
        for (src, dump) in [
            ("iptables-nft.rules", "iptables-nft-save.txt"),
            ("iptables-legacy.rules", "iptables-legacy-save.txt"),
            ("ip6tables-nft.rules", "ip6tables-nft-save.txt"),
            ("ip6tables-legacy.rules", "ip6tables-legacy-save.txt"),
            ("nft.rules", "nft.json"),
            ("nft.rules", "nft.txt"),
        ] {
            if b.join("source").join(src).is_file() {
                assert!(b.join(dump).is_file(), "{n}: source/{src} but no {dump}");
            }
        }
        let node = fs::read_to_string(b.join("node")).unwrap();
        assert!(
            !node.trim().is_empty() && !node.trim().contains(char::is_whitespace),
            "{n}: node"
        );
        let cluster: Value = serde_json::from_str(&fs::read_to_string(b.join("cluster.json")).unwrap())
            .unwrap_or_else(|e| panic!("{n}: cluster.json: {e}"));
        assert_eq!(cluster["kind"], "List", "{n}");
        assert_eq!(cluster["apiVersion"], "v1", "{n}");
        let lines = fs::read_to_string(b.join("INCIDENT.md")).unwrap().lines().count();
        assert!((5..=15).contains(&lines), "{n}: INCIDENT.md has {lines} lines");
    }
}

#[test]
fn expected_findings_are_well_formed() {
    let kinds: BTreeSet<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
    let fields = [
        "kind", "severity", "protocol", "port", "family", "backend", "service", "target",
    ];
    for b in bundles() {
        let n = name(&b);
        let doc: Value = serde_json::from_str(&fs::read_to_string(b.join("expected.json")).unwrap())
            .unwrap_or_else(|e| panic!("{n}: expected.json: {e}"));
        let findings = doc["findings"]
            .as_array()
            .unwrap_or_else(|| panic!("{n}: findings"));
        if n.starts_with("clean-") {
            assert!(findings.is_empty(), "{n}: a clean node expects no finding");
        } else {
            assert!(!findings.is_empty(), "{n}: an incident expects findings");
        }
        for f in findings {
            let obj = f.as_object().unwrap();
            let keys: BTreeSet<&str> = obj.keys().map(String::as_str).collect();
            assert_eq!(keys, fields.iter().copied().collect(), "{n}: {f}");
            let kind = f["kind"].as_str().unwrap();
            assert!(kinds.contains(kind), "{n}: unknown kind {kind}");
            let sev = f["severity"].as_str().unwrap();
            let sev_ok = match kind {
                "stale-nodeport" => ["critical", "warning", "info"].contains(&sev),
                "stale-endpoint" | "missing-rule" | "nodeport-collision" | "hostport-conflict" => {
                    sev == "critical"
                }
                "unparsed-rule" | "malformed-rule" | "backend-split" | "leaked-backend" => sev == "warning",
                "rev-nat-mismatch" => sev == "critical",
                "missing-backend" | "slot-count-mismatch" | "map-nearly-full" => {
                    sev == "warning" || sev == "critical"
                }
                // Critical for an externalTrafficPolicy Local port the node drops.
                "missing-endpoint" | "duplicate-rule" | "squatter" => sev == "warning" || sev == "critical",
                "orphan-chain" => sev == "info",
                _ => false,
            };
            assert!(sev_ok, "{n}: {kind} cannot be {sev}");
            if let Some(p) = f["protocol"].as_str() {
                assert!(Protocol::parse(p).is_some() && p == p.to_lowercase(), "{n}: {p}");
            }
            if let Some(fam) = f["family"].as_str() {
                assert!(fam == "ipv4" || fam == "ipv6", "{n}: {fam}");
            }
            if let Some(be) = f["backend"].as_str() {
                assert!(
                    ["iptables-nft", "iptables-legacy", "nftables"].contains(&be),
                    "{n}: {be}"
                );
            }
            if let Some(port) = f["port"].as_u64() {
                assert!(port > 0 && port < 65536, "{n}: port {port}");
            }
            if let Some(t) = f["target"].as_str() {
                let addr: std::net::SocketAddr = t.parse().unwrap_or_else(|e| panic!("{n}: target {t}: {e}"));
                assert_eq!(addr.to_string(), t, "{n}: target not in canonical form");
            }
            if let Some(s) = f["service"].as_str() {
                assert_eq!(s.split('/').count(), 2, "{n}: service {s}");
            }
            // Cilium's maps and IPVS are no netfilter backend: their findings name none.
            let datapath = b.join("bpf").is_dir() || b.join("proc/net/ip_vs").is_file();
            match kind {
                "squatter" | "nodeport-collision" => assert!(f["backend"].is_null(), "{n}: {f}"),
                _ if datapath => assert!(f["backend"].is_null(), "{n}: {f}"),
                _ => assert!(f["backend"].is_string(), "{n}: {f}"),
            }
        }
    }
}

#[test]
fn captured_sockets_parse_into_the_started_listeners() {
    for b in bundles() {
        let n = name(&b);
        let mut got = 0;
        for (file, protocol, v6) in [
            ("tcp", Protocol::Tcp, false),
            ("tcp6", Protocol::Tcp, true),
            ("udp", Protocol::Udp, false),
            ("udp6", Protocol::Udp, true),
        ] {
            let path = b.join("proc/net").join(file);
            let bytes = fs::read(&path).unwrap();
            // Captured on x86_64: little-endian address words.
            let (listeners, unparsed) =
                parse_proc_net_with(&bytes, protocol, v6, &path.to_string_lossy(), WordOrder::Little);
            assert!(unparsed.is_empty(), "{n}/{file}: {unparsed:?}");
            got += listeners.len();
        }
        let started = fs::read_to_string(b.join("source/listeners"))
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .count();
        assert_eq!(got, started, "{n}: listeners in proc/net vs source/listeners");
    }
}
