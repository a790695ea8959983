//! `portdrift explain`, proven against the kernel. Each case loads a node's rules (a
//! bundle's `source/`, in kube-proxy's own restore and `nft -f` forms) into a private
//! network namespace, asks explain where a new connection from the client goes, then
//! opens real connections from the client's namespace:
//!
//! - the kernel's own trace (`meta nftrace set 1`, `nft monitor trace`) gives each
//!   packet's rule path, which must be one of explain's paths, every one of them seen;
//! - conntrack gives where each connection was sent, whose shares must match explain's
//!   fractions within [`TOLERANCE`].
//!
//! Needs root (CI runs as root and must not skip these). Nothing touches the host's own
//! network namespace.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use support::trace_lab::{CLIENT_IP, NODE_IP, Trace, TraceLab, path_rules};

/// Connections per case.
const CONNECTIONS: usize = 600;
/// How far a measured share may be from explain's: at 600 connections a share of 25%
/// has a standard deviation of 1.8 points, so this is over four of them.
const TOLERANCE: f64 = 0.08;

fn bundle(name: &str) -> std::path::PathBuf {
    support::root().join("testdata").join(name)
}

fn ready(test: &str) -> bool {
    support::require_root(test)
        && [
            "nft",
            "conntrack",
            "nfacct",
            "iptables-nft-restore",
            "iptables-legacy-restore",
        ]
        .iter()
        .all(|t| support::require_tool(t, test))
}

/// Loads a bundle's sources into the node, in the capture's order (iptables-nft, then
/// iptables-legacy, then nftables), with `edit` applied to each file's text first.
fn load_bundle(lab: &TraceLab, name: &str, edit: impl Fn(&str, String) -> String) {
    let src = bundle(name).join("source");
    for (file, tool) in [
        ("iptables-nft.rules", &["iptables-nft-restore"][..]),
        ("iptables-legacy.rules", &["iptables-legacy-restore", "-w"][..]),
        ("nft.rules", &["nft", "-f", "-"][..]),
    ] {
        let path = src.join(file);
        if path.is_file() {
            let text = edit(file, std::fs::read_to_string(&path).unwrap());
            lab.load(tool, &text);
        }
    }
}

/// What one case measured, for the closing figures.
struct Measured {
    paths: usize,
    longest: usize,
    shares: Vec<(String, f64, f64)>,
}

/// Explains `port` on the node, connects, and checks the trace and conntrack against
/// the explanation. Returns the explanation.
fn prove(lab: &TraceLab, bundle_name: &str, port: u16, with_address: bool) -> (Value, Measured) {
    let cluster = bundle(bundle_name).join("cluster.json");
    let node = std::fs::read_to_string(bundle(bundle_name).join("node")).unwrap();
    let query = if with_address {
        format!("tcp/{NODE_IP}:{port}")
    } else {
        format!("tcp/{port}")
    };
    let e = lab.explain(
        support::bin(),
        &[
            &query,
            "--source",
            CLIENT_IP,
            "--cluster-state",
            cluster.to_str().unwrap(),
            "--node",
            node.trim(),
        ],
    );
    assert_eq!(e["kind"], "Explanation");
    let paths = e["paths"].as_array().unwrap();
    assert!(!paths.is_empty(), "{e:#}");
    let explained: Vec<(Trace, f64)> = paths
        .iter()
        .map(|p| (path_rules(p), p["fraction"].as_f64().unwrap()))
        .collect();

    let (traces, sent) = lab.connect_traced(port, CONNECTIONS);
    assert!(
        traces.len() >= CONNECTIONS * 9 / 10,
        "only {} of {CONNECTIONS} connections were traced",
        traces.len()
    );
    // Every traced packet took one of explain's paths, and every path of a share large
    // enough to be drawn was taken.
    let mut seen = BTreeSet::new();
    for trace in &traces {
        let i = explained
            .iter()
            .position(|(rules, _)| rules == trace)
            .unwrap_or_else(|| {
                panic!(
                    "the kernel took a path explain does not give:\n{trace:#?}\nexplain's paths:\n{:#?}",
                    explained.iter().map(|(r, _)| r).collect::<Vec<_>>()
                )
            });
        seen.insert(i);
    }
    for (i, (rules, fraction)) in explained.iter().enumerate() {
        if *fraction >= 0.05 {
            assert!(
                seen.contains(&i),
                "explain's path {i} ({fraction}) was never taken: {rules:#?}"
            );
        }
    }

    // Where conntrack says the connections went, against explain's endpoints.
    let total: usize = traces.len();
    let endpoints: BTreeMap<String, f64> = e["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["target"].as_str().unwrap().to_string(),
                x["fraction"].as_f64().unwrap(),
            )
        })
        .collect();
    let mut shares = Vec::new();
    for (target, fraction) in &endpoints {
        let got = *sent.get(target).unwrap_or(&0) as f64 / total as f64;
        assert!(
            (got - fraction).abs() <= TOLERANCE,
            "{target}: explain says {fraction}, conntrack measured {got} ({sent:?})"
        );
        shares.push((target.clone(), *fraction, got));
    }
    for target in sent.keys() {
        assert!(
            endpoints.contains_key(target),
            "conntrack sent connections to {target}, which explain does not name: {e:#}"
        );
    }
    let measured = Measured {
        paths: explained.len(),
        longest: explained.iter().map(|(r, _)| r.len()).max().unwrap_or(0),
        shares,
    };
    eprintln!(
        "{bundle_name} tcp/{port}: outcome {}, {} paths, longest {} rules; shares (explain, measured): {:?}",
        e["outcome"], measured.paths, measured.longest, measured.shares
    );
    (e, measured)
}

#[test]
fn an_even_split_over_four_endpoints_is_what_the_kernel_does() {
    if !ready("an_even_split_over_four_endpoints_is_what_the_kernel_does") {
        return;
    }
    let lab = TraceLab::new();
    load_bundle(&lab, "clean-iptables", |_, t| t);
    let (e, m) = prove(&lab, "clean-iptables", 30276, true);
    assert_eq!(e["outcome"], "dnat");
    assert_eq!(m.shares.len(), 4, "{e:#}");
    for (_, fraction, _) in &m.shares {
        assert!((fraction - 0.25).abs() < 1e-3, "{e:#}");
    }
    assert!(e["differences"].as_array().unwrap().is_empty(), "{e:#}");
}

#[test]
fn a_local_policy_service_goes_to_its_local_endpoint_or_is_dropped() {
    if !ready("a_local_policy_service_goes_to_its_local_endpoint_or_is_dropped") {
        return;
    }
    let lab = TraceLab::new();
    load_bundle(&lab, "clean-iptables", |_, t| t);
    // With a local endpoint: all of it, none elsewhere.
    let (e, m) = prove(&lab, "clean-iptables", 30896, true);
    assert_eq!(e["outcome"], "dnat", "{e:#}");
    assert_eq!(m.shares.len(), 1, "{e:#}");
    assert_eq!(e["expected"]["traffic_policy"], "Local");
    // Without one: kube-proxy's filter rule drops it, and conntrack never confirms one.
    let (e, m) = prove(&lab, "clean-iptables", 32559, false);
    assert_eq!(e["outcome"], "drop", "{e:#}");
    assert!(m.shares.is_empty());
    let last = e["paths"][0]["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["chain"], "KUBE-EXTERNAL-SERVICES", "{e:#}");
    assert_eq!(last["does"], "drop");
}

#[test]
fn a_hand_written_dnat_in_front_takes_every_connection() {
    if !ready("a_hand_written_dnat_in_front_takes_every_connection") {
        return;
    }
    let lab = TraceLab::new();
    load_bundle(&lab, "duplicate-dnat-30080", |_, t| t);
    let (e, m) = prove(&lab, "duplicate-dnat-30080", 30080, true);
    assert_eq!(e["outcome"], "dnat");
    assert_eq!(m.shares.len(), 1);
    assert_eq!(m.shares[0].0, "10.244.2.17:8080");
    let shadowed = e["shadowed"].as_array().unwrap();
    assert!(
        shadowed
            .iter()
            .any(|s| s["rule"].as_str().unwrap().contains("KUBE-EXT-")),
        "kube-proxy's own rule is shown shadowed: {e:#}"
    );
    let differences = e["differences"].as_array().unwrap();
    assert!(
        differences.iter().any(|d| d["target"] == "10.244.2.17:8080"
            && d["explanation"]
                .as_str()
                .unwrap()
                .contains("kube-proxy did not write")
            && !d["findings"].as_array().unwrap().is_empty()),
        "{e:#}"
    );
}

#[test]
fn with_both_iptables_backends_the_last_registered_nat_table_wins() {
    if !ready("with_both_iptables_backends_the_last_registered_nat_table_wins") {
        return;
    }
    let lab = TraceLab::new();
    // Legacy's tables first, as on the node the bundle tells of: kube-proxy switched
    // to iptables-nft while the old rules stayed. The kernel runs the nat chain
    // registered last first, so iptables-nft's rules take the connections.
    let src = bundle("iptables-backend-split").join("source");
    lab.load(
        &["iptables-legacy-restore", "-w"],
        &std::fs::read_to_string(src.join("iptables-legacy.rules")).unwrap(),
    );
    lab.load(
        &["iptables-nft-restore"],
        &std::fs::read_to_string(src.join("iptables-nft.rules")).unwrap(),
    );
    let (e, m) = prove(&lab, "iptables-backend-split", 30080, true);
    assert_eq!(e["outcome"], "dnat");
    let expected: BTreeSet<String> = e["expected"]["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["target"].as_str().unwrap().to_string())
        .collect();
    let reached: BTreeSet<String> = m.shares.iter().map(|(t, _, _)| t.clone()).collect();
    assert_eq!(reached, expected, "{e:#}");
    assert!(
        e["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("registered last")),
        "the order the dumps cannot show is said: {e:#}"
    );
    assert!(
        e["paths"][0]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["backend"] == "iptables-legacy" && s["result"] == "not-run"),
        "iptables-legacy's nat chain is shown not run: {e:#}"
    );
}

#[test]
fn nftables_mode_numgen_split_is_what_the_kernel_does() {
    if !ready("nftables_mode_numgen_split_is_what_the_kernel_does") {
        return;
    }
    let lab = TraceLab::new();
    // kube-proxy's NodePort addresses (`nodeport-ips`) are this test node's.
    load_bundle(&lab, "clean-nftables", |file, t| {
        if file != "nft.rules" {
            return t;
        }
        let element = "add element ip kube-proxy nodeport-ips { 10.0.1.23 }";
        assert!(t.contains(element));
        t.replace(
            element,
            &format!("add element ip kube-proxy nodeport-ips {{ {NODE_IP} }}"),
        )
    });
    let (e, m) = prove(&lab, "clean-nftables", 30624, false);
    assert_eq!(e["destination"], NODE_IP, "the address is kube-proxy's: {e:#}");
    assert_eq!(e["outcome"], "dnat");
    assert_eq!(m.shares.len(), 4, "{e:#}");
    assert!(
        e["paths"][0]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["backend"] == "nftables" && s["does"].as_str().unwrap().contains("numgen")),
        "{e:#}"
    );
}

#[test]
fn a_hostport_rule_ahead_of_the_nodeport_takes_it() {
    if !ready("a_hostport_rule_ahead_of_the_nodeport_takes_it") {
        return;
    }
    let lab = TraceLab::new();
    // The bundle's node with the CNI's jump moved ahead of kube-proxy's, as after a
    // flush and re-insert of the portmap rules.
    load_bundle(&lab, "hostport-over-nodeport", |file, text| {
        if file != "iptables-nft.rules" {
            return text;
        }
        let cni = "-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT";
        let moved = text.replace(&format!("{cni}\n"), "");
        assert_ne!(moved, text, "the bundle jumps to CNI-HOSTPORT-DNAT");
        let kube = "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES";
        assert!(moved.contains(kube));
        moved.replacen(kube, &format!("{cni}\n{kube}"), 1)
    });
    let (e, m) = prove(&lab, "hostport-over-nodeport", 30443, true);
    assert_eq!(e["outcome"], "dnat");
    assert_eq!(m.shares.len(), 1);
    assert_eq!(m.shares[0].0, "10.244.1.40:9443", "{e:#}");
    assert!(
        e["shadowed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["rule"].as_str().unwrap().contains("KUBE-NODEPORTS")),
        "kube-proxy's NodePort rule is shadowed: {e:#}"
    );
}
