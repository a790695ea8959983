//! A synthetic node: kube-proxy-shaped rules and the matching cluster state, at any
//! size, for benchmarks and scale tests (a production-sized dump cannot be committed).
//!
//! The rules are what `iptables-save` prints after kube-proxy wrote them, down to the
//! chain-name hashes and large-cluster mode; [`nft_script`] writes the same Services in
//! nftables mode. A generated node is clean unless [`SynthConfig::stale`] injects drift.

use std::fmt::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use serde_json::{Value, json};

use crate::heart::kube_proxy::Naming;
use crate::heart::model::{Protocol, ServicePortRef};

/// What to generate.
#[derive(Debug, Clone)]
pub struct SynthConfig {
    pub services: usize,
    pub endpoints_per_service: usize,
    /// The first nodePort; Services take consecutive ports from here.
    pub first_node_port: u16,
    pub node: String,
    /// Nodes the endpoints are spread over (endpoint i lives on `worker-(i % nodes + 1)`).
    pub nodes: usize,
    /// Injected drift (nftables script only): this many NodePort elements for ports no
    /// Service owns, each DNATing to an address no EndpointSlice lists.
    pub stale: usize,
    /// The Service ports' names, first Service first; Services beyond the list are
    /// `team-<i % 40>/svc-<i>:http`.
    pub names: Vec<ServicePortRef>,
    /// The order of the chains in the iptables dump, which `iptables-restore` keeps as
    /// the kernel's order.
    pub chain_order: ChainOrder,
    /// The kube-proxy release whose layout and chain names the iptables dump follows.
    /// [`nft_script`] writes today's nftables layout whatever this says.
    pub release: Release,
    /// Every `udp_every`-th Service is UDP (0: all TCP). [`nft_script`] writes every
    /// Service as TCP: keep this at 0 for it.
    pub udp_every: usize,
}

/// Which kube-proxy release's iptables layout and chain naming a dump follows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Release {
    /// v1.24 and later: NodePorts jump to `KUBE-EXT-*`; Local policy's endpoints are in
    /// `KUBE-SVL-*`, and its "no local endpoints" DROP in the filter table.
    #[default]
    Current,
    /// Before v1.24: a NodePort's rules are a `KUBE-MARK-MASQ` jump, then a jump to
    /// `KUBE-SVC-*` (Cluster policy) or `KUBE-XLB-*` (Local policy, which holds the
    /// local endpoints, or a `KUBE-MARK-DROP` without them), with chain names hashed as
    /// `Naming` spells Service ports.
    BeforeExt(Naming),
}

impl Release {
    /// How this release spelled Service ports in chain names and comments.
    pub fn naming(self) -> Naming {
        match self {
            Release::Current => Naming::Current,
            Release::BeforeExt(naming) => naming,
        }
    }
}

/// How the iptables dump orders its chains.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChainOrder {
    /// Sorted by name, as a dump restored from a saved, sorted dump has them.
    #[default]
    Sorted,
    /// Grouped by Service (`KUBE-SVC-X`, `KUBE-EXT-X`, then X's `KUBE-SEP-*`), as
    /// kube-proxy writes them in one restore: the order on a node it programmed.
    Grouped,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            services: 10_000,
            endpoints_per_service: 4,
            first_node_port: 20000,
            node: "worker-1".into(),
            nodes: 50,
            stale: 0,
            names: Vec::new(),
            chain_order: ChainOrder::default(),
            release: Release::default(),
            udp_every: 0,
        }
    }
}

/// A generated node.
#[derive(Debug, Clone)]
pub struct SynthNode {
    /// `iptables-save` output (iptables-nft backend, IPv4).
    pub iptables_save: String,
    /// `kubectl get services,endpointslices -A -o json` output.
    pub cluster_json: String,
}

/// The shape of one generated Service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Cluster,
    /// externalTrafficPolicy: Local, with a health-check node port.
    Local,
    /// No endpoints at all: kube-proxy writes only filter REJECTs.
    NoEndpoints,
}

fn shape(i: usize) -> Shape {
    match i % 20 {
        0 => Shape::NoEndpoints,
        1 | 2 => Shape::Local,
        _ => Shape::Cluster,
    }
}

struct Svc {
    port: ServicePortRef,
    protocol: Protocol,
    cluster_ip: Ipv4Addr,
    node_port: u16,
    health_check: Option<u16>,
    shape: Shape,
    endpoints: Vec<(SocketAddr, String)>,
}

fn ipv4(base: [u8; 2], n: usize) -> Ipv4Addr {
    Ipv4Addr::new(base[0], base[1], (n / 250 % 256) as u8, (n % 250 + 1) as u8)
}

fn services(config: &SynthConfig) -> Vec<Svc> {
    let mut hc_next = config.first_node_port as usize + config.services;
    (0..config.services)
        .map(|i| {
            let shape = shape(i);
            let port = config.names.get(i).cloned().unwrap_or_else(|| ServicePortRef {
                namespace: format!("team-{}", i % 40),
                name: format!("svc-{i}"),
                port_name: "http".into(),
            });
            let endpoints = if shape == Shape::NoEndpoints {
                Vec::new()
            } else {
                (0..config.endpoints_per_service)
                    .map(|e| {
                        let n = i * config.endpoints_per_service + e;
                        let addr = SocketAddr::V4(SocketAddrV4::new(ipv4([10, 244], n), 8080));
                        (addr, format!("worker-{}", n % config.nodes + 1))
                    })
                    .collect()
            };
            let health_check = (shape == Shape::Local).then(|| {
                hc_next += 1;
                port_number(hc_next)
            });
            let protocol = if config.udp_every > 0 && i % config.udp_every == config.udp_every - 1 {
                Protocol::Udp
            } else {
                Protocol::Tcp
            };
            Svc {
                port,
                protocol,
                cluster_ip: ipv4([10, 96], i),
                node_port: port_number(usize::from(config.first_node_port) + i),
                health_check,
                shape,
                endpoints,
            }
        })
        .collect()
}

/// Generates a node.
pub fn generate(config: &SynthConfig) -> SynthNode {
    let svcs = services(config);
    SynthNode {
        iptables_save: iptables_save(config, &svcs),
        cluster_json: cluster_json(config, &svcs),
    }
}

fn cluster_json(config: &SynthConfig, svcs: &[Svc]) -> String {
    let mut items = Vec::with_capacity(svcs.len() * 2 + 2);
    items.extend([api_server_service(), api_server_slice()]);
    for (i, s) in svcs.iter().enumerate() {
        items.push(service_object(i, s));
        if s.shape != Shape::NoEndpoints {
            items.push(slice_object(i, s, config));
        }
    }
    let list =
        json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items});
    let mut out = Vec::with_capacity(svcs.len() * 3000);
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(&list, &mut ser).expect("serialising a Value into memory cannot fail");
    out.push(b'\n');
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// `default/kubernetes`, the API server's Service, which every cluster has: a cluster
/// state without it reads as a list filtered by namespace or label.
pub fn api_server_service() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default", "resourceVersion": "99999"},
        "spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"], "type": "ClusterIP",
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}
    })
}

/// The EndpointSlice of [`api_server_service`].
fn api_server_slice() -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default", "resourceVersion": "99999",
                     "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.10"], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]
    })
}

fn service_object(i: usize, s: &Svc) -> Value {
    let mut spec = json!({
        "clusterIP": s.cluster_ip.to_string(),
        "clusterIPs": [s.cluster_ip.to_string()],
        "externalTrafficPolicy": if s.shape == Shape::Local { "Local" } else { "Cluster" },
        "internalTrafficPolicy": "Cluster",
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
        "ports": [{"name": s.port.port_name, "nodePort": s.node_port, "port": 80, "protocol": s.protocol.as_str().to_ascii_uppercase(), "targetPort": 8080}],
        "selector": {"app": s.port.name},
        "sessionAffinity": "None",
        "type": "NodePort"
    });
    if let Some(hc) = s.health_check {
        spec["type"] = json!("LoadBalancer");
        spec["healthCheckNodePort"] = json!(hc);
        spec["allocateLoadBalancerNodePorts"] = json!(true);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "creationTimestamp": "2026-11-01T10:00:00Z",
            "labels": {"app": s.port.name},
            "name": s.port.name,
            "namespace": s.port.namespace,
            "resourceVersion": (100000 + i).to_string(),
            "uid": format!("00000000-0000-4000-8000-{:012}", i)
        },
        "spec": spec,
        "status": {"loadBalancer": {}}
    })
}

fn slice_object(i: usize, s: &Svc, config: &SynthConfig) -> Value {
    let endpoints: Vec<Value> = s
        .endpoints
        .iter()
        .enumerate()
        .map(|(e, (addr, node))| {
            json!({
                "addresses": [addr.ip().to_string()],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": node,
                "targetRef": {"kind": "Pod", "name": format!("{}-{e}", s.port.name), "namespace": s.port.namespace, "uid": format!("10000000-0000-4000-8000-{:012}", i * config.endpoints_per_service + e)}
            })
        })
        .collect();
    json!({
        "addressType": "IPv4",
        "apiVersion": "discovery.k8s.io/v1",
        "endpoints": endpoints,
        "kind": "EndpointSlice",
        "metadata": {
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-01T10:00:05Z"},
            "creationTimestamp": "2026-11-01T10:00:01Z",
            "generateName": format!("{}-", s.port.name),
            "labels": {"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io", "kubernetes.io/service-name": s.port.name},
            "name": format!("{}-abcde", s.port.name),
            "namespace": s.port.namespace,
            "resourceVersion": (200000 + i).to_string()
        },
        "ports": [{"name": s.port.port_name, "port": 8080, "protocol": s.protocol.as_str().to_ascii_uppercase()}]
    })
}

mod iptables;
mod nftables;

use iptables::iptables_save;
pub use nftables::nft_script;

#[cfg(test)]
mod tests;

/// A generated port: past 65,535 the node would be wrong in a way nobody sees (a port
/// wrapped to 0), so generation stops with what to change.
fn port_number(port: usize) -> u16 {
    u16::try_from(port).unwrap_or_else(|_| {
        panic!("the generated ports run past 65535 (to {port}): start them lower (--first-node-port)")
    })
}
