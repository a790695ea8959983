//! `portdrift scan --repair`, proven with real packets: a client, a node holding
//! kube-proxy-shaped rules in the real kernel, and a pod serving HTTP, each in its own
//! private network namespace (crates/portdrift-test-support/src/netns.rs). `curl` from the client to the
//! node's NodePort shows whether traffic flows; the node's whole ruleset, dumped before
//! and after, shows exactly what repair removed.
//!
//! Needs root (CI runs as root and must not skip these). Nothing touches the host's
//! own network namespace.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::collections::BTreeSet;
use std::process::Output;

use portdrift::heart::kube_proxy::{self, Naming};
use portdrift::heart::model::{Protocol, ServicePortRef};
use serde_json::{Value, json};
use support::netns::{Lab, POD_IP, POD_PORT};

const WEB: &str = "shop/web:http";
const GONE: &str = "shop/gone:http";
const NODE: &str = "node-1";

fn hash(svc: &str) -> String {
    kube_proxy::service_chain_hash(&ServicePortRef::parse(svc).unwrap(), Protocol::Tcp)
}

fn sep(svc: &str, ep: &str) -> String {
    kube_proxy::endpoint_chain_hash(
        &ServicePortRef::parse(svc).unwrap(),
        Protocol::Tcp,
        &ep.parse().unwrap(),
    )
}

/// One Service port's rules as kube-proxy writes them (Cluster policy, one endpoint):
/// chain declarations and rules, the NodePort rule first.
fn service_rules(svc: &str, node_port: u16, endpoint: &str) -> (String, String) {
    let (h, s) = (hash(svc), sep(svc, endpoint));
    let ip = endpoint.split(':').next().unwrap();
    let decl = format!(":KUBE-EXT-{h} - [0:0]\n:KUBE-SVC-{h} - [0:0]\n:KUBE-SEP-{s} - [0:0]\n");
    let rules = format!(
        "-A KUBE-NODEPORTS -m comment --comment {svc} -m tcp -p tcp --dport {node_port} -j KUBE-EXT-{h}
-A KUBE-EXT-{h} -m comment --comment \"masquerade traffic for {svc} external destinations\" -j KUBE-MARK-MASQ
-A KUBE-EXT-{h} -j KUBE-SVC-{h}
-A KUBE-SVC-{h} -m comment --comment \"{svc} -> {endpoint}\" -j KUBE-SEP-{s}
-A KUBE-SEP-{s} -m comment --comment {svc} -s {ip} -j KUBE-MARK-MASQ
-A KUBE-SEP-{s} -m comment --comment {svc} -m tcp -p tcp -j DNAT --to-destination {endpoint}
"
    );
    (decl, rules)
}

/// A node as kube-proxy (iptables mode) leaves it: its canaries, its jumps from the
/// built-in chains, masquerading, `services` (declarations, rules) and `extra` rules
/// placed before the services' own.
fn node_rules(services: &[(String, String)], extra_decl: &str, extra_rules: &str) -> String {
    let decls: String = services.iter().map(|(d, _)| d.as_str()).collect();
    let rules: String = services.iter().map(|(_, r)| r.as_str()).collect();
    format!(
        "*mangle
:KUBE-PROXY-CANARY - [0:0]
COMMIT
*filter
:KUBE-PROXY-CANARY - [0:0]
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
{decls}{extra_decl}-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE
{extra_rules}{rules}-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
COMMIT
"
    )
}

/// The pod's endpoint.
fn pod() -> String {
    format!("{POD_IP}:{POD_PORT}")
}

/// shop/web as the cluster has it: NodePort 30080 to the pod. `changed` stamps the
/// objects (RFC 3339): long ago, or just now for the grace-window case.
fn cluster_state(dir: &std::path::Path, changed: &str) -> std::path::PathBuf {
    cluster_state_named(dir, changed, "http")
}

/// [`cluster_state`] with shop/web's port named `port_name` (empty: unnamed).
fn cluster_state_named(dir: &std::path::Path, changed: &str, port_name: &str) -> std::path::PathBuf {
    let items = json!([
        portdrift_test_support::synth::api_server_service(),
        {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop", "creationTimestamp": changed, "uid": "u-web"},
            "spec": {
                "type": "NodePort", "clusterIP": "10.96.0.80", "clusterIPs": ["10.96.0.80"],
                "ipFamilies": ["IPv4"], "externalTrafficPolicy": "Cluster",
                "ports": [{"name": port_name, "port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": 30080}]
            }
        },
        {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "name": "web-abc", "namespace": "shop", "creationTimestamp": changed,
                "labels": {"kubernetes.io/service-name": "web"},
                "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": changed}
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [POD_IP], "conditions": {"ready": true}, "nodeName": NODE}],
            "ports": [{"name": port_name, "port": POD_PORT, "protocol": "TCP"}]
        }
    ]);
    let path = dir.join("cluster.json");
    std::fs::write(
        &path,
        json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
    )
    .unwrap();
    path
}

const LONG_AGO: &str = "2024-01-01T00:00:00Z";

/// The hand-written DNAT of the incident reports: to a pod that no longer exists,
/// inserted ahead of kube-proxy's rule, with a comment that needs escaping.
const STALE_DNAT: &str = "-A KUBE-NODEPORTS -p tcp -m comment --comment \"hotfix \\\"3am\\\" INC-42\" -m tcp --dport 30080 -j DNAT --to-destination 10.77.2.99:8080\n";

/// `portdrift scan --repair --format json` in the node, confirming over 1 s, with
/// `args`; its output and the JSON it printed.
fn scan_repair(lab: &Lab, args: &[&str]) -> (Output, Value) {
    let mut all = vec![
        "scan",
        "--repair",
        "--format",
        "json",
        "--node",
        NODE,
        "--repair-confirm",
        "1s",
    ];
    all.extend_from_slice(args);
    let out = lab.portdrift(support::bin(), &all);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}): exit {:?}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, report)
}

/// A repair pass with the cluster state from `cluster`, trusted as current.
fn repair(lab: &Lab, cluster: &std::path::Path, extra: &[&str]) -> (Output, Value) {
    let mut args = vec![
        "--cluster-state",
        cluster.to_str().unwrap(),
        "--trust-cluster-state",
    ];
    args.extend_from_slice(extra);
    scan_repair(lab, &args)
}

/// Lines in `before` and not in `after`, and the other way round.
fn diff(before: &[String], after: &[String]) -> (BTreeSet<String>, BTreeSet<String>) {
    let b: BTreeSet<String> = before.iter().cloned().collect();
    let a: BTreeSet<String> = after.iter().cloned().collect();
    (
        b.difference(&a).cloned().collect(),
        a.difference(&b).cloned().collect(),
    )
}

fn actions(report: &Value) -> Vec<&Value> {
    report["repair"]["cycles"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["actions"].as_array().unwrap())
        .collect()
}

fn results(report: &Value) -> Vec<String> {
    actions(report)
        .iter()
        .map(|a| a["result"].as_str().unwrap().to_string())
        .collect()
}

/// The iptables-save form of the stale DNAT rule.
fn saved_stale_dnat() -> String {
    "-A KUBE-NODEPORTS -p tcp -m comment --comment \"hotfix \\\"3am\\\" INC-42\" -m tcp --dport 30080 -j DNAT --to-destination 10.77.2.99:8080".into()
}

/// A lab, a scratch directory, and shop/web's cluster state (unchanged for long) in
/// it; None when the test cannot run here (not root, outside CI).
fn setup(test: &str) -> Option<(Lab, tempfile::TempDir, std::path::PathBuf)> {
    if !support::require_root(test) {
        return None;
    }
    let lab = Lab::new();
    let dir = tempfile::TempDir::new().unwrap();
    let cluster = cluster_state(dir.path(), LONG_AGO);
    Some((lab, dir, cluster))
}

/// [`setup`], with shop/web's rules behind the stale DNAT loaded into the node by
/// `restore`.
fn shadowed_in(test: &str, restore: &str) -> Option<(Lab, tempfile::TempDir, std::path::PathBuf)> {
    let (lab, dir, cluster) = setup(test)?;
    lab.restore(
        restore,
        &node_rules(&[service_rules(WEB, 30080, &pod())], "", STALE_DNAT),
    );
    Some((lab, dir, cluster))
}

/// [`shadowed_in`] iptables-nft.
fn shadowed(test: &str) -> Option<(Lab, tempfile::TempDir, std::path::PathBuf)> {
    shadowed_in(test, "iptables-nft-restore")
}

#[test]
fn a_stale_dnat_shadowing_a_nodeport_is_removed_and_the_port_works_again() {
    let Some((lab, _dir, cluster)) =
        shadowed("a_stale_dnat_shadowing_a_nodeport_is_removed_and_the_port_works_again")
    else {
        return;
    };
    assert_eq!(
        lab.curl_nodeport(30080),
        None,
        "the stale DNAT takes the port's traffic"
    );
    let before = lab.ruleset("iptables-nft-save");

    // Dry run: the exact command, and nothing changes.
    let (_, dry) = repair(&lab, &cluster, &["--repair-dry-run"]);
    let planned = actions(&dry);
    assert_eq!(planned.len(), 1, "{:#}", dry["repair"]);
    assert_eq!(planned[0]["result"], "dry-run");
    assert_eq!(planned[0]["program"], "iptables-nft-restore");
    assert_eq!(planned[0]["args"], json!(["--noflush", "-w"]));
    assert_eq!(
        planned[0]["script"],
        format!(
            "*nat\n-D KUBE-NODEPORTS{}\nCOMMIT\n",
            &saved_stale_dnat()["-A KUBE-NODEPORTS".len()..]
        )
    );
    assert_eq!(
        lab.ruleset("iptables-nft-save"),
        before,
        "a dry run changed the ruleset"
    );
    assert_eq!(lab.curl_nodeport(30080), None);

    // The repair: exactly the stale rule goes, and the port reaches the pod.
    let (out, report) = repair(&lab, &cluster, &[]);
    assert_eq!(results(&report), ["applied"], "{:#}", report["repair"]);
    let after = lab.ruleset("iptables-nft-save");
    let (gone, added) = diff(&before, &after);
    assert_eq!(gone, BTreeSet::from([saved_stale_dnat()]));
    assert!(added.is_empty(), "{added:?}");
    assert_eq!(lab.curl_nodeport(30080).as_deref(), Some("pod-a"));
    // The report printed is the node after repair: nothing left to find.
    assert_eq!(report["summary"]["critical"], 0, "{:#}", report["findings"]);
    // The audit trail: before and after, on stderr.
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("repair: applying") && log.contains("repair: applied"),
        "{log}"
    );
}

/// shop/web's rules as a kube-proxy before v1.24 wrote them for its unnamed port: the
/// NodePort rules jump to `KUBE-MARK-MASQ` and straight to `KUBE-SVC-*`, every comment
/// reads `shop/web:`, and the chains are named after `shop/web:` + `tcp` (today's
/// kube-proxy hashes `shop/web` + `tcp`).
fn older_release_rules(endpoint: &str) -> (String, String) {
    let web = ServicePortRef::parse("shop/web").unwrap();
    let h = String::from_utf8(
        kube_proxy::service_chain_hash_as(&web, Protocol::Tcp, Naming::TrailingColon).to_vec(),
    )
    .unwrap();
    let s = kube_proxy::endpoint_chain_hash_as(
        &web,
        Protocol::Tcp,
        &endpoint.parse().unwrap(),
        Naming::TrailingColon,
    );
    assert_ne!(h, hash("shop/web"), "the two releases name the chain alike");
    let ip = endpoint.split(':').next().unwrap();
    let decl = format!(":KUBE-SVC-{h} - [0:0]\n:KUBE-SEP-{s} - [0:0]\n");
    let rules = format!(
        "-A KUBE-NODEPORTS -p tcp -m comment --comment \"shop/web:\" -m tcp --dport 30080 -j KUBE-MARK-MASQ
-A KUBE-NODEPORTS -p tcp -m comment --comment \"shop/web:\" -m tcp --dport 30080 -j KUBE-SVC-{h}
-A KUBE-SVC-{h} -m comment --comment \"shop/web:\" -j KUBE-SEP-{s}
-A KUBE-SEP-{s} -s {ip}/32 -m comment --comment \"shop/web:\" -j KUBE-MARK-MASQ
-A KUBE-SEP-{s} -p tcp -m comment --comment \"shop/web:\" -m tcp -j DNAT --to-destination {endpoint}
"
    );
    (decl, rules)
}

#[test]
fn a_working_rule_an_older_kube_proxy_named_is_left_alone() {
    // Before, its chain name (not today's hash of shop/web) made it a critical
    // stale-nodeport that advised deleting it, and repair deleted it: the port died.
    let Some((lab, dir, _)) = setup("a_working_rule_an_older_kube_proxy_named_is_left_alone") else {
        return;
    };
    let cluster = cluster_state_named(dir.path(), LONG_AGO, "");
    lab.restore(
        "iptables-nft-restore",
        &node_rules(&[older_release_rules(&pod())], "", ""),
    );
    assert_eq!(lab.curl_nodeport(30080).as_deref(), Some("pod-a"));
    let before = lab.ruleset("iptables-nft-save");
    let (_, report) = repair(&lab, &cluster, &[]);
    assert!(actions(&report).is_empty(), "{:#}", report["repair"]);
    assert_eq!(
        report["findings"].as_array().unwrap().len(),
        0,
        "{:#}",
        report["findings"]
    );
    assert_eq!(lab.ruleset("iptables-nft-save"), before);
    assert_eq!(lab.curl_nodeport(30080).as_deref(), Some("pod-a"));
}

#[test]
fn a_deleted_services_rules_and_orphaned_chains_go_and_nothing_else() {
    let Some((lab, _dir, cluster)) =
        setup("a_deleted_services_rules_and_orphaned_chains_go_and_nothing_else")
    else {
        return;
    };
    // shop/gone was deleted while kube-proxy was down: its NodePort rule and chains
    // remain. An endpoint chain of a long-gone pod lingers too, unreferenced.
    let orphan = sep(WEB, "10.77.2.50:8080");
    lab.restore(
        "iptables-nft-restore",
        &node_rules(
            &[
                service_rules(WEB, 30080, &pod()),
                service_rules(GONE, 30090, "10.77.2.98:8080"),
            ],
            &format!(":KUBE-SEP-{orphan} - [0:0]\n"),
            &format!("-A KUBE-SEP-{orphan} -m tcp -p tcp -j DNAT --to-destination 10.77.2.50:8080\n"),
        ),
    );
    assert_eq!(lab.curl_nodeport(30080).as_deref(), Some("pod-a"));
    let before = lab.ruleset("iptables-nft-save");

    let (_, report) = repair(&lab, &cluster, &[]);
    assert!(
        results(&report).iter().all(|r| r == "applied"),
        "{:#}",
        report["repair"]
    );
    let after = lab.ruleset("iptables-nft-save");
    let (gone, added) = diff(&before, &after);
    assert!(added.is_empty(), "{added:?}");
    // Exactly shop/gone's NodePort rule, its chains and their rules, and the orphan.
    let (g, gsep) = (hash(GONE), sep(GONE, "10.77.2.98:8080"));
    let expected: BTreeSet<String> = before
        .iter()
        .filter(|l| {
            [g.as_str(), gsep.as_str(), orphan.as_str()]
                .iter()
                .any(|h| l.contains(h))
        })
        .cloned()
        .collect();
    // The NodePort rule; EXT, SVC, SEP: 3 declarations and 5 rules; the orphan: 2 lines.
    assert_eq!(expected.len(), 11, "{expected:#?}");
    assert_eq!(gone, expected);
    assert_eq!(lab.curl_nodeport(30080).as_deref(), Some("pod-a"));
    assert_eq!(
        report["findings"].as_array().unwrap().len(),
        0,
        "{:#}",
        report["findings"]
    );
}

#[test]
fn nothing_is_touched_on_an_untrusted_or_unreachable_cluster_state_or_inside_the_grace_window() {
    let Some((lab, dir, cluster)) = shadowed(
        "nothing_is_touched_on_an_untrusted_or_unreachable_cluster_state_or_inside_the_grace_window",
    ) else {
        return;
    };
    let before = lab.ruleset("iptables-nft-save");

    // A file nobody vouches for may be stale: refused.
    let (_, report) = scan_repair(&lab, &["--cluster-state", cluster.to_str().unwrap()]);
    let blocked = &report["repair"]["cycles"][0]["blocked"];
    assert!(
        blocked.as_str().unwrap_or("").contains("not synced"),
        "{:#}",
        report["repair"]
    );
    assert_eq!(lab.ruleset("iptables-nft-save"), before);

    // The API server cannot be reached: there is no current state, so no repair.
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let (_, report) = scan_repair(
        &lab,
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--api-timeout",
            "2s",
        ],
    );
    assert!(
        report["repair"]["cycles"][0]["blocked"].is_string(),
        "{:#}",
        report["repair"]
    );
    assert_eq!(lab.ruleset("iptables-nft-save"), before);

    // shop/web changed a moment ago: kube-proxy may still be applying it.
    let now = jiff::Timestamp::now().to_string();
    let cluster = cluster_state(dir.path(), &now);
    let (_, report) = repair(&lab, &cluster, &["--grace", "1h"]);
    assert!(actions(&report).is_empty(), "{:#}", report["repair"]);
    let left: Vec<&str> = report["repair"]["cycles"][0]["left_alone"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    assert!(
        !left.is_empty() && left.iter().all(|r| r.contains("grace window")),
        "{left:?}"
    );
    assert_eq!(lab.ruleset("iptables-nft-save"), before);
}

#[test]
fn a_concurrent_writer_loses_nothing_while_repair_runs() {
    // iptables-nft commits through nf_tables' generation check, iptables-legacy through
    // the xtables lock: both must keep the writer's work.
    for (restore, save) in [
        ("iptables-nft-restore", "iptables-nft-save"),
        ("iptables-legacy-restore", "iptables-legacy-save"),
    ] {
        concurrent_writer(restore, save);
    }
}

fn concurrent_writer(restore: &'static str, save: &str) {
    let Some((lab, _dir, cluster)) =
        shadowed_in("a_concurrent_writer_loses_nothing_while_repair_runs", restore)
    else {
        return;
    };
    let before = lab.ruleset(save);
    // A writer like kube-proxy: one `iptables-restore --noflush` transaction after
    // another into the same nat table, each adding a rule, for as long as repair runs.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (node, stop) = (lab.node.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut acknowledged = Vec::new();
            let mut failures = 0;
            let mut i = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let rule = format!(
                    "-A KUBE-SERVICES -d 10.96.{}.{}/32 -p tcp -m comment --comment \"writer/svc-{i} cluster IP\" -m tcp --dport 80 -j RETURN",
                    i / 250,
                    i % 250 + 1
                );
                let out = support::netns::exec_in_with_input(
                    &node,
                    &[restore, "--noflush", "-w"],
                    &format!("*nat\n{rule}\nCOMMIT\n"),
                );
                if out.status.success() {
                    acknowledged.push((rule, std::time::Instant::now()));
                } else {
                    failures += 1;
                }
            }
            (acknowledged, failures)
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let started = std::time::Instant::now();
    let (_, report) = repair(&lab, &cluster, &[]);
    let ended = std::time::Instant::now();
    std::thread::sleep(std::time::Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (acknowledged, failures) = writer.join().unwrap();
    assert_eq!(results(&report), ["applied"], "{restore}: {:#}", report["repair"]);
    let during = acknowledged
        .iter()
        .filter(|(_, at)| *at > started && *at < ended)
        .count();
    assert!(
        during > 10,
        "{restore}: the writer wrote only {during} times while repair ran"
    );

    let after = lab.ruleset(save);
    let (gone, added) = diff(&before, &after);
    assert_eq!(gone, BTreeSet::from([saved_stale_dnat()]));
    let written: BTreeSet<String> = acknowledged.into_iter().map(|(r, _)| r).collect();
    assert_eq!(
        added, written,
        "{restore}: the writer's acknowledged rules, exactly ({failures} writes failed)"
    );
    assert_eq!(lab.curl_nodeport(30080).as_deref(), Some("pod-a"));
}

/// One Service port in kube-proxy's nftables form (Cluster policy, one endpoint): its
/// chains and rules, and its `service-nodeports` element.
fn nft_service(svc: &str, node_port: u16, endpoint: &str) -> String {
    let svc_ref = ServicePortRef::parse(svc).unwrap();
    let external = kube_proxy::nft_service_chain("external", &svc_ref, Protocol::Tcp);
    let service = kube_proxy::nft_service_chain("service", &svc_ref, Protocol::Tcp);
    let (ip, port) = endpoint.split_once(':').unwrap();
    // The endpoint chain's hash is kube-proxy's business; nothing here reads it.
    let ep = format!(
        "endpoint-AAAAAAAA-{}/{}/tcp/{}__{ip}/{port}",
        svc_ref.namespace, svc_ref.name, svc_ref.port_name
    );
    format!(
        "add chain ip kube-proxy {external}
add chain ip kube-proxy {service}
add chain ip kube-proxy {ep}
add rule ip kube-proxy {external} jump mark-for-masquerade
add rule ip kube-proxy {external} goto {service}
add rule ip kube-proxy {service} numgen random mod 1 vmap {{ 0 : goto {ep} }}
add rule ip kube-proxy {ep} ip saddr {ip} jump mark-for-masquerade
add rule ip kube-proxy {ep} meta l4proto tcp dnat to {endpoint}
add element ip kube-proxy service-nodeports {{ tcp . {node_port} : goto {external} }}
"
    )
}

/// kube-proxy's nftables table (the parts NodePorts use), with `services`.
fn nft_node(services: &str) -> String {
    format!(
        "add table ip kube-proxy {{ comment \"rules for kube-proxy\" ; }}
add set ip kube-proxy nodeport-ips {{ type ipv4_addr ; comment \"IPs that accept NodePort traffic\" ; }}
add map ip kube-proxy service-nodeports {{ type inet_proto . inet_service : verdict ; comment \"NodePort traffic\" ; }}
add map ip kube-proxy no-endpoint-nodeports {{ type inet_proto . inet_service : verdict ; }}
add chain ip kube-proxy nat-prerouting {{ type nat hook prerouting priority -100 ; }}
add chain ip kube-proxy nat-output {{ type nat hook output priority -100 ; }}
add chain ip kube-proxy nat-postrouting {{ type nat hook postrouting priority 100 ; }}
add chain ip kube-proxy services
add chain ip kube-proxy mark-for-masquerade
add chain ip kube-proxy masquerading
add rule ip kube-proxy mark-for-masquerade mark set mark or 0x4000
add rule ip kube-proxy masquerading mark and 0x4000 == 0 return
add rule ip kube-proxy masquerading mark set mark xor 0x4000
add rule ip kube-proxy masquerading masquerade fully-random
add rule ip kube-proxy nat-prerouting jump services
add rule ip kube-proxy nat-output jump services
add rule ip kube-proxy nat-postrouting jump masquerading
add rule ip kube-proxy services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
add element ip kube-proxy nodeport-ips {{ {} }}
{services}",
        support::netns::NODE_IP
    )
}

/// kube-proxy's table as a set of objects without handles: chains, rules (by chain
/// and expression) and map elements, so two listings compare by content.
fn nft_objects(lab: &Lab) -> BTreeSet<String> {
    let out = lab.exec(&["nft", "-j", "list", "table", "ip", "kube-proxy"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dump: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut objects = BTreeSet::new();
    for o in dump["nftables"].as_array().unwrap() {
        if let Some(c) = o.get("chain") {
            objects.insert(format!("chain {}", c["name"].as_str().unwrap()));
        } else if let Some(r) = o.get("rule") {
            objects.insert(format!("rule {} {}", r["chain"].as_str().unwrap(), r["expr"]));
        } else if let Some(m) = o.get("map") {
            for e in m["elem"].as_array().into_iter().flatten() {
                objects.insert(format!("element {} {e}", m["name"].as_str().unwrap()));
            }
        }
    }
    objects
}

#[test]
fn nftables_mode_a_deleted_services_element_and_chains_go_and_nothing_else() {
    let Some((lab, _dir, cluster)) =
        setup("nftables_mode_a_deleted_services_element_and_chains_go_and_nothing_else")
    else {
        return;
    };
    let script = nft_node(&format!(
        "{}{}",
        nft_service(WEB, 30080, &pod()),
        nft_service(GONE, 30090, "10.77.2.98:8080")
    ));
    let out = lab.exec_with_input(&["nft", "-f", "-"], &script);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(lab.curl_nodeport(30080).as_deref(), Some("pod-a"));
    let before = nft_objects(&lab);

    let (_, dry) = repair(&lab, &cluster, &["--dry-run"]);
    assert!(!actions(&dry).is_empty(), "{:#}", dry["repair"]);
    assert_eq!(nft_objects(&lab), before, "a dry run changed the table");

    let (_, report) = repair(&lab, &cluster, &[]);
    assert!(
        !results(&report).is_empty() && results(&report).iter().all(|r| r == "applied"),
        "{:#}",
        report["repair"]
    );
    let after = nft_objects(&lab);
    assert!(after.is_subset(&before), "{:#?}", after.difference(&before));
    let gone: BTreeSet<&String> = before.difference(&after).collect();
    // The element, and shop/gone's three chains with their five rules; nothing else.
    assert!(
        gone.iter()
            .all(|o| o.contains("shop/gone") || o.contains("30090")),
        "{gone:#?}"
    );
    assert_eq!(gone.len(), 9, "{gone:#?}");
    assert_eq!(lab.curl_nodeport(30080).as_deref(), Some("pod-a"));
    assert_eq!(
        report["findings"].as_array().unwrap().len(),
        0,
        "{:#}",
        report["findings"]
    );
}

/// A stand-in for a live kube-proxy in the node: `/healthz` on 127.0.0.1:10256 says it
/// synced just now, and when its canary disappears it does what kube-proxy does, a
/// full resync: `resync` (which rewrites KUBE-NODEPORTS and recreates the canaries)
/// through `iptables-restore --noflush`, noted in `marker`. Appended to
/// `support::KUBE_PROXY_HEALTHZ_PY`, whose `Healthz` it serves.
const KUBE_PROXY_STAND_IN: &str = r#"
import subprocess, sys, threading, time
resync, marker = sys.argv[1], sys.argv[2]

server = HTTPServer(("127.0.0.1", 10256), Healthz)
threading.Thread(target=server.serve_forever, daemon=True).start()
open(marker + ".ready", "w").close()
while True:
    time.sleep(0.2)
    probe = subprocess.run(["iptables-nft", "-w", "-t", "mangle", "-S", "KUBE-PROXY-CANARY"], capture_output=True)
    if probe.returncode != 0:
        with open(resync) as rules:
            subprocess.run(["iptables-nft-restore", "--noflush", "-w"], stdin=rules, check=True)
        with open(marker, "a") as done:
            done.write("resync\n")
"#;

/// The stand-in's process, stopped on drop.
struct StandIn(std::process::Child);

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_live_kube_proxy_is_nudged_and_cleans_up_its_own_drift() {
    nudge(true);
}

#[test]
fn drift_that_survives_the_nudge_is_removed_directly() {
    nudge(false);
}

/// A live kube-proxy (the stand-in) is nudged; its resync rewrites KUBE-NODEPORTS when
/// `resync_fixes`, else it only recreates its canaries and the drift survives.
fn nudge(resync_fixes: bool) {
    let test = if resync_fixes {
        "a_live_kube_proxy_is_nudged_and_cleans_up_its_own_drift"
    } else {
        "drift_that_survives_the_nudge_is_removed_directly"
    };
    let Some((lab, dir, cluster)) = shadowed(test) else {
        return;
    };
    let (_, web_rules) = service_rules(WEB, 30080, &pod());
    let nodeport_rule = if resync_fixes {
        format!(":KUBE-NODEPORTS - [0:0]\n{}\n", web_rules.lines().next().unwrap())
    } else {
        String::new()
    };
    let resync = dir.path().join("resync.rules");
    std::fs::write(
        &resync,
        format!(
            "*mangle\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n*filter\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n*nat\n:KUBE-PROXY-CANARY - [0:0]\n{nodeport_rule}COMMIT\n"
        ),
    )
    .unwrap();
    let script = dir.path().join("kube-proxy.py");
    std::fs::write(
        &script,
        format!("{}{KUBE_PROXY_STAND_IN}", support::KUBE_PROXY_HEALTHZ_PY),
    )
    .unwrap();
    let marker = dir.path().join("resynced");
    let _stand_in = StandIn(
        std::process::Command::new("ip")
            .args(["netns", "exec", &lab.node, "python3"])
            .args([&script, &resync, &marker])
            .spawn()
            .expect("python3 runs"),
    );
    let ready = marker.with_extension("ready");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ready.exists() {
        assert!(std::time::Instant::now() < deadline, "the stand-in did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(lab.curl_nodeport(30080), None);
    let before = lab.ruleset("iptables-nft-save");

    let (_, report) = repair(&lab, &cluster, &["--repair-nudge-wait", "3s"]);
    // The nudge first; then, only if the drift survived, the stale rule itself.
    let taken = actions(&report);
    assert_eq!(
        taken.len(),
        if resync_fixes { 1 } else { 2 },
        "{:#}",
        report["repair"]
    );
    if !resync_fixes {
        assert_eq!(taken[1]["result"], "applied");
        assert!(taken[1]["script"].as_str().unwrap().contains("-D KUBE-NODEPORTS"));
    }
    assert!(taken[0]["action"].as_str().unwrap().contains("nudge kube-proxy"));
    assert_eq!(taken[0]["result"], "applied");
    assert_eq!(
        taken[0]["script"],
        "*mangle\n-X KUBE-PROXY-CANARY\nCOMMIT\n*filter\n-X KUBE-PROXY-CANARY\nCOMMIT\n*nat\n-X KUBE-PROXY-CANARY\nCOMMIT\n"
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "resync\n");
    // The drift is gone, and only the drift.
    let (gone, added) = diff(&before, &lab.ruleset("iptables-nft-save"));
    assert_eq!(gone, BTreeSet::from([saved_stale_dnat()]));
    assert!(added.is_empty(), "{added:?}");
    assert_eq!(lab.curl_nodeport(30080).as_deref(), Some("pod-a"));
    assert_eq!(report["summary"]["critical"], 0, "{:#}", report["findings"]);
}

/// Stale rules whose comments a hostile root process chose: quotes, backslashes, shell
/// syntax, a `-j ACCEPT`, a comment naming another Service, the longest comment the
/// kernel keeps (255 bytes). Each goes to a pod that is gone, on a port no Service
/// owns.
fn hostile_rules() -> String {
    let comments = [
        r#""a \"b\" \\c $(id) `id` ; -j ACCEPT""#.to_string(),
        "\"-j ACCEPT\"".to_string(),
        "\"shop/web:http\"".to_string(),
        "y".repeat(255),
        "\"' -A INPUT -j DROP '\"".to_string(),
    ];
    comments
        .iter()
        .enumerate()
        .map(|(i, c)| {
            format!(
                "-A KUBE-NODEPORTS -p tcp -m comment --comment {c} -m tcp --dport {} -j DNAT --to-destination 10.77.2.99:8080\n",
                30091 + i
            )
        })
        .collect()
}

/// The cluster state with Services whose names no API server would accept (quotes,
/// spaces, a newline and a rule, 10,000 bytes): portdrift must not trust validation it
/// does not do itself. They own ports that carry no rules.
fn hostile_cluster_state(dir: &std::path::Path) -> std::path::PathBuf {
    let path = cluster_state(dir, LONG_AGO);
    let mut list: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let names = [
        "web\" -j ACCEPT".to_string(),
        "a b\n-A KUBE-NODEPORTS -j ACCEPT\nCOMMIT".to_string(),
        "n".repeat(10_000),
    ];
    for (i, name) in names.iter().enumerate() {
        list["items"].as_array_mut().unwrap().push(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "evil ns\"", "creationTimestamp": LONG_AGO, "uid": format!("u-evil-{i}")},
            "spec": {
                "type": "NodePort", "clusterIP": format!("10.96.0.{}", 90 + i),
                "ipFamilies": ["IPv4"], "externalTrafficPolicy": "Cluster",
                "ports": [{"name": "p\" -j ACCEPT", "port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": 30190 + i}]
            }
        }));
    }
    std::fs::write(&path, list.to_string()).unwrap();
    path
}

#[test]
fn hostile_names_and_comments_cannot_change_a_repair_command() {
    let Some((lab, dir, _)) = setup("hostile_names_and_comments_cannot_change_a_repair_command") else {
        return;
    };
    let cluster = hostile_cluster_state(dir.path());
    lab.restore(
        "iptables-nft-restore",
        &node_rules(&[service_rules(WEB, 30080, &pod())], "", &hostile_rules()),
    );
    let before = lab.ruleset("iptables-nft-save");
    let hostile: BTreeSet<String> = before
        .iter()
        .filter(|l| l.contains("10.77.2.99"))
        .cloned()
        .collect();
    assert_eq!(
        hostile.len(),
        5,
        "the kernel holds every hostile rule: {before:#?}"
    );

    // The plan: one command per hostile rule, each the rule's own spec as the dump
    // printed it, on one line, to iptables-nft-restore --noflush -w; nothing else.
    let (_, dry) = repair(&lab, &cluster, &["--repair-dry-run", "--repair-max", "10"]);
    let planned = actions(&dry);
    let mut specs = BTreeSet::new();
    for a in &planned {
        assert_eq!(a["program"], "iptables-nft-restore", "{a:#}");
        assert_eq!(a["args"], json!(["--noflush", "-w"]), "{a:#}");
        let script = a["script"].as_str().unwrap();
        let lines: Vec<&str> = script.lines().collect();
        assert_eq!(lines.len(), 3, "{script:?}");
        assert_eq!((lines[0], lines[2]), ("*nat", "COMMIT"), "{script:?}");
        let spec = lines[1]
            .strip_prefix("-D KUBE-NODEPORTS ")
            .expect("a delete in KUBE-NODEPORTS");
        specs.insert(format!("-A KUBE-NODEPORTS {spec}"));
    }
    assert_eq!(specs, hostile, "{:#}", dry["repair"]);

    // Applied by the real iptables-nft-restore: exactly the hostile rules go.
    let (_, report) = repair(&lab, &cluster, &["--repair-max", "10"]);
    assert!(
        results(&report).iter().all(|r| r == "applied") && results(&report).len() == 5,
        "{:#}",
        report["repair"]
    );
    let (gone, added) = diff(&before, &lab.ruleset("iptables-nft-save"));
    assert_eq!(gone, hostile);
    assert!(added.is_empty(), "{added:?}");
    assert_eq!(lab.curl_nodeport(30080).as_deref(), Some("pod-a"));
    // The hostile names were read as data (an unreadable cluster state would have
    // blocked repair altogether).
    let cluster_source = support::source(&report, "cluster.json");
    assert_eq!(cluster_source["status"], "ok", "{cluster_source:#}");

    // A comment with a line break: iptables-save prints it across two lines, and the
    // second looks like a rule of its own. The dump is no longer trusted: repair acts
    // on nothing, and the ruleset stays exactly as it was.
    let out = lab.exec(&[
        "iptables-nft",
        "-t",
        "nat",
        "-I",
        "KUBE-NODEPORTS",
        "-p",
        "tcp",
        "--dport",
        "30099",
        "-m",
        "comment",
        "--comment",
        "x\n-A KUBE-NODEPORTS -j ACCEPT",
        "-j",
        "DNAT",
        "--to-destination",
        "10.77.2.98:8080",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let before = lab.ruleset("iptables-nft-save");
    let (_, report) = repair(&lab, &cluster, &["--repair-max", "10"]);
    assert!(
        actions(&report).is_empty(),
        "repair acted on a dump it cannot read: {:#}",
        report["repair"]
    );
    assert_eq!(lab.ruleset("iptables-nft-save"), before);
}
