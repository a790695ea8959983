//! The generated node's nftables-mode table, as an `nft -f` script.

use super::*;
use crate::heart::model::Protocol;

/// kube-proxy's nftables mode for the same Services (`ip kube-proxy`), as an `nft -f`
/// script: the layout of the reference (section 5), with elements added in bulk so
/// that a large cluster loads quickly.
pub fn nft_script(config: &SynthConfig) -> String {
    let svcs = services(config);
    let mut out = String::with_capacity(svcs.len() * 2000);
    let mut elements = NftElements::default();
    nft_base(&mut out);
    for s in &svcs {
        nft_service(config, s, &mut out, &mut elements);
    }
    for k in 0..config.stale {
        nft_stale(config, k, &mut out, &mut elements);
    }
    elements.write(&mut out);
    out
}

const NFT_TABLE: &str = "ip kube-proxy";

fn nft_base(out: &mut String) {
    let t = NFT_TABLE;
    let _ = writeln!(out, "add table {t} {{ comment \"rules for kube-proxy\" ; }}");
    let _ = writeln!(
        out,
        "add set {t} cluster-ips {{ type ipv4_addr ; comment \"Active ClusterIPs\" ; }}"
    );
    let _ = writeln!(
        out,
        "add set {t} nodeport-ips {{ type ipv4_addr ; comment \"IPs that accept NodePort traffic\" ; }}"
    );
    for map in ["service-ips", "no-endpoint-services"] {
        let _ = writeln!(
            out,
            "add map {t} {map} {{ type ipv4_addr . inet_proto . inet_service : verdict ; }}"
        );
    }
    for map in ["service-nodeports", "no-endpoint-nodeports"] {
        let _ = writeln!(
            out,
            "add map {t} {map} {{ type inet_proto . inet_service : verdict ; }}"
        );
    }
    for (chain, hook) in [
        ("filter-input", "type filter hook input priority -110"),
        ("filter-output", "type filter hook output priority -110"),
        ("nat-prerouting", "type nat hook prerouting priority -100"),
        ("nat-output", "type nat hook output priority -100"),
        ("nat-postrouting", "type nat hook postrouting priority 100"),
    ] {
        let _ = writeln!(out, "add chain {t} {chain} {{ {hook} ; }}");
    }
    for chain in [
        "nodeport-endpoints-check",
        "service-endpoints-check",
        "reject-chain",
        "mark-for-masquerade",
        "masquerading",
        "services",
    ] {
        let _ = writeln!(out, "add chain {t} {chain}");
    }
    for (chain, rule) in [
        ("filter-input", "ct state new jump nodeport-endpoints-check"),
        ("filter-input", "ct state new jump service-endpoints-check"),
        ("filter-output", "ct state new jump service-endpoints-check"),
        (
            "nodeport-endpoints-check",
            "ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports",
        ),
        (
            "service-endpoints-check",
            "ip daddr . meta l4proto . th dport vmap @no-endpoint-services",
        ),
        ("reject-chain", "reject"),
        ("mark-for-masquerade", "mark set mark or 0x4000"),
        ("masquerading", "mark and 0x4000 == 0 return"),
        ("masquerading", "mark set mark xor 0x4000"),
        ("masquerading", "masquerade fully-random"),
        ("nat-prerouting", "jump services"),
        ("nat-output", "jump services"),
        ("nat-postrouting", "jump masquerading"),
        ("services", "ip daddr . meta l4proto . th dport vmap @service-ips"),
        (
            "services",
            "ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
        ),
    ] {
        let _ = writeln!(out, "add rule {t} {chain} {rule}");
    }
    let _ = writeln!(out, "add element {t} nodeport-ips {{ 192.168.0.2 }}");
}

/// Map and set elements, written in bulk at the end.
#[derive(Default)]
struct NftElements {
    cluster_ips: Vec<String>,
    service_ips: Vec<String>,
    service_nodeports: Vec<String>,
    no_endpoint_services: Vec<String>,
    no_endpoint_nodeports: Vec<String>,
}

impl NftElements {
    fn write(&self, out: &mut String) {
        for (name, items) in [
            ("cluster-ips", &self.cluster_ips),
            ("service-ips", &self.service_ips),
            ("service-nodeports", &self.service_nodeports),
            ("no-endpoint-services", &self.no_endpoint_services),
            ("no-endpoint-nodeports", &self.no_endpoint_nodeports),
        ] {
            // Bounded batches: one huge line makes nft's parser slow.
            for batch in items.chunks(1000) {
                let _ = writeln!(out, "add element {NFT_TABLE} {name} {{ {} }}", batch.join(", "));
            }
        }
    }
}

/// `endpoint-HASH-ns/svc/tcp/port__ip/port`.
fn nft_endpoint_chain(port: &ServicePortRef, addr: &SocketAddr) -> String {
    let service = crate::heart::kube_proxy::nft_service_chain("endpoint", port, Protocol::Tcp);
    let name = format!(
        "{}__{}/{}",
        service.splitn(3, '-').nth(2).unwrap_or_default(),
        addr.ip(),
        addr.port()
    );
    let hash = crate::heart::kube_proxy::nft_chain_hash(&name);
    format!("endpoint-{hash}-{name}")
}

/// `numgen random mod N vmap { 0 : goto a, 1 : goto b }`, endpoints in kube-proxy's order.
fn nft_endpoint_dispatch(
    out: &mut String,
    chain: &str,
    endpoints: &[&(SocketAddr, String)],
    port: &ServicePortRef,
) {
    let arms: Vec<String> = endpoints
        .iter()
        .enumerate()
        .map(|(i, (addr, _))| format!("{i} : goto {}", nft_endpoint_chain(port, addr)))
        .collect();
    let _ = writeln!(
        out,
        "add rule {NFT_TABLE} {chain} numgen random mod {} vmap {{ {} }}",
        endpoints.len(),
        arms.join(", ")
    );
}

fn nft_service(config: &SynthConfig, s: &Svc, out: &mut String, elements: &mut NftElements) {
    let t = NFT_TABLE;
    let name = s.port.kube_proxy_name();
    let (ip, np) = (s.cluster_ip, s.node_port);
    elements.cluster_ips.push(ip.to_string());
    if s.shape == Shape::NoEndpoints {
        elements
            .no_endpoint_services
            .push(format!("{ip} . tcp . 80 comment \"{name}\" : goto reject-chain"));
        elements
            .no_endpoint_nodeports
            .push(format!("tcp . {np} comment \"{name}\" : goto reject-chain"));
        return;
    }
    let service = crate::heart::kube_proxy::nft_service_chain("service", &s.port, Protocol::Tcp);
    let external = crate::heart::kube_proxy::nft_service_chain("external", &s.port, Protocol::Tcp);
    let local = crate::heart::kube_proxy::nft_service_chain("local", &s.port, Protocol::Tcp);
    let mut sorted: Vec<&(SocketAddr, String)> = s.endpoints.iter().collect();
    sorted.sort_by_key(|(a, _)| a.to_string());
    let on_node: Vec<&(SocketAddr, String)> = sorted
        .iter()
        .copied()
        .filter(|(_, n)| *n == config.node)
        .collect();
    // Chains before the rules that jump to them: nft checks every jump as it loads.
    for (addr, _) in &sorted {
        let _ = writeln!(out, "add chain {t} {}", nft_endpoint_chain(&s.port, addr));
    }
    let _ = writeln!(out, "add chain {t} {service}");
    let _ = writeln!(out, "add chain {t} {external}");
    let _ = writeln!(
        out,
        "add rule {t} {service} ip daddr {ip} tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade"
    );
    nft_endpoint_dispatch(out, &service, &sorted, &s.port);
    if s.shape == Shape::Local {
        let _ = writeln!(
            out,
            "add rule {t} {external} ip saddr 10.244.0.0/16 goto {service} comment \"short-circuit pod traffic\""
        );
        let _ = writeln!(
            out,
            "add rule {t} {external} fib saddr type local jump mark-for-masquerade comment \"masquerade local traffic\""
        );
        let _ = writeln!(
            out,
            "add rule {t} {external} fib saddr type local goto {service} comment \"short-circuit local traffic\""
        );
        if on_node.is_empty() {
            elements
                .no_endpoint_nodeports
                .push(format!("tcp . {np} comment \"{name}\" : drop"));
        } else {
            let _ = writeln!(out, "add chain {t} {local}");
            nft_endpoint_dispatch(out, &local, &on_node, &s.port);
            let _ = writeln!(out, "add rule {t} {external} goto {local}");
        }
    } else {
        let _ = writeln!(out, "add rule {t} {external} jump mark-for-masquerade");
        let _ = writeln!(out, "add rule {t} {external} goto {service}");
    }
    for (addr, _) in &sorted {
        nft_endpoint(out, &s.port, addr);
    }
    elements
        .service_ips
        .push(format!("{ip} . tcp . 80 : goto {service}"));
    elements
        .service_nodeports
        .push(format!("tcp . {np} : goto {external}"));
}

fn nft_endpoint(out: &mut String, port: &ServicePortRef, addr: &SocketAddr) {
    let chain = nft_endpoint_chain(port, addr);
    let _ = writeln!(
        out,
        "add rule {NFT_TABLE} {chain} ip saddr {} jump mark-for-masquerade",
        addr.ip()
    );
    let _ = writeln!(
        out,
        "add rule {NFT_TABLE} {chain} meta l4proto tcp dnat to {addr}"
    );
}

/// Drift: a NodePort left behind by a deleted Service, still DNATing to its old pod.
fn nft_stale(config: &SynthConfig, k: usize, out: &mut String, elements: &mut NftElements) {
    let port = ServicePortRef {
        namespace: "gone".into(),
        name: format!("stale-{k}"),
        port_name: "http".into(),
    };
    let np = config.first_node_port as usize + config.services * 2 + k;
    let addr = SocketAddr::V4(SocketAddrV4::new(ipv4([10, 250], k), 8080));
    let external = crate::heart::kube_proxy::nft_service_chain("external", &port, Protocol::Tcp);
    let endpoint = nft_endpoint_chain(&port, &addr);
    let _ = writeln!(out, "add chain {NFT_TABLE} {endpoint}");
    let _ = writeln!(out, "add chain {NFT_TABLE} {external}");
    let _ = writeln!(out, "add rule {NFT_TABLE} {external} goto {endpoint}");
    nft_endpoint(out, &port, &addr);
    elements
        .service_nodeports
        .push(format!("tcp . {} : goto {external}", np.min(65535)));
}
