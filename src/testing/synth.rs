//! A synthetic node: kube-proxy-shaped rules and the matching cluster state, at any
//! size, for benchmarks and scale tests (a production-sized dump cannot be committed).
//!
//! The rules are what `iptables-save` prints after kube-proxy wrote them, down to the
//! chain-name hashes and large-cluster mode; [`nft_script`] writes the same Services in
//! nftables mode. A generated node is clean unless [`SynthConfig::stale`] injects drift.

use std::fmt::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use serde_json::{Value, json};

use crate::heart::kube_proxy::{endpoint_chain_hash, service_chain_hash};
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
                hc_next as u16
            });
            Svc {
                port,
                cluster_ip: ipv4([10, 96], i),
                node_port: config.first_node_port + i as u16,
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

/// The probability the kernel prints for `1/n`: stored as a fraction of 2^31, printed
/// with 11 decimals.
fn kernel_probability(n: usize) -> String {
    let stored = (2147483648.0 / n as f64).round();
    format!("{:.11}", stored / 2147483648.0)
}

/// Rules grouped by chain, printed as iptables-save prints them: declarations, then
/// each chain's rules.
#[derive(Default)]
struct TableText {
    chains: Vec<String>,
    rules: std::collections::BTreeMap<String, String>,
}

impl TableText {
    fn chain(&mut self, name: &str) {
        self.chains.push(name.to_string());
    }

    fn rule(&mut self, chain: &str, spec: &str) {
        let text = self.rules.entry(chain.to_string()).or_default();
        let _ = writeln!(text, "-A {chain} {spec}");
    }

    fn write(mut self, out: &mut String, table: &str, builtins: &[&str], order: ChainOrder) {
        let _ = writeln!(out, "*{table}");
        for b in builtins {
            let _ = writeln!(out, ":{b} ACCEPT [0:0]");
        }
        if order == ChainOrder::Sorted {
            self.chains.sort();
        }
        for c in &self.chains {
            let _ = writeln!(out, ":{c} - [0:0]");
        }
        for name in builtins
            .iter()
            .map(|s| s.to_string())
            .chain(self.chains.iter().cloned())
        {
            if let Some(rules) = self.rules.remove(&name) {
                out.push_str(&rules);
            }
        }
        out.push_str("COMMIT\n");
    }
}

fn iptables_save(config: &SynthConfig, svcs: &[Svc]) -> String {
    let total_endpoints: usize = svcs.iter().map(|s| s.endpoints.len()).sum();
    // kube-proxy's largeClusterEndpointsThreshold.
    let large = total_endpoints > 1000;
    let mut out = String::with_capacity(svcs.len() * 2600);
    out.push_str("# Generated by iptables-save v1.8.9 (nf_tables) on Mon Nov 30 00:00:00 2026\n");
    out.push_str("*mangle\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n");

    let mut filter = TableText::default();
    for c in [
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-FIREWALL",
        "KUBE-FORWARD",
        "KUBE-KUBELET-CANARY",
        "KUBE-NODEPORTS",
        "KUBE-PROXY-CANARY",
        "KUBE-PROXY-FIREWALL",
        "KUBE-SERVICES",
    ] {
        filter.chain(c);
    }
    filter.rule("INPUT", "-m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL");
    filter.rule(
        "INPUT",
        "-m comment --comment \"kubernetes health check service ports\" -j KUBE-NODEPORTS",
    );
    filter.rule("INPUT", "-m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES");
    filter.rule("INPUT", "-j KUBE-FIREWALL");
    filter.rule(
        "FORWARD",
        "-m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD",
    );
    filter.rule(
        "FORWARD",
        "-m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
    );
    filter.rule(
        "OUTPUT",
        "-m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
    );
    filter.rule("OUTPUT", "-j KUBE-FIREWALL");
    filter.rule("KUBE-FIREWALL", "! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment \"block incoming localnet connections\" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP");
    filter.rule("KUBE-FORWARD", "-m conntrack --ctstate INVALID -j DROP");
    filter.rule(
        "KUBE-FORWARD",
        "-m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT",
    );

    let mut nat = TableText::default();
    for c in [
        "KUBE-KUBELET-CANARY",
        "KUBE-MARK-MASQ",
        "KUBE-NODEPORTS",
        "KUBE-POSTROUTING",
        "KUBE-PROXY-CANARY",
        "KUBE-SERVICES",
    ] {
        nat.chain(c);
    }
    nat.rule(
        "PREROUTING",
        "-m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
    );
    nat.rule(
        "OUTPUT",
        "-m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
    );
    nat.rule(
        "POSTROUTING",
        "-m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING",
    );
    nat.rule("KUBE-MARK-MASQ", "-j MARK --set-xmark 0x4000/0x4000");
    nat.rule("KUBE-POSTROUTING", "-m mark ! --mark 0x4000/0x4000 -j RETURN");
    nat.rule("KUBE-POSTROUTING", "-j MARK --set-xmark 0x4000/0x0");
    nat.rule(
        "KUBE-POSTROUTING",
        "-m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully",
    );

    for s in svcs {
        service_rules(config, s, large, &mut nat, &mut filter);
    }
    nat.rule("KUBE-SERVICES", "-m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS");
    filter.write(
        &mut out,
        "filter",
        &["INPUT", "FORWARD", "OUTPUT"],
        config.chain_order,
    );
    nat.write(
        &mut out,
        "nat",
        &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
        config.chain_order,
    );
    out
}

fn service_rules(config: &SynthConfig, s: &Svc, large: bool, nat: &mut TableText, filter: &mut TableText) {
    let name = s.port.kube_proxy_name();
    let proto = Protocol::Tcp;
    let (ip, np) = (s.cluster_ip, s.node_port);
    if let Some(hc) = s.health_check {
        filter.rule(
            "KUBE-NODEPORTS",
            &format!(
                "-p tcp -m comment --comment \"{name} health check node port\" -m tcp --dport {hc} -j ACCEPT"
            ),
        );
    }
    if s.shape == Shape::NoEndpoints {
        filter.rule("KUBE-SERVICES", &format!("-d {ip}/32 -p tcp -m comment --comment \"{name} has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable"));
        filter.rule("KUBE-EXTERNAL-SERVICES", &format!("-p tcp -m comment --comment \"{name} has no endpoints\" -m addrtype --dst-type LOCAL -m tcp --dport {np} -j REJECT --reject-with icmp-port-unreachable"));
        return;
    }
    let h = service_chain_hash(&s.port, proto);
    let (svc, ext, svl) = (
        format!("KUBE-SVC-{h}"),
        format!("KUBE-EXT-{h}"),
        format!("KUBE-SVL-{h}"),
    );
    nat.chain(&svc);
    nat.chain(&ext);
    nat.rule(
        "KUBE-SERVICES",
        &format!("-d {ip}/32 -p tcp -m comment --comment \"{name} cluster IP\" -m tcp --dport 80 -j {svc}"),
    );
    nat.rule("KUBE-NODEPORTS", &format!("-d 127.0.0.0/8 -p tcp -m comment --comment \"{name}\" -m tcp --dport {np} -m nfacct --nfacct-name  localhost_nps_accepted_pkts -j {ext}"));
    nat.rule(
        "KUBE-NODEPORTS",
        &format!("-p tcp -m comment --comment \"{name}\" -m tcp --dport {np} -j {ext}"),
    );
    let mut sorted: Vec<&(SocketAddr, String)> = s.endpoints.iter().collect();
    sorted.sort_by_key(|(a, _)| a.to_string());
    let local: Vec<&(SocketAddr, String)> = sorted
        .iter()
        .copied()
        .filter(|(_, n)| *n == config.node)
        .collect();
    if s.shape == Shape::Local {
        nat.rule(&ext, &format!("-s 10.244.0.0/16 -m comment --comment \"pod traffic for {name} external destinations\" -j {svc}"));
        nat.rule(&ext, &format!("-m comment --comment \"masquerade LOCAL traffic for {name} external destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ"));
        nat.rule(&ext, &format!("-m comment --comment \"route LOCAL traffic for {name} external destinations\" -m addrtype --src-type LOCAL -j {svc}"));
        if local.is_empty() {
            filter.rule("KUBE-EXTERNAL-SERVICES", &format!("-p tcp -m comment --comment \"{name} has no local endpoints\" -m addrtype --dst-type LOCAL -m tcp --dport {np} -j DROP"));
        } else {
            nat.chain(&svl);
            nat.rule(&ext, &format!("-j {svl}"));
        }
    } else {
        nat.rule(&ext, &format!("-m comment --comment \"masquerade traffic for {name} external destinations\" -j KUBE-MARK-MASQ"));
        nat.rule(&ext, &format!("-j {svc}"));
    }
    nat.rule(&svc, &format!("! -s 10.244.0.0/16 -d {ip}/32 -p tcp -m comment --comment \"{name} cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ"));
    write_endpoint_jumps(nat, &svc, &name, &s.port, &sorted, large);
    if s.shape == Shape::Local && !local.is_empty() {
        write_endpoint_jumps(nat, &svl, &name, &s.port, &local, large);
    }
    for (addr, _) in &sorted {
        let sep = format!("KUBE-SEP-{}", endpoint_chain_hash(&s.port, proto, addr));
        nat.chain(&sep);
        let comment = if large {
            String::new()
        } else {
            format!("-m comment --comment \"{name}\" ")
        };
        nat.rule(&sep, &format!("-s {}/32 {comment}-j KUBE-MARK-MASQ", addr.ip()));
        nat.rule(
            &sep,
            &format!("-p tcp {comment}-m tcp -j DNAT --to-destination {addr}"),
        );
    }
}

fn write_endpoint_jumps(
    nat: &mut TableText,
    chain: &str,
    name: &str,
    port: &ServicePortRef,
    endpoints: &[&(SocketAddr, String)],
    large: bool,
) {
    let n = endpoints.len();
    for (i, (addr, _)) in endpoints.iter().enumerate() {
        let sep = format!("KUBE-SEP-{}", endpoint_chain_hash(port, Protocol::Tcp, addr));
        let comment = if large {
            String::new()
        } else {
            format!("-m comment --comment \"{name} -> {addr}\" ")
        };
        if i + 1 < n {
            let p = kernel_probability(n - i);
            nat.rule(
                chain,
                &format!("{comment}-m statistic --mode random --probability {p} -j {sep}"),
            );
        } else {
            nat.rule(chain, &format!("{comment}-j {sep}"));
        }
    }
}

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

fn cluster_json(config: &SynthConfig, svcs: &[Svc]) -> String {
    let mut items = Vec::with_capacity(svcs.len() * 2);
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

fn service_object(i: usize, s: &Svc) -> Value {
    let mut spec = json!({
        "clusterIP": s.cluster_ip.to_string(),
        "clusterIPs": [s.cluster_ip.to_string()],
        "externalTrafficPolicy": if s.shape == Shape::Local { "Local" } else { "Cluster" },
        "internalTrafficPolicy": "Cluster",
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
        "ports": [{"name": s.port.port_name, "nodePort": s.node_port, "port": 80, "protocol": "TCP", "targetPort": 8080}],
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
        "ports": [{"name": s.port.port_name, "port": 8080, "protocol": "TCP"}]
    })
}

#[cfg(test)]
mod tests;
