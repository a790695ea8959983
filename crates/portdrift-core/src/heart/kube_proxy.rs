//! kube-proxy's naming rules, recomputed so chains can be attributed to Services even
//! when kube-proxy leaves out its comments (above 1,000 endpoints).
//!
//! iptables mode (`pkg/proxy/iptables/proxier.go`): the per-service-port chains share
//! the suffix `base32(sha256(svcPortName + protocol))[:16]`; an endpoint chain adds the
//! endpoint (`ip:port`, `[v6]:port`) to the hashed string. nftables mode
//! (`pkg/proxy/nftables/proxier.go`) hashes the chain's own name to 8 characters.

use std::net::SocketAddr;

use data_encoding::BASE32;
use sha2::{Digest, Sha256};

use crate::heart::model::{Protocol, ServicePortRef};

fn base32_sha256_prefix(input: &[u8], len: usize) -> String {
    let digest = Sha256::digest(input);
    let mut encoded = BASE32.encode(&digest);
    encoded.truncate(len);
    encoded
}

/// How a kube-proxy release spelled a Service port in the strings it hashes into chain
/// names. Named ports were spelled `ns/name:port` in every release; an unnamed port's
/// spelling changed, so one Service port can have two chain names depending on the
/// release that wrote them (docs/findings.md, "Chain names across releases").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Naming {
    /// `ns/name` for an unnamed port: v1.19 and later (kubernetes#90031).
    Current,
    /// `ns/name:` for an unnamed port (`ServicePortName.String()` printed the colon
    /// whatever the port's name): v1.18 and earlier, whose comments read `"ns/name:"`.
    TrailingColon,
}

impl Naming {
    /// Every spelling, today's first.
    pub const ALL: [Naming; 2] = [Naming::Current, Naming::TrailingColon];

    /// The releases that spelled Service ports this way, for messages.
    pub fn releases(self) -> &'static str {
        match self {
            Naming::Current => NAMING_CURRENT_RELEASES,
            Naming::TrailingColon => NAMING_TRAILING_COLON_RELEASES,
        }
    }

    /// Whether this spelling gives `svc` a name of its own (it differs from today's only
    /// for unnamed ports).
    pub fn applies_to(self, svc: &ServicePortRef) -> bool {
        self == Naming::Current || svc.port_name.is_empty()
    }
}

/// The releases whose chain naming is known here, for a port every one names alike.
pub const NAMING_ALL_RELEASES: &str = "v1.10 and every release since";

/// The releases of each spelling (kube-proxy's `ServicePortName.String()`).
const NAMING_CURRENT_RELEASES: &str = "v1.19 and later";
const NAMING_TRAILING_COLON_RELEASES: &str = "v1.18 and earlier";

/// kube-proxy's `svcPortName` for `svc` as a release of `naming` spelled it.
fn write_port_name(svc: &ServicePortRef, naming: Naming, out: &mut impl FnMut(&[u8])) {
    out(svc.namespace.as_bytes());
    out(b"/");
    out(svc.name.as_bytes());
    if !svc.port_name.is_empty() || naming == Naming::TrailingColon {
        out(b":");
        out(svc.port_name.as_bytes());
    }
}

/// kube-proxy's `svcPortName` for `svc` as a release of `naming` wrote it, in its
/// comments too (`ns/name:` for an unnamed port in the older releases).
pub fn port_name_as(svc: &ServicePortRef, naming: Naming) -> String {
    let mut out = Vec::new();
    write_port_name(svc, naming, &mut |b| out.extend_from_slice(b));
    String::from_utf8_lossy(&out).into_owned()
}

/// The 16-character suffix of `KUBE-SVC-`, `KUBE-SVL-`, `KUBE-EXT-` and `KUBE-FW-`
/// chains for one Service port.
pub fn service_chain_hash(svc: &ServicePortRef, protocol: Protocol) -> String {
    let hash = service_chain_hash_bytes(svc, protocol);
    String::from_utf8_lossy(&hash).into_owned()
}

/// [`service_chain_hash`] without allocating, for indexing every Service of a large
/// cluster: the hash as 16 ASCII bytes.
pub fn service_chain_hash_bytes(svc: &ServicePortRef, protocol: Protocol) -> [u8; 16] {
    service_chain_hash_as(svc, protocol, Naming::Current)
}

/// The per-service chain suffix a release of `naming` gave `svc`.
pub fn service_chain_hash_as(svc: &ServicePortRef, protocol: Protocol, naming: Naming) -> [u8; 16] {
    let mut hasher = Sha256::new();
    write_port_name(svc, naming, &mut |b| hasher.update(b));
    hasher.update(protocol.as_str().as_bytes());
    let digest = hasher.finalize();
    // 10 bytes of digest encode to exactly 16 base32 characters.
    let mut out = [0u8; 16];
    BASE32.encode_mut(&digest[..10], &mut out);
    out
}

/// The 16-character suffix of a `KUBE-SEP-` chain.
pub fn endpoint_chain_hash(svc: &ServicePortRef, protocol: Protocol, endpoint: &SocketAddr) -> String {
    endpoint_chain_hash_as(svc, protocol, endpoint, Naming::Current)
}

/// The `KUBE-SEP-` suffix a release of `naming` gave an endpoint of `svc`.
pub fn endpoint_chain_hash_as(
    svc: &ServicePortRef,
    protocol: Protocol,
    endpoint: &SocketAddr,
    naming: Naming,
) -> String {
    let mut input = Vec::with_capacity(64);
    write_port_name(svc, naming, &mut |b| input.extend_from_slice(b));
    input.extend_from_slice(protocol.as_str().as_bytes());
    input.extend_from_slice(endpoint.to_string().as_bytes());
    base32_sha256_prefix(&input, 16)
}

/// The per-service chain prefixes kube-proxy's iptables mode creates and deletes
/// (`KUBE-XLB-`, externalTrafficPolicy Local's, in the releases before v1.24).
pub const SERVICE_CHAIN_PREFIXES: [&str; 6] = [
    "KUBE-SVC-",
    "KUBE-SVL-",
    "KUBE-EXT-",
    "KUBE-FW-",
    "KUBE-SEP-",
    "KUBE-XLB-",
];

/// The hash suffix of a per-service iptables chain (`KUBE-EXT-ABC...` → `ABC...`).
pub fn chain_hash(chain: &str) -> Option<&str> {
    SERVICE_CHAIN_PREFIXES
        .iter()
        .find_map(|p| chain.strip_prefix(p))
        .filter(|h| h.len() == 16)
}

/// nftables mode's service chain name, e.g. `service-ULMVA6XW-ns1/svc1/tcp/p80`.
pub fn nft_service_chain(prefix: &str, svc: &ServicePortRef, protocol: Protocol) -> String {
    let name = format!(
        "{}/{}/{}/{}",
        svc.namespace,
        svc.name,
        protocol.as_str(),
        svc.port_name
    );
    format!("{prefix}-{}-{name}", base32_sha256_prefix(name.as_bytes(), 8))
}

/// The hash kube-proxy puts in an nftables chain name, over the part after the prefix
/// (`ns1/svc1/tcp/p80__10.180.0.1/80` → `5OJB2KTY`).
pub fn nft_chain_hash(name: &str) -> String {
    base32_sha256_prefix(name.as_bytes(), 8)
}

/// Parses an nftables-mode per-service chain name (`external-HASH-ns/svc/tcp/port`, and
/// the `service-`, `local-`, `firewall-`, `endpoint-` forms) into its Service port and
/// protocol. Endpoint chains carry `__ip/port` after the port, which is ignored here.
pub fn parse_nft_service_chain(chain: &str) -> Option<(ServicePortRef, Protocol)> {
    let (_prefix, rest) = chain.split_once('-')?;
    let (_hash, name) = rest.split_once('-')?;
    let name = name.split("__").next()?;
    let mut parts = name.split('/');
    let namespace = parts.next()?;
    let svc = parts.next()?;
    let protocol = Protocol::parse(parts.next()?)?;
    let port_name = parts.next()?;
    if parts.next().is_some() || namespace.is_empty() || svc.is_empty() {
        return None;
    }
    Some((
        ServicePortRef {
            namespace: namespace.to_string(),
            name: svc.to_string(),
            port_name: port_name.to_string(),
        },
        protocol,
    ))
}

#[cfg(test)]
mod tests;
