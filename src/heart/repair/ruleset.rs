//! The whole ruleset of one backend, as repair needs to see it: every chain of every
//! table with its rules exactly as the dump printed them, and who jumps where.
//!
//! The scan's parsers keep only what NodePort analysis needs; repair must know more
//! before it deletes anything: whether another rule still jumps to a chain, which rules
//! an orphaned chain still holds, whether a rule is still there verbatim. Both views are
//! pure: a dump's text in, a value out. A dump with anything unreadable is marked
//! incomplete, and repair acts on nothing in it.

use std::collections::HashMap;

use crate::decode::iptables::tokens::tokens;
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
    fn chain_mut(&mut self, name: &str) -> Option<&mut IptChain> {
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
    /// Reads an `iptables-save` dump. Never fails: what it cannot read is a problem.
    pub fn parse(text: &str) -> IptablesRuleset {
        let mut out = IptablesRuleset::default();
        let mut open: Option<IptTable> = None;
        for (n, raw) in text.lines().enumerate() {
            let number = n + 1;
            let line = raw.trim_end_matches([' ', '\t', '\r']);
            if line.is_empty() {
                continue;
            }
            if let Some(comment) = line.strip_prefix('#') {
                if comment.contains("is incompatible, use 'nft' tool") {
                    out.problems.push(format!("line {number}: {}", comment.trim()));
                }
                continue;
            }
            if let Some(name) = line.strip_prefix('*') {
                if let Some(t) = open.take() {
                    out.problems.push(format!("table {} has no COMMIT", t.name));
                    out.tables.push(t);
                }
                // iptables-save prints each table once; a second one means a damaged
                // or spliced dump, and a delete planned from one copy could hit a rule
                // the kernel holds only as the other shows it.
                if out.tables.iter().any(|t| t.name == name) {
                    out.problems
                        .push(format!("line {number}: table {name} appears twice"));
                }
                open = Some(IptTable {
                    name: name.to_string(),
                    ..IptTable::default()
                });
                continue;
            }
            let Some(table) = open.as_mut() else {
                out.problems.push(format!("line {number}: outside a table"));
                continue;
            };
            if line == "COMMIT" {
                out.tables.extend(open.take());
                continue;
            }
            if let Some(decl) = line.strip_prefix(':') {
                let mut words = decl.split(' ');
                let name = words.next().unwrap_or("");
                let policy = words.next().unwrap_or("-");
                if name.is_empty() || table.index.contains_key(name) {
                    out.problems.push(format!("line {number}: bad chain declaration"));
                    continue;
                }
                table.index.insert(name.to_string(), table.chains.len());
                table.chains.push(IptChain {
                    name: name.to_string(),
                    builtin: policy != "-",
                    rules: Vec::new(),
                });
                continue;
            }
            match read_rule(line) {
                Ok((chain, rule)) => match table.chain_mut(chain) {
                    Some(c) => c.rules.push(rule),
                    None => out
                        .problems
                        .push(format!("line {number}: rule in undeclared chain {chain}")),
                },
                Err(why) => out.problems.push(format!("line {number}: {why}")),
            }
        }
        if let Some(t) = open {
            out.problems
                .push(format!("table {} has no COMMIT: truncated", t.name));
            out.tables.push(t);
        }
        out
    }

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

/// Splits `-A CHAIN spec` and finds its `-j`/`-g` target.
fn read_rule(line: &str) -> Result<(&str, IptRule), String> {
    let chain = rule_chain(line).ok_or("not an iptables-save line")?;
    let spec = rule_spec(line).unwrap_or("");
    let mut target = None;
    let mut words = tokens(spec);
    while let Some(word) = words.next() {
        let word = word.map_err(|_| "unterminated quote".to_string())?;
        if matches!(word.as_ref(), "-j" | "--jump" | "-g" | "--goto") {
            let value = words
                .next()
                .transpose()
                .map_err(|_| "unterminated quote".to_string())?;
            target = value.map(|v| v.into_owned());
        }
    }
    Ok((
        chain,
        IptRule {
            line: line.to_string(),
            target,
        },
    ))
}

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

#[cfg(test)]
mod tests;
