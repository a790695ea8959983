//! Cilium's service maps, read for real: each case builds the maps a node running Cilium
//! as its kube-proxy replacement would hold (Cilium's map types, sizes, flags and byte
//! layouts, pinned under `tc/globals/` of a BPF filesystem of their own, in a private
//! mount namespace: see `support::bpf_lab`), then scans them live with `--bpf-root` AND
//! from a snapshot of the same maps taken in the same namespace (`portdrift snapshot
//! --out`), and asserts both give the same findings and coverage, and the right ones.
//!
//! Also: the same healthy scan without `CAP_BPF` and `CAP_SYS_ADMIN` and through a
//! read-only bind mount of the BPF filesystem; and a scan that races an agent rewriting
//! a frontend's slots between two valid states, which must never report a finding.
//!
//! Needs root, bpftool, unshare and setpriv (CI runs as root and must not skip these).
//! The host's `/sys/fs/bpf` is never touched.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::collections::BTreeMap;

use serde_json::{Value, json};
use support::bpf_lab::{
    ANY, BACKENDS4, EXT_LOCAL, Frontend, Lab, NODEPORT, ROUTABLE, SCOPE_EXT, SCOPE_INT, TCP, TWO_SCOPES,
};

/// The node the scans run as, and its two NodePort addresses.
const NODE: &str = "node-a";
const ADDR1: &str = "192.168.50.10";
const ADDR2: &str = "10.0.1.21";

const WEB_PORT: u16 = 30080;
const API_PORT: u16 = 30081;
const LOCAL_PORT: u16 = 30082;

fn ready(test: &str) -> bool {
    support::require_root(test)
        && ["bpftool", "unshare", "setpriv"]
            .iter()
            .all(|t| support::require_tool(t, test))
}

// --- The cluster ------------------------------------------------------------------

/// One endpoint: pod IP, node, ready.
type Ep = (String, &'static str, bool);

fn ep(ip: &str, node: &'static str) -> Ep {
    (ip.to_string(), node, true)
}

/// A NodePort Service of namespace `default`.
#[derive(Clone)]
struct Svc {
    name: &'static str,
    cluster_ip: &'static str,
    port: u16,
    target: u16,
    node_port: u16,
    local: bool,
    endpoints: Vec<Ep>,
}

/// `kubectl get services,endpointslices -A -o json`, with Service default/kubernetes
/// (without it the list reads as filtered).
fn cluster(services: &[Svc]) -> Value {
    let mut items = vec![json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1",
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}
    })];
    for s in services {
        let mut spec = json!({
            "type": "NodePort", "clusterIP": s.cluster_ip, "clusterIPs": [s.cluster_ip],
            "ports": [{"name": "http", "port": s.port, "protocol": "TCP",
                       "targetPort": s.target, "nodePort": s.node_port}]
        });
        if s.local {
            spec["externalTrafficPolicy"] = json!("Local");
            spec["healthCheckNodePort"] = json!(32000 + s.node_port % 1000);
        }
        items.push(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": s.name, "namespace": "default",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec
        }));
        let endpoints: Vec<Value> = s
            .endpoints
            .iter()
            .map(|(ip, node, ready)| {
                json!({"addresses": [ip], "nodeName": node,
                       "conditions": {"ready": ready, "serving": ready, "terminating": false}})
            })
            .collect();
        items.push(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{}-abcde", s.name), "namespace": "default",
                         "labels": {"kubernetes.io/service-name": s.name}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": s.target, "protocol": "TCP"}],
            "endpoints": endpoints
        }));
    }
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

fn web() -> Svc {
    Svc {
        name: "web",
        cluster_ip: "10.96.0.50",
        port: 80,
        target: 8080,
        node_port: WEB_PORT,
        local: false,
        endpoints: vec![ep("10.244.1.5", "node-a"), ep("10.244.2.6", "node-b")],
    }
}

fn api() -> Svc {
    Svc {
        name: "api",
        cluster_ip: "10.96.0.60",
        port: 9090,
        target: 9090,
        node_port: API_PORT,
        local: false,
        endpoints: vec![ep("10.244.1.9", "node-a")],
    }
}

fn local() -> Svc {
    Svc {
        name: "local",
        cluster_ip: "10.96.0.70",
        port: 80,
        target: 8080,
        node_port: LOCAL_PORT,
        local: true,
        endpoints: vec![ep("10.244.1.11", "node-a"), ep("10.244.2.12", "node-b")],
    }
}

// --- The maps ---------------------------------------------------------------------

/// A healthy node-a: Services web (two endpoints) and api (one), each with its
/// ClusterIP frontend, the NodePort surrogate and a frontend on each node address; the
/// kubernetes Service's ClusterIP; every backend and reverse-NAT entry.
fn healthy_maps() -> Lab {
    let mut lab = Lab::new();
    lab.backend(1, "10.244.1.5:8080", TCP)
        .backend(2, "10.244.2.6:8080", TCP)
        .backend(3, "10.244.1.9:9090", TCP)
        .backend(4, "192.168.50.2:6443", TCP);
    lab.frontend(Frontend::new("10.96.0.1", 443, TCP, 0, 1, &[4]))
        .frontend(Frontend::new("10.96.0.50", 80, TCP, 0, 2, &[1, 2]))
        .nodeport(WEB_PORT, TCP, &[ADDR1, ADDR2], &[1, 2], 3)
        .frontend(Frontend::new("10.96.0.60", 9090, TCP, 0, 6, &[3]))
        .nodeport(API_PORT, TCP, &[ADDR1, ADDR2], &[3], 7);
    lab
}

/// Adds Service local (externalTrafficPolicy Local) to `lab`: on each NodePort address
/// an external scope with the node's own endpoint and an internal scope with both.
fn add_local(lab: &mut Lab) {
    lab.backend(11, "10.244.1.11:8080", TCP)
        .backend(12, "10.244.2.12:8080", TCP);
    lab.frontend(Frontend::new("10.96.0.70", 80, TCP, 0, 10, &[11, 12]));
    let local = EXT_LOCAL | TWO_SCOPES;
    for (i, (addr, routable)) in [("0.0.0.0", 0), (ADDR1, ROUTABLE), (ADDR2, ROUTABLE)]
        .into_iter()
        .enumerate()
    {
        let rev_nat = 11 + i as u16;
        let flags = NODEPORT | routable | local;
        lab.frontend(Frontend::new(addr, LOCAL_PORT, TCP, flags, rev_nat, &[11]).scope(SCOPE_EXT))
            .frontend(Frontend::new(addr, LOCAL_PORT, TCP, flags, rev_nat, &[11, 12]).scope(SCOPE_INT));
    }
}

// --- Scanning -----------------------------------------------------------------------

/// The flags every scan and snapshot here takes (the cluster file aside).
fn common_flags(cluster: &std::path::Path) -> String {
    format!(
        "--cluster-state {} --node {NODE} --kube-proxy-healthz off --kube-proxy-metrics off --bpf-root \"$D\"",
        cluster.display()
    )
}

/// A live scan of `$D` (or `root`) in the lab, as a command line.
fn scan_command(cluster: &std::path::Path, prefix: &str, root: &str) -> String {
    format!(
        "{prefix}\"$PORTDRIFT\" scan --format json {}",
        common_flags(cluster).replace("\"$D\"", root)
    )
}

/// A finding as (kind, severity, target), for the assertions and the report.
fn key(f: &Value) -> (String, String, String) {
    let s = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    (s(&f["kind"]), s(&f["severity"]), s(&f["target"]))
}

fn findings(report: &Value) -> Vec<&Value> {
    report["findings"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

/// Asserts two reports of the same maps agree: the same findings (key fields), the same
/// coverage.
fn assert_same(case: &str, live: (i32, &Value), from: (i32, &Value)) {
    let list = |r: &Value| r["findings"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        support::finding_multiset(&list(live.1)),
        support::finding_multiset(&list(from.1)),
        "{case}: the live scan and the scan of its snapshot found different things"
    );
    for field in ["proxy_mode", "complete", "not_checked"] {
        assert_eq!(
            live.1["coverage"][field], from.1["coverage"][field],
            "{case}: coverage.{field} differs between the live scan and its snapshot"
        );
    }
    assert_eq!(live.0, from.0, "{case}: exit status, live vs. snapshot");
}

/// Scans the lab's maps live and from a snapshot taken in the same namespace, checks
/// that both agree, that the node reads as replaced and complete, and that the findings
/// are exactly `want` (kind, severity, target; target "null" when there is none).
/// Returns the live report.
fn scan_both_ways(case: &str, lab: &Lab, cluster: &Value, want: &[(&str, &str, &str)]) -> Value {
    let cluster_file = lab.write("cluster.json", &cluster.to_string());
    let ran = lab.run(
        support::bin(),
        &[
            &scan_command(&cluster_file, "", "\"$D\""),
            &format!(
                "\"$PORTDRIFT\" snapshot --out \"$LAB/bundle\" {}",
                common_flags(&cluster_file)
            ),
        ],
    );
    let (live, snapshot) = (&ran[0], &ran[1]);
    assert_eq!(
        snapshot.code, 0,
        "{case}: snapshot failed: {}{}",
        snapshot.stdout, snapshot.stderr
    );
    let live_report = live.json();
    let (from_code, from_report) = support::scan_json(&lab.dir().join("bundle"), &[]);
    assert_same(case, (live.code, &live_report), (from_code, &from_report));
    check_report(&format!("{case} (live)"), live.code, &live_report, want);
    check_report(&format!("{case} (snapshot)"), from_code, &from_report, want);
    live_report
}

/// Asserts a report's coverage and findings, and its exit status.
fn check_report(case: &str, code: i32, report: &Value, want: &[(&str, &str, &str)]) {
    let found: Vec<_> = findings(report).into_iter().map(key).collect();
    eprintln!("{case}: exit {code}, findings {found:?}");
    assert_eq!(
        report["coverage"]["proxy_mode"], "replaced",
        "{case}: {:#}",
        report["coverage"]
    );
    assert_eq!(
        report["coverage"]["complete"], true,
        "{case}: {:#}",
        report["coverage"]
    );
    let mut have: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for k in found {
        *have.entry(k).or_default() += 1;
    }
    let mut expected: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for (kind, severity, target) in want {
        *expected
            .entry((kind.to_string(), severity.to_string(), target.to_string()))
            .or_default() += 1;
    }
    assert_eq!(
        have,
        expected,
        "{case}: findings (kind, severity, target); messages: {:#?}",
        findings(report)
            .iter()
            .map(|f| f["message"].clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(code, if want.is_empty() { 0 } else { 1 }, "{case}: exit status");
    for f in findings(report) {
        assert!(
            f["backend"].is_null(),
            "{case}: a Cilium finding has no backend: {f:#}"
        );
    }
}

fn the_one<'a>(report: &'a Value, kind: &str) -> &'a Value {
    let all: Vec<_> = findings(report)
        .into_iter()
        .filter(|f| f["kind"] == kind)
        .collect();
    assert_eq!(all.len(), 1, "one {kind}: {:#}", report["findings"]);
    all[0]
}

// --- The cases ----------------------------------------------------------------------

#[test]
fn a_healthy_node_is_clean_and_complete() {
    if !ready("a_healthy_node_is_clean_and_complete") {
        return;
    }
    let lab = healthy_maps();
    let report = scan_both_ways("healthy", &lab, &cluster(&[web(), api()]), &[]);
    assert!(
        report["coverage"]["proxy_mode_evidence"]
            .as_str()
            .is_some_and(|e| e.contains("cilium_lb4_services_v2")),
        "{:#}",
        report["coverage"]
    );
}

#[test]
fn a_backend_left_after_its_pod_was_deleted_is_stale() {
    if !ready("a_backend_left_after_its_pod_was_deleted_is_stale") {
        return;
    }
    // The slice lists web's two endpoints; the maps still have a third, 10.244.1.7,
    // in an active slot of each of web's frontends.
    let mut lab = healthy_maps();
    lab.backend(5, "10.244.1.7:8080", TCP);
    for addr in ["0.0.0.0", ADDR1, ADDR2, "10.96.0.50"] {
        let port = if addr == "10.96.0.50" { 80 } else { WEB_PORT };
        let f = lab.frontend_mut(addr, port, SCOPE_EXT);
        f.slots.push(5);
        f.count = 3;
    }
    let report = scan_both_ways(
        "stale backend",
        &lab,
        &cluster(&[web(), api()]),
        &[("stale-endpoint", "critical", "10.244.1.7:8080")],
    );
    let f = the_one(&report, "stale-endpoint");
    assert_eq!(
        (f["port"].as_u64(), f["service"].as_str()),
        (Some(30080), Some("default/web"))
    );
    assert!(
        f["rule"].as_str().unwrap().contains("10.244.1.7:8080/TCP"),
        "{f:#}"
    );
}

#[test]
fn a_nodeport_missing_on_one_node_address_is_a_missing_rule() {
    if !ready("a_nodeport_missing_on_one_node_address_is_a_missing_rule") {
        return;
    }
    // web has a frontend on both node addresses; api lacks the one on 10.0.1.21.
    let mut lab = healthy_maps();
    lab.remove_frontend(ADDR2, API_PORT);
    let report = scan_both_ways(
        "missing NodePort address",
        &lab,
        &cluster(&[web(), api()]),
        &[("missing-rule", "critical", "null")],
    );
    let f = the_one(&report, "missing-rule");
    assert_eq!(
        (f["port"].as_u64(), f["service"].as_str()),
        (Some(30081), Some("default/api"))
    );
    assert!(f["message"].as_str().unwrap().contains(ADDR2), "{f:#}");
}

#[test]
fn a_backend_no_slot_names_is_leaked() {
    if !ready("a_backend_no_slot_names_is_leaked") {
        return;
    }
    let mut lab = healthy_maps();
    lab.backend(9, "10.244.3.3:8080", TCP);
    let report = scan_both_ways(
        "leaked backend",
        &lab,
        &cluster(&[web(), api()]),
        &[("leaked-backend", "warning", "null")],
    );
    let f = the_one(&report, "leaked-backend");
    assert_eq!(f["evidence"], json!(["9 10.244.3.3:8080/TCP active"]), "{f:#}");
}

#[test]
fn a_slot_naming_an_absent_backend_is_a_missing_backend() {
    if !ready("a_slot_naming_an_absent_backend_is_a_missing_backend") {
        return;
    }
    // The surrogate of web counts a third active slot, naming backend 42, not in the map.
    let mut lab = healthy_maps();
    let f = lab.frontend_mut("0.0.0.0", WEB_PORT, SCOPE_EXT);
    f.slots.push(42);
    f.count = 3;
    let report = scan_both_ways(
        "missing backend",
        &lab,
        &cluster(&[web(), api()]),
        &[("missing-backend", "critical", "0.0.0.0:30080")],
    );
    let f = the_one(&report, "missing-backend");
    assert!(
        f["rule"].as_str().unwrap().contains("backend 42 not found"),
        "{f:#}"
    );
}

#[test]
fn an_any_protocol_frontend_beside_tcp_ones_is_judged_right() {
    if !ready("an_any_protocol_frontend_beside_tcp_ones_is_judged_right") {
        return;
    }
    // api's frontends were written before Cilium told protocols apart (proto 0), web's
    // after (proto 6): both serve their TCP Service.
    let mut lab = healthy_maps();
    for f in lab
        .frontends
        .iter_mut()
        .filter(|f| f.port == API_PORT || f.port == 9090)
    {
        f.proto = ANY;
    }
    scan_both_ways("proto 0 beside proto 6", &lab, &cluster(&[web(), api()]), &[]);
}

#[test]
fn a_local_policy_with_two_scopes_is_clean() {
    if !ready("a_local_policy_with_two_scopes_is_clean") {
        return;
    }
    let mut lab = healthy_maps();
    add_local(&mut lab);
    scan_both_ways(
        "Local policy, two scopes",
        &lab,
        &cluster(&[web(), api(), local()]),
        &[],
    );
}

#[test]
fn a_local_external_scope_without_the_local_endpoint_misses_it() {
    if !ready("a_local_external_scope_without_the_local_endpoint_misses_it") {
        return;
    }
    // On 192.168.50.10 the external scope holds the remote endpoint instead of the
    // node's own: listed, so not stale, but the local one gets no external traffic.
    let mut lab = healthy_maps();
    add_local(&mut lab);
    lab.frontend_mut(ADDR1, LOCAL_PORT, SCOPE_EXT).slots = vec![12];
    let report = scan_both_ways(
        "Local policy, external scope lacks the local endpoint",
        &lab,
        &cluster(&[web(), api(), local()]),
        &[("missing-endpoint", "critical", "10.244.1.11:8080")],
    );
    let f = the_one(&report, "missing-endpoint");
    assert_eq!(
        (f["port"].as_u64(), f["service"].as_str()),
        (Some(30082), Some("default/local"))
    );
    assert!(
        f["message"].as_str().unwrap().contains("192.168.50.10:30082/TCP"),
        "{f:#}"
    );
}

#[test]
fn an_almost_full_backends_map_is_nearly_full() {
    if !ready("an_almost_full_backends_map_is_nearly_full") {
        return;
    }
    // A backends map of 20 entries holding 19: web has 17 endpoints, api and the
    // kubernetes Service one each.
    let mut lab = healthy_maps();
    lab.size(BACKENDS4, 20);
    let mut svc = web();
    let mut ids = vec![1, 2];
    for i in 0..15 {
        let (id, ip) = (101 + i, format!("10.244.3.{}", 10 + i));
        lab.backend(id, &format!("{ip}:8080"), TCP);
        svc.endpoints.push(ep(&ip, "node-c"));
        ids.push(id);
    }
    for f in lab
        .frontends
        .iter_mut()
        .filter(|f| f.port == WEB_PORT || f.port == 80)
    {
        f.slots = ids.clone();
        f.count = ids.len() as u16;
    }
    assert_eq!(lab.backends.len(), 19);
    scan_both_ways(
        "almost full map",
        &lab,
        &cluster(&[svc, api()]),
        &[("map-nearly-full", "warning", BACKENDS4)],
    );
}

#[test]
fn a_reverse_nat_entry_for_another_address_is_a_mismatch() {
    if !ready("a_reverse_nat_entry_for_another_address_is_a_mismatch") {
        return;
    }
    // Rev-NAT ID 4 belongs to web's frontend on 192.168.50.10 but names .11.
    let mut lab = healthy_maps();
    let entry = lab.rev_nats.iter_mut().find(|r| r.id == 4).unwrap();
    assert_eq!(entry.address.to_string(), "192.168.50.10:30080");
    entry.address = "192.168.50.11:30080".parse().unwrap();
    let report = scan_both_ways(
        "rev-NAT mismatch",
        &lab,
        &cluster(&[web(), api()]),
        &[("rev-nat-mismatch", "critical", "192.168.50.10:30080")],
    );
    let f = the_one(&report, "rev-nat-mismatch");
    assert!(
        f["message"].as_str().unwrap().contains("192.168.50.11:30080"),
        "{f:#}"
    );
}

// --- Privileges -------------------------------------------------------------------

#[test]
fn the_maps_are_read_without_cap_bpf_and_through_a_read_only_mount() {
    if !ready("the_maps_are_read_without_cap_bpf_and_through_a_read_only_mount") {
        return;
    }
    let lab = healthy_maps();
    let cluster_file = lab.write("cluster.json", &cluster(&[web(), api()]).to_string());
    let drop =
        "setpriv --bounding-set -bpf,-sys_admin --inh-caps -bpf,-sys_admin --ambient-caps -bpf,-sys_admin ";
    let read_only =
        "mkdir -p \"$LAB/ro\"; mount --bind \"$D\" \"$LAB/ro\"; mount -o remount,bind,ro \"$LAB/ro\"; ";
    let ran = lab.run(support::bin(), &[
        // The control: without the two capabilities, creating a map fails; so the drop
        // took effect.
        &format!("{drop}bpftool map create \"$D/tc/globals/control\" type hash key 4 value 4 entries 1 name control"),
        &format!("{drop}grep CapEff /proc/self/status"),
        &scan_command(&cluster_file, drop, "\"$D\""),
        &format!("{read_only}{}", scan_command(&cluster_file, "", "\"$LAB/ro\"")),
        &format!("{read_only}{}", scan_command(&cluster_file, drop, "\"$LAB/ro\"")),
        // And the read-only mount refuses a pin.
        &format!("{read_only}bpftool map pin pinned \"$D/tc/globals/cilium_lb4_services_v2\" \"$LAB/ro/tc/globals/extra\""),
        &format!(
            "{read_only}{drop}\"$PORTDRIFT\" snapshot --out \"$LAB/bundle\" {}",
            common_flags(&cluster_file).replace("\"$D\"", "\"$LAB/ro\"")
        ),
    ]);
    assert_ne!(
        ran[0].code, 0,
        "the control map was created: the capabilities were not dropped"
    );
    eprintln!(
        "without CAP_BPF and CAP_SYS_ADMIN: {} (map create: {})",
        ran[1].stdout.trim(),
        ran[0].stderr.trim()
    );
    assert_ne!(ran[5].code, 0, "a pin through the read-only mount worked");
    let (from_code, from_report) = support::scan_json(&lab.dir().join("bundle"), &[]);
    for (what, i) in [
        ("no CAP_BPF/CAP_SYS_ADMIN", 2),
        ("read-only bind mount", 3),
        ("both", 4),
    ] {
        let report = ran[i].json();
        check_report(what, ran[i].code, &report, &[]);
        assert_same(what, (ran[i].code, &report), (from_code, &from_report));
    }
    check_report("snapshot taken with both", from_code, &from_report, &[]);
}

// --- Churn ------------------------------------------------------------------------

/// Scans while the agent rewrites a frontend (`PORTDRIFT_CHURN_SCANS` sets another
/// number, to measure how often a scan reports a torn read).
fn churn_scans() -> usize {
    std::env::var("PORTDRIFT_CHURN_SCANS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20)
}

#[test]
fn a_frontend_rewritten_during_the_scans_gives_no_finding() {
    if !ready("a_frontend_rewritten_during_the_scans_gives_no_finding") {
        return;
    }
    // web's frontend on 192.168.50.10 flips between slots (1, 2) and (2, 1): both hold
    // the two endpoints the slice lists. Each flip is one `bpftool batch` of two slot
    // updates, so a read between them (or a hash walk across them) sees one endpoint
    // twice and the other in no slot.
    let lab = healthy_maps();
    let cluster_file = lab.write("cluster.json", &cluster(&[web(), api()]).to_string());
    let mut frontend = lab
        .frontends
        .iter()
        .find(|f| f.address.to_string() == ADDR1 && f.port == WEB_PORT)
        .unwrap()
        .clone();
    assert_eq!(frontend.slots, vec![1, 2]);
    lab.write("a.batch", &lab.update_lines(&frontend));
    frontend.slots = vec![2, 1];
    lab.write("b.batch", &lab.update_lines(&frontend));
    let scan = scan_command(&cluster_file, "", "\"$D\"");
    let scans = churn_scans();
    let script = format!(
        r#"
( n=0
  trap 'echo $n >"$LAB/flips"; exit 0' TERM
  while :; do
    bpftool batch file "$LAB/b.batch" >/dev/null && bpftool batch file "$LAB/a.batch" >/dev/null || exit 1
    n=$((n + 2))
  done ) &
churn=$!
sleep 0.2
for i in $(seq {scans}); do
  {scan} >"$LAB/churn.$i.json" 2>"$LAB/churn.$i.err"; echo $? >"$LAB/churn.$i.rc"
done
kill $churn
# The churner was still flipping (it reports its count only when stopped).
wait $churn && test -s "$LAB/flips"
"#
    );
    let ran = lab.run(support::bin(), &[&script]);
    assert_eq!(
        ran[0].code, 0,
        "the churner failed: {}{}",
        ran[0].stdout, ran[0].stderr
    );
    let flips = std::fs::read_to_string(lab.dir().join("flips")).unwrap_or_default();
    let mut flaky = Vec::new();
    let mut dropped = 0;
    for i in 1..=scans {
        let read = |ext: &str| {
            std::fs::read_to_string(lab.dir().join(format!("churn.{i}.{ext}"))).unwrap_or_default()
        };
        let code: i32 = read("rc").trim().parse().unwrap_or(-1);
        let report: Value = serde_json::from_str(&read("json"))
            .unwrap_or_else(|e| panic!("scan {i}: no JSON ({e}): {}", read("err")));
        let not_checked = report["coverage"]["not_checked"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !not_checked.is_empty() {
            dropped += 1;
        }
        if !findings(&report).is_empty() || !(code == 0 || code == 3 && !not_checked.is_empty()) {
            flaky.push(format!(
                "scan {i}: exit {code}, findings {:#}, not_checked {:#}",
                report["findings"], report["coverage"]["not_checked"]
            ));
        }
    }
    eprintln!(
        "churn: {scans} scans during {} flips, {dropped} with a difference seen by one read only (dropped, exit 3), {} reporting a finding",
        flips.trim(),
        flaky.len()
    );
    assert!(
        flaky.is_empty(),
        "scans during churn reported findings:\n{}",
        flaky.join("\n")
    );
}
