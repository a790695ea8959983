//! kube-proxy's nftables table as repair sees it: chains with their rules' handles and
//! jumps, verdict-map elements.

use crate::heart::model::Family;

/// kube-proxy's nftables table in full, as repair needs it: every chain with every
/// rule's handle and jumps, every verdict-map element. Read by `decode::nftables`
/// from the same JSON as the scan's rules.
#[derive(Debug, Clone)]
pub struct TableView {
    pub family: Family,
    /// `ip kube-proxy` or `ip6 kube-proxy`, as `nft` commands name it.
    pub table: &'static str,
    /// The dump was read in full and every object in it understood.
    pub complete: bool,
    pub chains: Vec<ChainView>,
    pub maps: Vec<MapView>,
}

#[derive(Debug, Clone)]
pub struct ChainView {
    pub name: String,
    pub rules: Vec<RuleView>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleView {
    pub handle: Option<u64>,
    /// Chains this rule jumps or goes to (also inside inline verdict maps).
    pub jumps: Vec<String>,
    /// The rule as `nft list` prints it, for a DNAT rule.
    pub dnat: Option<String>,
}

#[derive(Debug, Clone)]
pub struct MapView {
    pub name: String,
    pub elements: Vec<ElementView>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementView {
    /// `tcp . 30080`.
    pub key: String,
    /// The element as `nft list` prints it (what findings show as the rule).
    pub text: String,
    /// The chain its verdict goes or jumps to.
    pub chain: Option<String>,
}

impl TableView {
    pub fn chain(&self, name: &str) -> Option<&ChainView> {
        self.chains.iter().find(|c| c.name == name)
    }
}
