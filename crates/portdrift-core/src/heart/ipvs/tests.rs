//! The check on tables built line by line as kube-proxy's IPVS proxier programs them,
//! against desired states built by the real builder from API objects.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};

use super::*;
use crate::heart::desired::tests::{endpoint, ready, service, slice, v4_slice};
use crate::heart::desired::{DesiredState, desired_state};
use crate::heart::finding::{Finding, Kind, Severity};

const NODE: &str = "node-a";
const ORIGIN: &str = "/proc/net/ip_vs";
/// The node's NodePort addresses: eth0 and flannel.1, as kube-proxy picks them.
const NODE_ADDRS: [&str; 2] = ["10.0.1.21", "10.244.1.0"];

/// A NodePort Service `default/name` with one unnamed TCP port 80 → 8080.
fn nodeport(name: &str, cluster_ip: &str, node_port: u16, extra: Value) -> Service {
    let mut spec = json!({
        "type": "NodePort",
        "clusterIP": cluster_ip,
        "clusterIPs": [cluster_ip],
        "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": node_port}],
    });
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
        spec.extend(extra);
    }
    service("default", name, spec)
}

/// The Service's slice: each `(ip, node)` ready, on port 8080.
fn slice_of(name: &str, endpoints: &[(&str, &str)]) -> EndpointSlice {
    let eps: Vec<Value> = endpoints.iter().map(|(ip, node)| ready(ip, node)).collect();
    v4_slice("default", &format!("{name}-x1"), name, Value::Array(eps))
}

fn state(services: &[Service], slices: &[EndpointSlice]) -> DesiredState {
    desired_state(services, slices, Some(NODE), None)
}

/// Three NodePort Services: web (30080, one endpoint here and one on node-b), api
/// (30081, here) and admin (30082, on node-b).
fn cluster() -> (Vec<Service>, Vec<EndpointSlice>) {
    (
        vec![
            nodeport("web", "10.96.0.20", 30080, json!({})),
            nodeport("api", "10.96.0.21", 30081, json!({})),
            nodeport("admin", "10.96.0.22", 30082, json!({})),
        ],
        vec![
            slice_of("web", &[("10.244.1.5", "node-a"), ("10.244.2.7", "node-b")]),
            slice_of("api", &[("10.244.1.6", "node-a")]),
            slice_of("admin", &[("10.244.2.8", "node-b")]),
        ],
    )
}

/// A table written line by line (after the kernel's three header lines).
struct Table {
    table: IpvsTable,
    line: u32,
}

impl Table {
    fn new() -> Table {
        Table {
            table: IpvsTable::default(),
            line: 3,
        }
    }

    /// A TCP virtual server with real servers `(ip:port, weight)`.
    fn vs(mut self, addr: &str, reals: &[(&str, u32)]) -> Table {
        self.line += 1;
        let mut vs = VirtualServer {
            addr: VirtualAddr::Socket {
                protocol: Protocol::Tcp,
                addr: addr.parse().expect("address"),
            },
            scheduler: "rr".to_string(),
            persistent: None,
            flags: String::new(),
            reals: Vec::new(),
            line: self.line,
        };
        for (real, weight) in reals {
            self.line += 1;
            vs.reals.push(RealServer {
                addr: real.parse().expect("address"),
                forward: Forward::Masq,
                weight: *weight,
                active: 0,
                inactive: 0,
                line: self.line,
            });
        }
        self.table.services.push(vs);
        self
    }

    /// The same virtual server on every node address.
    fn on_node(mut self, port: u16, reals: &[(&str, u32)]) -> Table {
        for ip in NODE_ADDRS {
            self = self.vs(&format!("{ip}:{port}"), reals);
        }
        self
    }
}

/// What kube-proxy programs for [`cluster`]: each nodePort on both node addresses, and
/// the ClusterIPs.
fn clean() -> Table {
    let web = [("10.244.1.5:8080", 1), ("10.244.2.7:8080", 1)];
    Table::new()
        .on_node(30080, &web)
        .on_node(30081, &[("10.244.1.6:8080", 1)])
        .on_node(30082, &[("10.244.2.8:8080", 1)])
        .vs("10.96.0.20:80", &web)
        .vs("10.96.0.21:80", &[("10.244.1.6:8080", 1)])
        .vs("10.96.0.22:80", &[("10.244.2.8:8080", 1)])
}

fn check(state: &DesiredState, table: &Table) -> Vec<Finding> {
    ipvs_findings(state, &table.table, ORIGIN, 30000..=32767)
}

fn kinds(findings: &[Finding]) -> Vec<(Kind, Severity, Option<u16>, Option<&str>)> {
    findings
        .iter()
        .map(|f| (f.kind, f.severity, f.port, f.target.as_deref()))
        .collect()
}

#[test]
fn a_node_as_kube_proxy_programs_it_is_clean() {
    let (services, slices) = cluster();
    let state = state(&services, &slices);
    assert_eq!(check(&state, &clean()), []);
    let addrs: Vec<IpAddr> = nodeport_addresses(&state, &clean().table, &(30000..=32767))
        .into_iter()
        .collect();
    assert_eq!(addrs, NODE_ADDRS.map(|a| a.parse::<IpAddr>().expect("ip")));
}

#[test]
fn a_real_server_no_slice_lists_is_a_stale_endpoint() {
    let (services, slices) = cluster();
    let web = [
        ("10.244.1.5:8080", 1),
        ("10.244.2.7:8080", 1),
        ("10.244.9.9:8080", 1),
    ];
    let table = Table::new()
        .on_node(30080, &web)
        .on_node(30081, &[("10.244.1.6:8080", 1)])
        .on_node(30082, &[("10.244.2.8:8080", 1)]);
    let findings = check(&state(&services, &slices), &table);
    assert_eq!(
        kinds(&findings),
        [(
            Kind::StaleEndpoint,
            Severity::Critical,
            Some(30080),
            Some("10.244.9.9:8080")
        )]
    );
    let f = &findings[0];
    assert_eq!(
        (f.service.as_deref(), f.service_port.as_deref()),
        (Some("default/web"), Some(""))
    );
    assert_eq!(
        (f.protocol, f.family, f.backend),
        (Some(Protocol::Tcp), Some(Family::Ipv4), None)
    );
    assert_eq!(
        f.rule.as_deref(),
        Some("TCP  10.0.1.21:30080 rr -> 10.244.9.9:8080 Masq 1 0 0")
    );
    assert_eq!(
        f.rule_source.as_ref().map(ToString::to_string).as_deref(),
        Some("/proc/net/ip_vs:7")
    );
    assert_eq!(
        f.evidence,
        [
            "TCP  10.0.1.21:30080 rr -> 10.244.9.9:8080 Masq 1 0 0 (/proc/net/ip_vs:7)",
            "TCP  10.244.1.0:30080 rr -> 10.244.9.9:8080 Masq 1 0 0 (/proc/net/ip_vs:11)",
        ]
    );
    assert!(f.message.contains("never edits IPVS"), "{}", f.message);
}

#[test]
fn a_real_server_draining_at_weight_zero_is_not_stale() {
    let (services, slices) = cluster();
    // A deleted pod's real server, and a terminating one the slice still lists.
    let mut slices = slices;
    slices[0] = v4_slice(
        "default",
        "web-x1",
        "web",
        json!([
            ready("10.244.1.5", "node-a"),
            ready("10.244.2.7", "node-b"),
            endpoint("10.244.2.3", "node-b", Some(false), Some(true), Some(true)),
        ]),
    );
    let web = [
        ("10.244.1.5:8080", 1),
        ("10.244.2.7:8080", 1),
        ("10.244.9.9:8080", 0),
        ("10.244.2.3:8080", 0),
    ];
    let table = Table::new()
        .on_node(30080, &web)
        .on_node(30081, &[("10.244.1.6:8080", 1)])
        .on_node(30082, &[("10.244.2.8:8080", 1)]);
    assert_eq!(check(&state(&services, &slices), &table), []);
}

#[test]
fn a_ready_endpoint_without_a_serving_real_server_is_missing() {
    let (services, slices) = cluster();
    let table = Table::new()
        .vs("10.0.1.21:30080", &[("10.244.1.5:8080", 1)])
        .vs(
            "10.244.1.0:30080",
            &[("10.244.1.5:8080", 1), ("10.244.2.7:8080", 0)],
        )
        .on_node(30081, &[("10.244.1.6:8080", 1)])
        .on_node(30082, &[("10.244.2.8:8080", 1)]);
    let findings = check(&state(&services, &slices), &table);
    assert_eq!(
        kinds(&findings),
        [(
            Kind::MissingEndpoint,
            Severity::Critical,
            Some(30080),
            Some("10.244.2.7:8080")
        )]
    );
    let f = &findings[0];
    assert!(
        f.message.contains("on 10.0.1.21, 10.244.1.0 (at weight 0)"),
        "{}",
        f.message
    );
    assert_eq!(f.rule.as_deref(), Some("TCP  10.0.1.21:30080 rr"));
    assert_eq!(
        f.rule_source.as_ref().map(ToString::to_string).as_deref(),
        Some("/proc/net/ip_vs:4")
    );
    assert_eq!(f.evidence.len(), 2);
    assert!(
        f.evidence[1].ends_with("(/proc/net/ip_vs:8): weight 0"),
        "{:?}",
        f.evidence
    );
}

#[test]
fn a_node_address_without_one_nodeport_is_a_missing_rule() {
    let (services, slices) = cluster();
    let table = Table::new()
        .on_node(30080, &[("10.244.1.5:8080", 1), ("10.244.2.7:8080", 1)])
        .vs("10.0.1.21:30081", &[("10.244.1.6:8080", 1)])
        .on_node(30082, &[("10.244.2.8:8080", 1)]);
    let findings = check(&state(&services, &slices), &table);
    assert_eq!(
        kinds(&findings),
        [(Kind::MissingRule, Severity::Critical, Some(30081), None)]
    );
    let f = &findings[0];
    assert_eq!(f.service.as_deref(), Some("default/api"));
    assert!(f.message.contains("on 10.244.1.0,"), "{}", f.message);
    assert!(f.message.contains("10.244.1.0:30081"), "{}", f.message);
    assert_eq!(
        (
            f.rule.as_deref(),
            f.rule_source.as_ref().map(ToString::to_string).as_deref()
        ),
        (None, None)
    );
    assert_eq!(
        f.evidence,
        [
            "present on another address: TCP  10.0.1.21:30081 rr (/proc/net/ip_vs:10)",
            "this node's ipv4 NodePort addresses (those carrying the cluster's nodePorts): 10.0.1.21, 10.244.1.0",
        ]
    );
    // Without endpoints the nodePort needs no virtual server.
    let (services, mut slices) = cluster();
    slices.remove(1);
    let table = Table::new()
        .on_node(30080, &[("10.244.1.5:8080", 1), ("10.244.2.7:8080", 1)])
        .vs("10.0.1.21:30081", &[])
        .on_node(30082, &[("10.244.2.8:8080", 1)]);
    assert_eq!(check(&state(&services, &slices), &table), []);
}

#[test]
fn a_virtual_server_of_a_deleted_service_is_a_stale_nodeport() {
    let (services, slices) = cluster();
    let table = clean().on_node(30999, &[("10.244.3.3:8080", 1)]);
    let findings = check(&state(&services, &slices), &table);
    assert_eq!(
        kinds(&findings),
        [(Kind::StaleNodeport, Severity::Critical, Some(30999), None)]
    );
    let f = &findings[0];
    assert_eq!((f.service.as_deref(), f.family), (None, Some(Family::Ipv4)));
    assert!(
        f.message
            .starts_with("No Service owns tcp/30999 in ipv4, but IPVS still has NodePort virtual servers for it on 10.0.1.21, 10.244.1.0, sending new connections to 2 real server(s);"),
        "{}",
        f.message
    );
    assert_eq!(f.rule.as_deref(), Some("TCP  10.0.1.21:30999 rr"));
    assert_eq!(
        f.rule_source.as_ref().map(ToString::to_string).as_deref(),
        Some("/proc/net/ip_vs:25")
    );
    assert_eq!(f.evidence.len(), 4);
    // Forwarding nowhere, it is a leftover to clean up, not misrouted traffic.
    let empty = clean().on_node(30999, &[("10.244.3.3:8080", 0)]);
    assert_eq!(
        kinds(&check(&state(&services, &slices), &empty)),
        [(Kind::StaleNodeport, Severity::Warning, Some(30999), None)]
    );
    // A Service list that may be partial, a port held by a Service kube-proxy skips, or
    // a cluster state with unpinned problems: not judged.
    let mut partial = state(&services, &slices);
    partial.services_partial = true;
    assert_eq!(check(&partial, &table), []);
    let mut held = state(&services, &slices);
    held.other_allocated.insert((Protocol::Tcp, 30999));
    assert_eq!(check(&held, &table), []);
    let mut uncertain = state(&services, &slices);
    uncertain.uncertain = true;
    assert_eq!(check(&uncertain, &table), []);
    // A port outside the NodePort range is no NodePort.
    let outside = clean().on_node(8443, &[("10.244.3.3:8080", 1)]);
    assert_eq!(check(&state(&services, &slices), &outside), []);
}

#[test]
fn external_traffic_policy_local_wants_the_nodes_own_endpoints() {
    let (mut services, mut slices) = cluster();
    services.push(nodeport(
        "local",
        "10.96.0.23",
        30085,
        json!({"externalTrafficPolicy": "Local"}),
    ));
    slices.push(slice_of(
        "local",
        &[("10.244.1.9", "node-a"), ("10.244.2.9", "node-b")],
    ));
    let state = state(&services, &slices);
    // kube-proxy's NodePort real servers: the local endpoint only.
    let programmed = clean().on_node(30085, &[("10.244.1.9:8080", 1)]);
    assert_eq!(check(&state, &programmed), []);
    // A remote endpoint the slice lists is not stale; the local one missing is.
    let remote_only = clean().on_node(30085, &[("10.244.2.9:8080", 1)]);
    let findings = check(&state, &remote_only);
    assert_eq!(
        kinds(&findings),
        [(
            Kind::MissingEndpoint,
            Severity::Critical,
            Some(30085),
            Some("10.244.1.9:8080")
        )]
    );
    assert!(
        findings[0]
            .message
            .contains("default/local on this node (externalTrafficPolicy Local)"),
        "{}",
        findings[0].message
    );
}

#[test]
fn a_clusterip_whose_port_is_its_nodeport_is_no_node_address() {
    let (mut services, mut slices) = cluster();
    services.push(service(
        "default",
        "same",
        json!({"type": "NodePort", "clusterIP": "10.96.0.30", "clusterIPs": ["10.96.0.30"],
               "ports": [{"port": 30090, "targetPort": 8080, "nodePort": 30090}]}),
    ));
    slices.push(slice_of("same", &[("10.244.1.7", "node-a")]));
    let state = state(&services, &slices);
    let same = [("10.244.1.7:8080", 1)];
    let table = clean().on_node(30090, &same).vs("10.96.0.30:30090", &same);
    assert_eq!(check(&state, &table), []);
    assert!(
        !nodeport_addresses(&state, &table.table, &(30000..=32767))
            .contains(&"10.96.0.30".parse().expect("ip"))
    );
}

#[test]
fn with_one_service_a_node_address_carries_all_its_nodeports() {
    let svc = service(
        "default",
        "web",
        json!({"type": "NodePort", "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
               "ports": [{"name": "http", "port": 30080, "targetPort": 8080, "nodePort": 30080},
                         {"name": "https", "port": 443, "targetPort": 8443, "nodePort": 30443}]}),
    );
    let eps = slice(
        "default",
        "web-x1",
        "web",
        "IPv4",
        json!([{"name": "http", "port": 8080, "protocol": "TCP"},
               {"name": "https", "port": 8443, "protocol": "TCP"}]),
        json!([ready("10.244.1.5", "node-a")]),
    );
    let state = state(&[svc], &[eps]);
    let table = Table::new()
        .on_node(30080, &[("10.244.1.5:8080", 1)])
        .on_node(30443, &[("10.244.1.5:8443", 1)])
        .vs("10.96.0.20:30080", &[("10.244.1.5:8080", 1)])
        .vs("10.96.0.20:443", &[("10.244.1.5:8443", 1)]);
    assert_eq!(check(&state, &table), []);
    let findings = check(
        &state,
        &Table::new()
            .on_node(30080, &[("10.244.1.5:8080", 1)])
            .on_node(30443, &[("10.244.1.5:8443", 1), ("10.244.7.7:8443", 1)]),
    );
    assert_eq!(
        kinds(&findings),
        [(
            Kind::StaleEndpoint,
            Severity::Critical,
            Some(30443),
            Some("10.244.7.7:8443")
        )]
    );
    assert_eq!(findings[0].service_port.as_deref(), Some("https"));
}

#[test]
fn ipv6_virtual_servers_are_judged_in_their_family() {
    let svc = service(
        "default",
        "web",
        json!({"type": "NodePort", "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20", "fd00:96::20"],
               "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "RequireDualStack",
               "ports": [{"port": 80, "targetPort": 8080, "nodePort": 30080}]}),
    );
    let port = json!([{"name": "", "port": 8080, "protocol": "TCP"}]);
    let v4 = slice_of("web", &[("10.244.1.5", "node-a")]);
    let v6 = slice(
        "default",
        "web-x6",
        "web",
        "IPv6",
        port,
        json!([ready("fd00:10:244:1::5", "node-a")]),
    );
    let state = state(&[svc], &[v4, v6]);
    let table = Table::new().on_node(30080, &[("10.244.1.5:8080", 1)]).vs(
        "[fd00::a00:115]:30080",
        &[("[fd00:10:244:1::5]:8080", 1), ("[fd00:10:244:9::9]:8080", 1)],
    );
    let findings = check(&state, &table);
    assert_eq!(
        kinds(&findings),
        [(
            Kind::StaleEndpoint,
            Severity::Critical,
            Some(30080),
            Some("[fd00:10:244:9::9]:8080")
        )]
    );
    assert_eq!(findings[0].family, Some(Family::Ipv6));
    assert_eq!(
        findings[0].rule.as_deref(),
        Some("TCP  [fd00::a00:115]:30080 rr -> [fd00:10:244:9::9]:8080 Masq 1 0 0")
    );
}

#[test]
fn ports_with_uncertain_endpoints_are_not_judged() {
    let (services, slices) = cluster();
    let mut state = state(&services, &slices);
    for p in &mut state.ports {
        p.uncertain = true;
    }
    let table = Table::new()
        .on_node(30080, &[("10.244.9.9:8080", 1)])
        .vs("10.0.1.21:30081", &[])
        .on_node(30082, &[]);
    assert_eq!(check(&state, &table), []);
}

#[test]
fn nothing_is_concluded_missing_from_a_table_with_unread_lines() {
    let (services, slices) = cluster();
    let mut table = Table::new()
        .vs(
            "10.0.1.21:30080",
            &[("10.244.1.5:8080", 1), ("10.244.9.9:8080", 1)],
        )
        .vs(
            "10.244.1.0:30080",
            &[("10.244.1.5:8080", 1), ("10.244.2.7:8080", 1)],
        )
        .on_node(30081, &[("10.244.1.6:8080", 1)])
        .vs("10.0.1.21:30082", &[("10.244.2.8:8080", 1)]);
    table.table.unparsed.push(crate::heart::model::Unparsed {
        line: 17,
        text: "TCP  0AF4010:7582 rr".to_string(),
        reason: "not the kernel's hex address and port".to_string(),
    });
    // The unread line may be 10.244.1.0:30082, or a real server 10.244.2.7:8080: only
    // what was read is judged.
    assert_eq!(
        kinds(&check(&state(&services, &slices), &table)),
        [(
            Kind::StaleEndpoint,
            Severity::Critical,
            Some(30080),
            Some("10.244.9.9:8080")
        )]
    );
    table.table.unparsed.clear();
    let findings = check(&state(&services, &slices), &table);
    let found = kinds(&findings);
    assert!(
        found.contains(&(Kind::MissingRule, Severity::Critical, Some(30082), None)),
        "{found:?}"
    );
    assert!(
        found.contains(&(
            Kind::MissingEndpoint,
            Severity::Critical,
            Some(30080),
            Some("10.244.2.7:8080")
        )),
        "{found:?}"
    );
}
