//! The whole ruleset of one backend, as repair needs to see it: every chain of every
//! table with its rules exactly as the dump printed them, and who jumps where.
//!
//! The scan's parsers keep only what NodePort analysis needs; repair must know more
//! before it deletes anything: whether another rule still jumps to a chain, which rules
//! an orphaned chain still holds, whether a rule is still there verbatim. The dump's
//! text is read by `decode::ruleset`. A dump with anything unreadable is marked
//! incomplete, and repair acts on nothing in it.

use std::collections::HashMap;

use crate::heart::model::{Backend, Family};

/// One iptables backend and family (`iptables-nft-save` output), every table.
#[derive(Debug, Clone, Default)]
pub struct IptablesRuleset {
    pub tables: Vec<IptTable>,
    /// What made the dump untrustworthy (unreadable lines, a missing COMMIT, a table
    /// the tool could not print). Empty when the dump was read in full.
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct IptTable {
    pub name: String,
    pub chains: Vec<IptChain>,
    index: HashMap<String, usize>,
}

#[derive(Debug, Clone)]
pub struct IptChain {
    pub name: String,
    /// A built-in chain (`:PREROUTING ACCEPT`), as opposed to a user chain (`:KUBE-X -`).
    pub builtin: bool,
    pub rules: Vec<IptRule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IptRule {
    /// The line as printed: `-A <chain> <spec>`.
    pub line: String,
    /// The chain or target named by `-j`/`-g`.
    pub target: Option<String>,
}

impl IptRule {
    /// The arguments after `-A <chain>`: what `-D <chain>` takes.
    pub fn spec(&self) -> &str {
        rule_spec(&self.line).unwrap_or("")
    }
}

/// `-A CHAIN spec` → `spec` (None when the line is not a rule).
pub fn rule_spec(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("-A ")?.trim_start_matches(' ');
    let at = rest.find(' ')?;
    Some(rest[at + 1..].trim_start_matches(' '))
}

/// `-A CHAIN spec` → `CHAIN`.
pub fn rule_chain(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("-A ")?.trim_start_matches(' ');
    Some(rest.split(' ').next().unwrap_or(rest)).filter(|c| !c.is_empty())
}

impl IptTable {
    /// A table without chains yet.
    pub fn new(name: &str) -> IptTable {
        IptTable {
            name: name.to_string(),
            ..IptTable::default()
        }
    }

    /// Declares a chain; false (and nothing declared) when the name is empty or taken.
    pub fn declare_chain(&mut self, name: &str, builtin: bool) -> bool {
        if name.is_empty() || self.index.contains_key(name) {
            return false;
        }
        self.index.insert(name.to_string(), self.chains.len());
        self.chains.push(IptChain {
            name: name.to_string(),
            builtin,
            rules: Vec::new(),
        });
        true
    }

    pub fn chain_mut(&mut self, name: &str) -> Option<&mut IptChain> {
        self.index.get(name).map(|&i| &mut self.chains[i])
    }

    pub fn chain(&self, name: &str) -> Option<&IptChain> {
        self.index.get(name).map(|&i| &self.chains[i])
    }

    /// Every rule in the table that jumps (or goes) to `chain`, with the chain it sits in.
    pub fn referrers<'a>(&'a self, chain: &'a str) -> impl Iterator<Item = (&'a IptChain, &'a IptRule)> + 'a {
        self.chains.iter().flat_map(move |c| {
            c.rules
                .iter()
                .filter(move |r| r.target.as_deref() == Some(chain))
                .map(move |r| (c, r))
        })
    }
}

impl IptablesRuleset {
    pub fn complete(&self) -> bool {
        self.problems.is_empty()
    }

    pub fn table(&self, name: &str) -> Option<&IptTable> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// Where a rule line sits: every (table, chain) holding exactly this line.
    pub fn locate<'a>(&'a self, line: &'a str) -> impl Iterator<Item = (&'a IptTable, &'a IptChain)> + 'a {
        self.tables.iter().flat_map(move |t| {
            t.chains
                .iter()
                .filter(move |c| c.rules.iter().any(|r| r.line == line))
                .map(move |c| (t, c))
        })
    }

    /// Whether kube-proxy's iptables structure is present (its dispatch chains).
    pub fn has_kube_proxy(&self) -> bool {
        self.table("nat")
            .is_some_and(|t| t.chain("KUBE-SERVICES").is_some() || t.chain("KUBE-NODEPORTS").is_some())
    }

    /// The tables holding kube-proxy's canary chain.
    pub fn canary_tables(&self) -> Vec<&str> {
        self.tables
            .iter()
            .filter(|t| t.chain(CANARY_CHAIN).is_some())
            .map(|t| t.name.as_str())
            .collect()
    }
}

/// kube-proxy's canary: when it disappears, kube-proxy resyncs everything.
pub const CANARY_CHAIN: &str = "KUBE-PROXY-CANARY";

/// The dump tool and restore tool for an iptables backend and family.
pub fn iptables_tools(backend: Backend, family: Family) -> Option<(&'static str, &'static str)> {
    Some(match (backend, family) {
        (Backend::IptablesNft, Family::Ipv4) => ("iptables-nft-save", "iptables-nft-restore"),
        (Backend::IptablesNft, Family::Ipv6) => ("ip6tables-nft-save", "ip6tables-nft-restore"),
        (Backend::IptablesLegacy, Family::Ipv4) => ("iptables-legacy-save", "iptables-legacy-restore"),
        (Backend::IptablesLegacy, Family::Ipv6) => ("ip6tables-legacy-save", "ip6tables-legacy-restore"),
        (Backend::Nftables, _) => return None,
    })
}
