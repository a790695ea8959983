//! kube-proxy's nftables mode (`table ip kube-proxy`, `table ip6 kube-proxy`) → the
//! shared rule model.
//!
//! Two front ends read the two forms a node bundle may hold: [`parse_ruleset_json`] for
//! `nft -j list ruleset` (or `nft -j list table ip kube-proxy`) and
//! [`parse_ruleset_text`] for `nft list ruleset` (with or without `-a`). Both lower
//! kube-proxy's tables into the same small intermediate form (`TableIr`: chains with
//! their jumps and DNATs, maps with their elements), and one builder turns that into
//! [`RuleDump`]s, so the two forms of one ruleset give the same model.
//!
//! NodePorts live in map elements, not in rules: every element of `service-nodeports`
//! (`tcp . 30080 : goto external-…`) is a forwarding NodePort rule whose DNAT targets
//! are found by following the chain it jumps to, and every element of
//! `no-endpoint-nodeports` is a reject or drop rule (see the reference, section 5).
//!
//! Every other table in the ruleset (iptables-nft's `ip nat`, `ip filter`, firewalld's
//! `inet firewalld`, ...) is not kube-proxy's nftables mode and is ignored here; the
//! iptables parser reads iptables-nft's tables from `iptables-nft-save`.

pub mod build;
pub mod graph;
pub mod ir;
pub mod json;
pub mod kept;
pub mod text;

pub use crate::heart::model::{Family, RuleDump, Unparsed};
pub use crate::heart::repair::nft_table::{ChainView, ElementView, MapView, RuleView, TableView};

pub use build::{build_rule_dumps, build_sources};
pub use graph::RuleGraph;
pub use ir::{DnatError, DnatIr, ElementIr, ElementVerdict, MapIr, ParsedRuleset, RuleIr, TableIr};
pub use kept::{KeptMap, KeptTable, Unlisted, UpdateError};

/// Why a dump could not be read at all. Anything less (an odd object, a rule portdrift
/// does not understand) is kept as [`Unparsed`] in the result instead.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("{origin}: not valid JSON: {source}")]
    InvalidJson {
        origin: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{origin}: JSON is not an `nft -j list` dump (expected {{\"nftables\": [...]}}): {source}")]
    NotARuleset {
        origin: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{origin}: not an `nft list` dump: {reason} (line {line})")]
    NotNftText {
        origin: String,
        line: u32,
        reason: String,
    },
}

/// Parses `nft -j list ruleset` (or `nft -j list table ip kube-proxy`) into one
/// [`RuleDump`] per kube-proxy table present: `ip kube-proxy` (IPv4) first, then
/// `ip6 kube-proxy` (IPv6). A ruleset without either gives an empty vector.
pub fn parse_ruleset_json(input: &[u8], origin: &str) -> Result<Vec<RuleDump>, NftError> {
    let parsed = json::parse(input, origin)?;
    Ok(build_rule_dumps(&parsed, origin))
}

/// Parses `nft list ruleset` text (the bundle's `nft.txt`; `nft -a` adds the rule
/// handles repair needs) into the same [`RuleDump`]s [`parse_ruleset_json`] gives for
/// the same ruleset, with 1-based line numbers.
pub fn parse_ruleset_text(input: &str, origin: &str) -> Result<Vec<RuleDump>, NftError> {
    let parsed = text::parse(input, origin)?;
    Ok(build_rule_dumps(&parsed, origin))
}

/// The names kube-proxy gives the things this parser reads (pkg/proxy/nftables).
pub const KUBE_PROXY_TABLE: &str = "kube-proxy";
const SERVICE_NODEPORTS_MAP: &str = "service-nodeports";
const NO_ENDPOINT_NODEPORTS_MAP: &str = "no-endpoint-nodeports";
const REJECT_CHAIN: &str = "reject-chain";
const NAT_PREROUTING: &str = "nat-prerouting";

/// Which kube-proxy table `family`/`name` is, if it is one. Only `ip` and `ip6` count:
/// kube-proxy runs one proxier per family and never writes an `inet` table.
fn kube_proxy_family(family: &str, table: &str) -> Option<Family> {
    match (family, table) {
        ("ip", KUBE_PROXY_TABLE) => Some(Family::Ipv4),
        ("ip6", KUBE_PROXY_TABLE) => Some(Family::Ipv6),
        _ => None,
    }
}

/// The table as `nft` commands name it, for identities (`nft delete rule ip kube-proxy …`).
pub fn table_label(family: Family) -> &'static str {
    match family {
        Family::Ipv4 => "ip kube-proxy",
        Family::Ipv6 => "ip6 kube-proxy",
    }
}

/// kube-proxy treats any chain whose name contains `/` as a per-service chain (the
/// `service-`, `external-`, `local-`, `firewall-` and `endpoint-` chains).
fn is_service_chain(name: &str) -> bool {
    name.contains('/')
}

/// Cuts a line to a length a report can show, on a character boundary.
fn readable(text: &str) -> String {
    const MAX: usize = 200;
    if text.len() <= MAX {
        return text.to_string();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

pub fn unparsed(line: u32, text: &str, reason: impl Into<String>) -> Unparsed {
    Unparsed {
        line,
        text: readable(text),
        reason: reason.into(),
    }
}

/// Reads `nft -j list table ip|ip6 kube-proxy` documents into [`TableView`]s.
pub fn table_views_json(input: &[u8], origin: &str) -> Result<Vec<TableView>, NftError> {
    let parsed = json::parse(input, origin)?;
    let unattributed = !parsed.unattributed.is_empty();
    Ok(parsed
        .tables
        .into_iter()
        .map(|t| TableView {
            family: t.family,
            table: table_label(t.family),
            complete: t.complete && t.unparsed.is_empty() && !unattributed,
            chains: t
                .chains
                .iter()
                .map(|c| ChainView {
                    name: c.name.to_string(),
                    rules: c
                        .rules
                        .iter()
                        .map(|r| RuleView {
                            handle: r.handle,
                            jumps: r.jumps.iter().map(|j| j.to_string()).collect(),
                            dnat: r.dnat.as_ref().map(|d| d.text.to_string()),
                        })
                        .collect(),
                })
                .collect(),
            maps: t
                .maps
                .iter()
                .map(|m| MapView {
                    name: m.name.to_string(),
                    elements: m
                        .elements
                        .iter()
                        .map(|e| ElementView {
                            key: e.key.clone(),
                            text: e.text(),
                            chain: e.verdict.chain().map(str::to_string),
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect())
}

#[cfg(test)]
mod tests;
