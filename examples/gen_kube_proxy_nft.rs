//! Writes an `nft -f` script shaped like kube-proxy's nftables mode for N NodePort
//! Services with E endpoints each (Cluster policy, one TCP port), on stdout. Load it
//! into a scratch network namespace and dump it to get a large, real `nft -j` ruleset:
//!
//! ```sh
//! cargo run --release --example gen_kube_proxy_nft -- 10000 3 > /tmp/big.nft
//! unshare -n sh -c 'nft -f /tmp/big.nft && nft -j list ruleset > /tmp/big.json'
//! /usr/bin/time -v target/release/examples/nft_dump --summary /tmp/big.json
//! ```

use std::io::{BufWriter, Write};

use data_encoding::BASE32;
use portdrift::heart::kube_proxy::nft_service_chain;
use portdrift::heart::model::{Protocol, ServicePortRef};
use sha2::{Digest, Sha256};

/// kube-proxy's endpoint chain: `endpoint-HASH-ns/svc/tcp/port__ip/port`, HASH over the
/// part after the dash.
fn endpoint_chain(svc: &ServicePortRef, ip: &str, port: u16) -> String {
    let name = format!(
        "{}/{}/tcp/{}__{ip}/{port}",
        svc.namespace, svc.name, svc.port_name
    );
    let mut hash = BASE32.encode(&Sha256::digest(name.as_bytes()));
    hash.truncate(8);
    format!("endpoint-{hash}-{name}")
}

fn main() -> std::io::Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers"))
        .collect();
    let (services, endpoints) = (
        args.first().copied().unwrap_or(10_000),
        args.get(1).copied().unwrap_or(3),
    );
    let mut out = BufWriter::new(std::io::stdout().lock());
    let t = "ip kube-proxy";
    writeln!(out, "add table {t} {{ comment \"rules for kube-proxy\" ; }}")?;
    writeln!(
        out,
        "add set {t} cluster-ips {{ type ipv4_addr ; comment \"Active ClusterIPs\" ; }}"
    )?;
    writeln!(out, "add set {t} nodeport-ips {{ type ipv4_addr ; }}")?;
    for map in ["service-ips", "no-endpoint-services"] {
        writeln!(
            out,
            "add map {t} {map} {{ type ipv4_addr . inet_proto . inet_service : verdict ; }}"
        )?;
    }
    for map in ["service-nodeports", "no-endpoint-nodeports"] {
        writeln!(
            out,
            "add map {t} {map} {{ type inet_proto . inet_service : verdict ; }}"
        )?;
    }
    writeln!(out, "add chain {t} mark-for-masquerade")?;
    writeln!(out, "add rule {t} mark-for-masquerade mark set mark or 0x4000")?;
    writeln!(out, "add chain {t} services")?;
    writeln!(
        out,
        "add chain {t} nat-prerouting {{ type nat hook prerouting priority -100 ; }}"
    )?;
    writeln!(out, "add rule {t} nat-prerouting jump services")?;
    writeln!(
        out,
        "add rule {t} services ip daddr . meta l4proto . th dport vmap @service-ips"
    )?;
    writeln!(
        out,
        "add rule {t} services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports"
    )?;
    writeln!(out, "add element {t} nodeport-ips {{ 192.168.0.2 }}")?;
    for i in 0..services {
        let svc = ServicePortRef {
            namespace: format!("ns{}", i / 100),
            name: format!("svc{i}"),
            port_name: "http".into(),
        };
        let cluster_ip = format!("172.30.{}.{}", i / 250, i % 250 + 1);
        let service = nft_service_chain("service", &svc, Protocol::Tcp);
        let external = nft_service_chain("external", &svc, Protocol::Tcp);
        let eps: Vec<(String, String)> = (0..endpoints)
            .map(|e| {
                let ip = format!("10.{}.{}.{}", 100 + e, i / 250, i % 250 + 1);
                (endpoint_chain(&svc, &ip, 8080), ip)
            })
            .collect();
        for chain in [&service, &external]
            .into_iter()
            .chain(eps.iter().map(|(c, _)| c))
        {
            writeln!(out, "add chain {t} {chain}")?;
        }
        writeln!(
            out,
            "add rule {t} {service} ip daddr {cluster_ip} ip saddr != 10.0.0.0/8 jump mark-for-masquerade"
        )?;
        let vmap: Vec<String> = eps
            .iter()
            .enumerate()
            .map(|(n, (c, _))| format!("{n} : goto {c}"))
            .collect();
        writeln!(
            out,
            "add rule {t} {service} numgen random mod {endpoints} vmap {{ {} }}",
            vmap.join(" , ")
        )?;
        writeln!(out, "add rule {t} {external} jump mark-for-masquerade")?;
        writeln!(out, "add rule {t} {external} goto {service}")?;
        for (chain, ip) in &eps {
            writeln!(out, "add rule {t} {chain} ip saddr {ip} jump mark-for-masquerade")?;
            writeln!(out, "add rule {t} {chain} meta l4proto tcp dnat to {ip}:8080")?;
        }
        writeln!(out, "add element {t} cluster-ips {{ {cluster_ip} }}")?;
        writeln!(
            out,
            "add element {t} service-ips {{ {cluster_ip} . tcp . 80 : goto {service} }}"
        )?;
        writeln!(
            out,
            "add element {t} service-nodeports {{ tcp . {} : goto {external} }}",
            30000 + i % 30000
        )?;
    }
    out.flush()
}
