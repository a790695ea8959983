//! `desired_state`: one test per kube-proxy rule.

use serde_json::json;

use super::*;
use crate::heart::desired::{DesiredBuilder, desired_state};

const NODE: &str = "node-a";

fn state(services: &[Service], slices: &[EndpointSlice]) -> DesiredState {
    desired_state(services, slices, Some(NODE), None)
}

// --- Which Services and ports count ---------------------------------------------

#[test]
fn nodeport_service_gets_all_ready_endpoints_in_its_cluster_set() {
    let svc = nodeport_service("shop", "web", 30080);
    let eps = v4_slice(
        "shop",
        "web-abc",
        "web",
        json!([ready("10.1.0.1", NODE), ready("10.1.0.2", "node-b")]),
    );
    let state = state(&[svc], &[eps]);

    let port = only_port(&state);
    assert_eq!(port.service.service(), "shop/web");
    assert_eq!(port.service.port_name, "", "unnamed port");
    assert_eq!((port.protocol, port.node_port), tcp(30080));
    assert_eq!(port.families, vec![Family::Ipv4]);
    assert!(!port.external_policy_local && !port.internal_policy_local && !port.uncertain);
    let v4 = v4(port);
    assert_eq!(v4.listed, addrs(&["10.1.0.1:8080", "10.1.0.2:8080"]));
    assert_eq!(v4.cluster, addrs(&["10.1.0.1:8080", "10.1.0.2:8080"]));
    assert!(v4.local.is_empty(), "Cluster policy uses no Local set");
    assert!(v4.has_endpoints && v4.has_external_endpoints && !v4.cluster_uncertain);
    assert!(state.problems.is_empty() && !state.uncertain);
}

#[test]
fn only_ports_with_a_node_port_are_desired() {
    let cluster_ip = service(
        "ns",
        "internal",
        json!({"type": "ClusterIP", "clusterIP": "10.96.0.1", "ports": [{"port": 80}]}),
    );
    let mixed = service(
        "ns",
        "mixed",
        json!({
            "type": "NodePort", "clusterIP": "10.96.0.2",
            "ports": [{"name": "a", "port": 80, "nodePort": 30001}, {"name": "b", "port": 81, "nodePort": 0}],
        }),
    );
    let lb_without_node_ports = service(
        "ns",
        "lb",
        json!({
            "type": "LoadBalancer", "clusterIP": "10.96.0.3", "allocateLoadBalancerNodePorts": false,
            "ports": [{"port": 443, "protocol": "TCP"}],
        }),
    );
    let state = state(&[cluster_ip, mixed, lb_without_node_ports], &[]);
    let port = only_port(&state);
    assert_eq!(
        (port.service.kube_proxy_name(), port.node_port),
        ("ns/mixed:a".to_string(), 30001)
    );
    assert!(state.other_allocated.is_empty());
}

#[test]
fn load_balancer_ports_are_node_ports_too() {
    let lb = service(
        "ns",
        "lb",
        json!({"type": "LoadBalancer", "clusterIP": "10.96.0.3", "ports": [{"port": 443, "nodePort": 31443}]}),
    );
    assert_eq!(only_port(&state(&[lb], &[])).node_port, 31443);
}

#[test]
fn protocol_defaults_to_tcp_and_udp_and_sctp_are_kept() {
    let svc = service(
        "ns",
        "multi",
        json!({
            "type": "NodePort", "clusterIP": "10.96.0.4",
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053},
                {"name": "sig", "port": 3868, "protocol": "SCTP", "nodePort": 30868},
                {"name": "web", "port": 80, "nodePort": 30080},
            ],
        }),
    );
    let state = state(&[svc], &[]);
    let got: Vec<_> = state
        .ports
        .iter()
        .map(|p| (p.service.port_name.as_str(), p.protocol, p.node_port))
        .collect();
    assert_eq!(
        got,
        vec![
            ("dns", Protocol::Udp, 30053),
            ("sig", Protocol::Sctp, 30868),
            ("web", Protocol::Tcp, 30080)
        ]
    );
}

#[test]
fn skipped_services_keep_their_node_ports_allocated() {
    let spec = |cluster_ip: &str, port: u16| json!({"type": "NodePort", "clusterIP": cluster_ip, "ports": [{"port": 80, "nodePort": port}]});
    let headless = service("ns", "headless", spec("None", 30001));
    let empty_ip = service("ns", "empty", spec("", 30002));
    let external_name = service(
        "ns",
        "ext",
        json!({"type": "ExternalName", "externalName": "example.com", "clusterIP": "10.96.0.9",
               "ports": [{"port": 80, "nodePort": 30003}]}),
    );
    let mut proxy_name = service("ns", "other-proxy", spec("10.96.0.5", 30004));
    proxy_name.metadata.labels = Some(
        [(
            "service.kubernetes.io/service-proxy-name".to_string(),
            "cilium".to_string(),
        )]
        .into(),
    );
    let mut headless_label = service("ns", "labelled", spec("10.96.0.6", 30005));
    headless_label.metadata.labels =
        Some([("service.kubernetes.io/headless".to_string(), String::new())].into());

    let state = state(
        &[headless, empty_ip, external_name, proxy_name, headless_label],
        &[],
    );
    assert!(
        state.ports.is_empty(),
        "kube-proxy programs none of them: {:#?}",
        state.ports
    );
    let expected: BTreeSet<_> = [30001, 30002, 30003, 30004, 30005].into_iter().map(tcp).collect();
    assert_eq!(state.other_allocated, expected);
}

#[test]
fn skipped_load_balancer_keeps_its_health_check_port_allocated() {
    let mut svc = service(
        "ns",
        "lb",
        json!({"type": "LoadBalancer", "clusterIP": "10.96.0.3", "externalTrafficPolicy": "Local",
               "healthCheckNodePort": 32000, "ports": [{"port": 80, "protocol": "UDP", "nodePort": 31000}]}),
    );
    svc.metadata.labels = Some(
        [(
            "service.kubernetes.io/service-proxy-name".to_string(),
            "x".to_string(),
        )]
        .into(),
    );
    let state = state(&[svc], &[]);
    assert_eq!(state.other_allocated, [(Protocol::Udp, 31000), tcp(32000)].into());
}

#[test]
fn node_port_kube_proxy_cannot_program_is_reported() {
    let svc = service(
        "ns",
        "bad",
        json!({"type": "NodePort", "clusterIP": "10.96.0.3",
               "ports": [{"name": "a", "port": 80, "nodePort": 70000}, {"name": "b", "port": 81, "protocol": "ICMP", "nodePort": 30001}]}),
    );
    let state = state(&[svc], &[]);
    assert!(state.ports.is_empty());
    assert_eq!(state.problems.len(), 2, "{:#?}", state.problems);
    assert!(state.problems.iter().all(|p| p.object == "Service ns/bad"));
}

// --- Families ---------------------------------------------------------------------

#[test]
fn dual_stack_service_has_endpoints_per_family() {
    let svc = service(
        "ns",
        "dual",
        json!({"type": "NodePort", "clusterIP": "10.96.0.7", "clusterIPs": ["10.96.0.7", "fd00:96::7"],
               "ipFamilies": ["IPv4", "IPv6"], "ports": [{"port": 80, "nodePort": 30007}]}),
    );
    let ports = json!([{"name": "", "port": 8080, "protocol": "TCP"}]);
    let v4_eps = slice(
        "ns",
        "dual-v4",
        "dual",
        "IPv4",
        ports.clone(),
        json!([ready("10.1.0.1", NODE)]),
    );
    let v6_eps = slice(
        "ns",
        "dual-v6",
        "dual",
        "IPv6",
        ports.clone(),
        json!([ready("fd00:1::1", "node-b")]),
    );
    let fqdn = slice(
        "ns",
        "dual-fqdn",
        "dual",
        "FQDN",
        ports,
        json!([ready("db.example.com", NODE)]),
    );
    let state = state(&[svc], &[v4_eps, v6_eps, fqdn]);

    let port = only_port(&state);
    assert_eq!(port.families, vec![Family::Ipv4, Family::Ipv6]);
    assert!(port.in_family(Family::Ipv6));
    assert_eq!(family(port, Family::Ipv4).cluster, addrs(&["10.1.0.1:8080"]));
    assert_eq!(family(port, Family::Ipv6).cluster, addrs(&["[fd00:1::1]:8080"]));
    assert!(
        state.problems.is_empty(),
        "FQDN slices are ignored quietly: {:#?}",
        state.problems
    );
}

#[test]
fn single_stack_ipv6_from_cluster_ip_alone() {
    let svc = service(
        "ns",
        "v6",
        json!({"type": "NodePort", "clusterIP": "fd00:96::8", "ports": [{"port": 80, "nodePort": 30008}]}),
    );
    let v4_eps = v4_slice("ns", "v6-a", "v6", json!([ready("10.1.0.1", NODE)]));
    let state = state(&[svc], &[v4_eps]);
    let port = only_port(&state);
    assert_eq!(port.families, vec![Family::Ipv6]);
    assert!(
        port.endpoints(Family::Ipv4).is_none(),
        "IPv4 slices do not apply to an IPv6-only Service"
    );
    assert!(family(port, Family::Ipv6).listed.is_empty());
}

#[test]
fn addresses_of_the_wrong_family_are_ignored_and_reported() {
    let svc = nodeport_service("ns", "web", 30080);
    let eps = v4_slice(
        "ns",
        "web-a",
        "web",
        json!([ready("fd00::1", NODE), ready("10.1.0.1", NODE)]),
    );
    let state = state(&[svc], &[eps]);
    assert_eq!(v4(only_port(&state)).listed, addrs(&["10.1.0.1:8080"]));
    assert_eq!(state.problems.len(), 1);
    assert_eq!(state.problems[0].object, "EndpointSlice ns/web-a");
}

// --- EndpointSlice reading ------------------------------------------------------

#[test]
fn slice_ports_match_by_name_and_protocol() {
    let svc = service(
        "ns",
        "app",
        json!({"type": "NodePort", "clusterIP": "10.96.0.4",
               "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080},
                         {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053}]}),
    );
    let eps = slice(
        "ns",
        "app-a",
        "app",
        "IPv4",
        json!([{"name": "http", "port": 8080, "protocol": "TCP"},
               {"name": "dns", "port": 5353, "protocol": "UDP"},
               {"name": "http", "port": 9999, "protocol": "UDP"},
               {"name": "other", "port": 7777, "protocol": "TCP"}]),
        json!([ready("10.1.0.1", NODE)]),
    );
    let state = state(&[svc], &[eps]);
    let by_name = |name: &str| {
        state
            .ports
            .iter()
            .find(|p| p.service.port_name == name)
            .expect(name)
    };
    assert_eq!(v4(by_name("http")).listed, addrs(&["10.1.0.1:8080"]));
    assert_eq!(v4(by_name("dns")).listed, addrs(&["10.1.0.1:5353"]));
}

#[test]
fn slice_port_without_name_or_protocol_is_the_unnamed_tcp_port() {
    // The API server defaults a missing name to "" and a missing protocol to TCP.
    let svc = nodeport_service("ns", "web", 30080);
    let eps = slice(
        "ns",
        "web-a",
        "web",
        "IPv4",
        json!([{"port": 8080}]),
        json!([ready("10.1.0.1", NODE)]),
    );
    assert_eq!(
        v4(only_port(&state(&[svc], &[eps]))).listed,
        addrs(&["10.1.0.1:8080"])
    );
}

#[test]
fn slice_ports_without_a_number_are_ignored() {
    let svc = nodeport_service("ns", "web", 30080);
    let eps = slice(
        "ns",
        "web-a",
        "web",
        "IPv4",
        json!([{"name": "", "protocol": "TCP"}, {"name": "", "port": 0, "protocol": "TCP"}]),
        json!([ready("10.1.0.1", NODE)]),
    );
    let state = state(&[svc], &[eps]);
    let v4 = v4(only_port(&state));
    assert!(v4.listed.is_empty() && !v4.has_endpoints);
}

#[test]
fn only_the_first_address_of_an_endpoint_counts() {
    let svc = nodeport_service("ns", "web", 30080);
    let eps = v4_slice(
        "ns",
        "web-a",
        "web",
        json!([{"addresses": ["10.1.0.1", "10.1.0.2"], "conditions": {"ready": true}}]),
    );
    assert_eq!(
        v4(only_port(&state(&[svc], &[eps]))).listed,
        addrs(&["10.1.0.1:8080"])
    );
}

#[test]
fn slices_need_the_service_name_label_and_no_opt_out_label() {
    let svc = nodeport_service("ns", "web", 30080);
    let mut unlabelled = v4_slice("ns", "web-a", "web", json!([ready("10.1.0.1", NODE)]));
    unlabelled.metadata.labels = None;
    let mut opted_out = v4_slice("ns", "web-b", "web", json!([ready("10.1.0.2", NODE)]));
    opted_out
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("service.kubernetes.io/service-proxy-name".into(), "other".into());
    let other_service = v4_slice("ns", "api-a", "api", json!([ready("10.1.0.3", NODE)]));
    let state = state(&[svc], &[unlabelled, opted_out, other_service]);
    assert!(v4(only_port(&state)).listed.is_empty());
}

#[test]
fn missing_conditions_mean_ready_and_serving_and_not_terminating() {
    let svc = nodeport_service("ns", "web", 30080);
    let eps = v4_slice(
        "ns",
        "web-a",
        "web",
        json!([{"addresses": ["10.1.0.1"]}, endpoint("10.1.0.2", "n", None, None, None)]),
    );
    let v4 = v4(only_port(&state(&[svc], &[eps]))).clone();
    assert_eq!(v4.cluster, addrs(&["10.1.0.1:8080", "10.1.0.2:8080"]));
}

#[test]
fn endpoints_slices_list_null_endpoints_as_kubectl_prints_empty_slices() {
    let svc = nodeport_service("ns", "web", 30080);
    let eps = v4_slice("ns", "web-a", "web", serde_json::Value::Null);
    let state = state(&[svc], &[eps]);
    let v4 = v4(only_port(&state));
    assert!(v4.listed.is_empty() && !v4.has_endpoints && !v4.has_external_endpoints);
}

// --- Cluster set, terminating fallback, has_endpoints -----------------------------

#[test]
fn not_ready_endpoints_are_listed_but_not_used() {
    let svc = nodeport_service("ns", "web", 30080);
    let eps = v4_slice(
        "ns",
        "web-a",
        "web",
        json!([
            ready("10.1.0.1", "n"),
            endpoint("10.1.0.2", "n", Some(false), Some(false), Some(false))
        ]),
    );
    let v4 = v4(only_port(&state(&[svc], &[eps]))).clone();
    assert_eq!(v4.listed, addrs(&["10.1.0.1:8080", "10.1.0.2:8080"]));
    assert_eq!(v4.cluster, addrs(&["10.1.0.1:8080"]));
}

#[test]
fn terminating_endpoints_serve_only_when_none_is_ready() {
    let svc = nodeport_service("ns", "web", 30080);
    let terminating = |ip| endpoint(ip, "n", Some(false), Some(true), Some(true));
    let draining = endpoint("10.1.0.3", "n", Some(false), Some(false), Some(true));

    let with_ready = v4_slice(
        "ns",
        "web-a",
        "web",
        json!([ready("10.1.0.1", "n"), terminating("10.1.0.2")]),
    );
    let state1 = state(std::slice::from_ref(&svc), &[with_ready]);
    assert_eq!(v4(only_port(&state1)).cluster, addrs(&["10.1.0.1:8080"]));

    let without_ready = v4_slice("ns", "web-a", "web", json!([terminating("10.1.0.2"), draining]));
    let state2 = state(&[svc], &[without_ready]);
    let v4 = v4(only_port(&state2));
    assert_eq!(
        v4.cluster,
        addrs(&["10.1.0.2:8080"]),
        "serving-and-terminating fallback"
    );
    assert!(v4.has_endpoints);
}

#[test]
fn service_without_usable_endpoints_has_no_endpoints() {
    // kube-proxy writes only the filter REJECT for this nodePort, no nat rule.
    let svc = nodeport_service("ns", "web", 30080);
    let eps = v4_slice(
        "ns",
        "web-a",
        "web",
        json!([
            endpoint("10.1.0.1", NODE, Some(false), Some(false), Some(false)),
            endpoint("10.1.0.2", NODE, Some(false), Some(false), Some(true))
        ]),
    );
    let state = state(&[svc], &[eps]);
    let v4 = v4(only_port(&state));
    assert!(v4.cluster.is_empty() && v4.local.is_empty());
    assert!(!v4.has_endpoints && !v4.has_external_endpoints);
    assert_eq!(v4.listed.len(), 2);
}

#[test]
fn service_without_slices_has_no_endpoints() {
    let state = state(&[nodeport_service("ns", "web", 30080)], &[]);
    let v4 = v4(only_port(&state));
    assert!(v4.listed.is_empty() && !v4.has_endpoints);
}

// --- Traffic policies -------------------------------------------------------------

fn local_policy_service(external: &str, internal: &str) -> Service {
    service(
        "ns",
        "web",
        json!({"type": "LoadBalancer", "clusterIP": "10.96.0.10", "externalTrafficPolicy": external,
               "internalTrafficPolicy": internal, "healthCheckNodePort": 32100,
               "ports": [{"port": 80, "nodePort": 30080}]}),
    )
}

#[test]
fn external_local_policy_with_local_endpoints() {
    let svc = local_policy_service("Local", "Cluster");
    let eps = v4_slice(
        "ns",
        "web-a",
        "web",
        json!([ready("10.1.0.1", NODE), ready("10.1.0.2", "node-b")]),
    );
    let state = state(&[svc], &[eps]);
    let port = only_port(&state);
    assert!(port.external_policy_local && !port.internal_policy_local);
    assert_eq!(port.health_check_node_port, Some(32100));
    assert_eq!(state.health_check_ports(), [32100].into());
    let v4 = v4(port);
    assert_eq!(v4.local, addrs(&["10.1.0.1:8080"]));
    // The Cluster set still exists: pod and host traffic short-circuits to it.
    assert_eq!(v4.cluster, addrs(&["10.1.0.1:8080", "10.1.0.2:8080"]));
    assert_eq!(v4.reachable(), v4.cluster);
    assert!(v4.has_endpoints && v4.has_external_endpoints);
}

#[test]
fn external_local_policy_without_local_endpoints() {
    // kube-proxy writes the nat rule (short-circuit paths) and a filter DROP.
    let svc = local_policy_service("Local", "Cluster");
    let eps = v4_slice("ns", "web-a", "web", json!([ready("10.1.0.2", "node-b")]));
    let state = state(&[svc], &[eps]);
    let v4 = v4(only_port(&state));
    assert!(v4.local.is_empty());
    assert_eq!(v4.cluster, addrs(&["10.1.0.2:8080"]));
    assert!(v4.has_endpoints, "remote endpoints exist");
    assert!(
        !v4.has_external_endpoints,
        "but none for external traffic on this node"
    );
}

#[test]
fn local_set_falls_back_to_local_serving_terminating_endpoints() {
    let svc = local_policy_service("Local", "Cluster");
    let eps = v4_slice(
        "ns",
        "web-a",
        "web",
        json!([
            endpoint("10.1.0.1", NODE, Some(false), Some(true), Some(true)),
            ready("10.1.0.2", "node-b")
        ]),
    );
    let state = state(&[svc], &[eps]);
    let v4 = v4(only_port(&state));
    assert_eq!(v4.local, addrs(&["10.1.0.1:8080"]));
    assert_eq!(
        v4.cluster,
        addrs(&["10.1.0.2:8080"]),
        "a ready endpoint elsewhere wins for Cluster"
    );
    assert_eq!(v4.reachable(), addrs(&["10.1.0.1:8080", "10.1.0.2:8080"]));
    assert!(v4.has_external_endpoints);
}

#[test]
fn internal_local_policy_still_uses_cluster_endpoints_for_node_ports() {
    // A nodePort makes the port externally accessible, so UsesClusterEndpoints holds.
    let svc = local_policy_service("Cluster", "Local");
    let eps = v4_slice(
        "ns",
        "web-a",
        "web",
        json!([ready("10.1.0.1", NODE), ready("10.1.0.2", "node-b")]),
    );
    let state = state(&[svc], &[eps]);
    let port = only_port(&state);
    assert!(port.internal_policy_local && !port.external_policy_local);
    assert_eq!(
        port.health_check_node_port, None,
        "only eTP=Local load balancers have one"
    );
    let v4 = v4(port);
    assert_eq!(v4.cluster, addrs(&["10.1.0.1:8080", "10.1.0.2:8080"]));
    assert_eq!(v4.local, addrs(&["10.1.0.1:8080"]));
    assert!(v4.has_external_endpoints);
}

#[test]
fn external_policy_local_needs_an_externally_accessible_type() {
    let svc = service(
        "ns",
        "web",
        json!({"type": "NodePort", "clusterIP": "10.96.0.10", "externalTrafficPolicy": "Local",
               "healthCheckNodePort": 32100, "ports": [{"port": 80, "nodePort": 30080}]}),
    );
    let port = only_port(&state(&[svc], &[])).clone();
    assert!(port.external_policy_local);
    assert_eq!(
        port.health_check_node_port, None,
        "NodePort Services get no health check"
    );
}

#[test]
fn local_policy_without_a_node_is_uncertain() {
    let svc = local_policy_service("Local", "Cluster");
    let eps = v4_slice("ns", "web-a", "web", json!([ready("10.1.0.1", NODE)]));
    let state = desired_state(std::slice::from_ref(&svc), std::slice::from_ref(&eps), None, None);
    let port = only_port(&state);
    assert!(port.uncertain);
    assert!(v4(port).local.is_empty(), "nothing is local without a node");

    let cluster_policy = desired_state(&[nodeport_service("ns", "web", 30080)], &[eps], None, None);
    assert!(
        !only_port(&cluster_policy).uncertain,
        "Cluster policy does not need the node"
    );
}

// --- Duplicates -------------------------------------------------------------------

#[test]
fn duplicate_endpoint_prefers_the_non_terminating_copy() {
    let svc = nodeport_service("ns", "web", 30080);
    let old = endpoint("10.1.0.1", "node-b", Some(false), Some(true), Some(true));
    let new = ready("10.1.0.1", NODE);
    // Both slice orders: the answer must not depend on which slice comes first.
    for (first, second) in [(old.clone(), new.clone()), (new, old)] {
        let a = v4_slice("ns", "web-a", "web", json!([first]));
        let b = v4_slice("ns", "web-b", "web", json!([second]));
        let state = state(std::slice::from_ref(&svc), &[a, b]);
        let port = only_port(&state);
        assert!(!port.uncertain);
        assert_eq!(v4(port).listed, addrs(&["10.1.0.1:8080"]));
        assert_eq!(v4(port).cluster, addrs(&["10.1.0.1:8080"]));
    }
}

#[test]
fn conflicting_non_terminating_duplicates_make_the_port_uncertain() {
    let svc = nodeport_service("ns", "web", 30080);
    let a = v4_slice("ns", "web-a", "web", json!([ready("10.1.0.1", NODE)]));
    let b = v4_slice(
        "ns",
        "web-b",
        "web",
        json!([endpoint("10.1.0.1", NODE, Some(false), Some(false), Some(false))]),
    );
    let state = state(&[svc], &[a, b]);
    assert!(only_port(&state).uncertain);
    assert!(
        state
            .problems
            .iter()
            .any(|p| p.object == "Service ns/web" && p.problem.contains("10.1.0.1:8080"))
    );
}

#[test]
fn identical_duplicates_are_harmless() {
    let svc = nodeport_service("ns", "web", 30080);
    let a = v4_slice("ns", "web-a", "web", json!([ready("10.1.0.1", NODE)]));
    let b = v4_slice("ns", "web-b", "web", json!([ready("10.1.0.1", NODE)]));
    let state = state(&[svc], &[a, b]);
    assert!(!only_port(&state).uncertain);
    assert_eq!(v4(only_port(&state)).cluster.len(), 1);
}

#[test]
fn service_listed_twice_uses_the_later_copy() {
    let state = state(
        &[
            nodeport_service("ns", "web", 30080),
            nodeport_service("ns", "web", 30090),
        ],
        &[],
    );
    assert_eq!(only_port(&state).node_port, 30090);
    assert_eq!(state.problems.len(), 1);
}

// --- Topology ---------------------------------------------------------------------

fn hinted(ip: &str, node: &str, zone: &str) -> serde_json::Value {
    let mut e = ready(ip, node);
    e["zone"] = json!(zone);
    e["hints"] = json!({"forZones": [{"name": zone}]});
    e
}

fn zoned_state(endpoints: serde_json::Value, zone: Option<&str>) -> DesiredState {
    let svc = nodeport_service("ns", "web", 30080);
    desired_state(
        &[svc],
        &[v4_slice("ns", "web-a", "web", endpoints)],
        Some(NODE),
        zone,
    )
}

#[test]
fn zone_hints_narrow_the_cluster_set_to_this_zone() {
    let eps = json!([
        hinted("10.1.0.1", NODE, "zone-a"),
        hinted("10.1.0.2", "node-b", "zone-b")
    ]);
    let state = zoned_state(eps, Some("zone-a"));
    let v4 = v4(only_port(&state));
    assert_eq!(v4.cluster, addrs(&["10.1.0.1:8080"]));
    assert_eq!(v4.listed.len(), 2);
    assert!(!v4.cluster_uncertain);
    assert_eq!(state.node_zone.as_deref(), Some("zone-a"));
}

#[test]
fn zone_hints_are_ignored_when_one_ready_endpoint_lacks_them() {
    let eps = json!([hinted("10.1.0.1", NODE, "zone-a"), ready("10.1.0.2", "node-b")]);
    let v4 = v4(only_port(&zoned_state(eps, Some("zone-a")))).clone();
    assert_eq!(v4.cluster.len(), 2);
    assert!(!v4.cluster_uncertain);
}

#[test]
fn zone_hints_are_ignored_when_none_names_this_zone() {
    let eps = json!([
        hinted("10.1.0.1", NODE, "zone-b"),
        hinted("10.1.0.2", "node-b", "zone-c")
    ]);
    let v4 = v4(only_port(&zoned_state(eps, Some("zone-a")))).clone();
    assert_eq!(v4.cluster.len(), 2);
    assert!(!v4.cluster_uncertain);
}

#[test]
fn zone_hints_with_an_unknown_zone_use_all_ready_endpoints_and_say_so() {
    let eps = json!([
        hinted("10.1.0.1", NODE, "zone-a"),
        hinted("10.1.0.2", "node-b", "zone-b")
    ]);
    let v4 = v4(only_port(&zoned_state(eps, None))).clone();
    assert_eq!(v4.cluster.len(), 2);
    assert!(v4.cluster_uncertain);
}

#[test]
fn terminating_fallback_ignores_topology() {
    let mut a = hinted("10.1.0.1", NODE, "zone-a");
    a["conditions"] = json!({"ready": false, "serving": true, "terminating": true});
    let mut b = hinted("10.1.0.2", "node-b", "zone-b");
    b["conditions"] = json!({"ready": false, "serving": true, "terminating": true});
    let v4 = v4(only_port(&zoned_state(json!([a, b]), Some("zone-a")))).clone();
    assert_eq!(v4.cluster.len(), 2);
}

fn node_hinted(ip: &str, node: &str, zone: &str) -> serde_json::Value {
    let mut e = hinted(ip, node, zone);
    e["hints"]["forNodes"] = json!([{"name": node}]);
    e
}

#[test]
fn node_hints_narrow_the_cluster_set_to_this_node() {
    // Both endpoints share one zone, so the zone-only answer (feature gate off)
    // would keep both: the result depends on the gate, and says so.
    let eps = json!([
        node_hinted("10.1.0.1", NODE, "zone-a"),
        node_hinted("10.1.0.2", "node-b", "zone-a")
    ]);
    let v4 = v4(only_port(&zoned_state(eps, Some("zone-a")))).clone();
    assert_eq!(v4.cluster, addrs(&["10.1.0.1:8080"]));
    assert!(v4.cluster_uncertain);
}

#[test]
fn node_hints_agreeing_with_zone_hints_are_certain() {
    let eps = json!([
        node_hinted("10.1.0.1", NODE, "zone-a"),
        node_hinted("10.1.0.2", "node-b", "zone-b")
    ]);
    let v4 = v4(only_port(&zoned_state(eps, Some("zone-a")))).clone();
    assert_eq!(v4.cluster, addrs(&["10.1.0.1:8080"]));
    assert!(!v4.cluster_uncertain);
}

#[test]
fn node_hints_without_a_node_name_are_uncertain() {
    let eps = json!([
        node_hinted("10.1.0.1", NODE, "zone-a"),
        node_hinted("10.1.0.2", "node-b", "zone-b")
    ]);
    let svc = nodeport_service("ns", "web", 30080);
    let state = desired_state(
        &[svc],
        &[v4_slice("ns", "web-a", "web", eps)],
        None,
        Some("zone-a"),
    );
    assert!(v4(only_port(&state)).cluster_uncertain);
}

// --- Timestamps, order, unreadable slices ----------------------------------------

#[test]
fn last_change_is_the_newest_service_or_slice_time() {
    let svc = nodeport_service("ns", "web", 30080);
    let mut a = v4_slice("ns", "web-a", "web", json!([ready("10.1.0.1", NODE)]));
    a.metadata.annotations = Some(
        [(
            "endpoints.kubernetes.io/last-change-trigger-time".to_string(),
            "2024-05-02T08:30:00Z".to_string(),
        )]
        .into(),
    );
    let b: EndpointSlice = {
        let mut json = slice_json("ns", "web-b", "web", "IPv4", json!([]), json!([]));
        json["metadata"]["creationTimestamp"] = json!("2024-05-01T12:00:00Z");
        serde_json::from_value(json).unwrap()
    };
    let state = state(std::slice::from_ref(&svc), &[a, b]);
    assert_eq!(
        only_port(&state).last_change.map(|t| t.to_string()).as_deref(),
        Some("2024-05-02T08:30:00Z")
    );

    let alone = desired_state(&[svc], &[], Some(NODE), None);
    assert_eq!(
        only_port(&alone).last_change.map(|t| t.to_string()).as_deref(),
        Some(CREATED)
    );
}

#[test]
fn ports_come_out_in_a_stable_order() {
    let two_ports = |ns: &str, name: &str, base: u16| {
        service(
            ns,
            name,
            json!({"type": "NodePort", "clusterIP": "10.96.0.10",
                   "ports": [{"name": "z", "port": 2, "nodePort": base}, {"name": "a", "port": 1, "nodePort": base + 1}]}),
        )
    };
    let services = [
        two_ports("b", "x", 30010),
        two_ports("a", "y", 30020),
        two_ports("a", "x", 30030),
    ];
    let state = state(&services, &[]);
    let order: Vec<String> = state.ports.iter().map(|p| p.service.kube_proxy_name()).collect();
    assert_eq!(order, ["a/x:a", "a/x:z", "a/y:a", "a/y:z", "b/x:a", "b/x:z"]);
}

#[test]
fn an_unreadable_slice_makes_only_its_service_uncertain() {
    let mut builder = DesiredBuilder::new(Some(NODE));
    builder.add_service(&nodeport_service("ns", "web", 30080));
    builder.add_service(&nodeport_service("ns", "api", 30081));
    builder.unreadable_slice(
        "EndpointSlice ns/web-x",
        "cannot be read",
        Some("ns"),
        Some("web"),
    );
    let state = builder.finish(None);
    let uncertain: Vec<_> = state
        .ports
        .iter()
        .map(|p| (p.service.name.as_str(), p.uncertain))
        .collect();
    assert_eq!(uncertain, [("api", false), ("web", true)]);
    assert!(!state.uncertain);
    assert_eq!(state.problems.len(), 1);
}

#[test]
fn slice_without_address_type_makes_its_service_uncertain() {
    let svc = nodeport_service("ns", "web", 30080);
    let eps = slice("ns", "web-a", "web", "", json!([]), json!([]));
    let state = state(&[svc], &[eps]);
    assert!(only_port(&state).uncertain);
    assert_eq!(state.problems[0].object, "EndpointSlice ns/web-a");
}
