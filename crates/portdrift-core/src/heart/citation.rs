//! Where a finding says its rule is: something a person can look up.
//!
//! A dump the reader holds (a bundle's file, a pasted listing) is cited by file and
//! line. Rules read from the live node are not kept anywhere the reader can see, so a
//! line of the listing portdrift read would name nothing: they are cited by table, chain
//! and the rule's number in the chain (`iptables -t nat -L CHAIN --line-numbers`), with
//! the nf_tables handle where there is one (`nft -a list chain ip nat CHAIN`), which the
//! kernel keeps while the rule stands.

use std::fmt::Write as _;

use crate::heart::model::{Backend, Family, Lookup, RuleIdentity, RuleSource, RuleText};

impl RuleSource {
    /// Where the rule of a NodePort rule or DNAT target is.
    pub fn cite_rule(&self, rule: &RuleText, identity: &RuleIdentity) -> String {
        match identity {
            RuleIdentity::Iptables { table, chain, .. } => self.cite_in(table, chain, rule),
            RuleIdentity::Nftables {
                table,
                container,
                handle,
                element,
            } => {
                if self.lookup == Lookup::Lines && rule.line > 0 {
                    return self.cite_line(rule.line);
                }
                // The identity's table names its family (`ip kube-proxy`), as nft does.
                let mut at = format!("table {table} ");
                match (element, handle) {
                    (Some(key), _) => {
                        let _ = write!(at, "map {container} element {key}");
                    }
                    (None, Some(h)) => {
                        let _ = write!(at, "chain {container} handle {h}");
                    }
                    (None, None) => {
                        let _ = write!(at, "chain {container}");
                    }
                }
                self.prefixed(at)
            }
        }
    }

    /// Where an iptables rule of `table`'s `chain` is.
    pub fn cite_in(&self, table: &str, chain: &str, rule: &RuleText) -> String {
        if self.lookup == Lookup::Lines {
            return self.cite_line(rule.line);
        }
        let mut at = format!("table {table} chain {chain}");
        if rule.position > 0 {
            let _ = write!(at, " rule {}", rule.position);
        }
        if let Some(h) = rule.handle {
            let _ = write!(at, " handle {h}");
        }
        self.prefixed(at)
    }

    /// Where a chain is (one declared on `line` of a file).
    pub fn cite_chain(&self, table: &str, chain: &str, line: u32) -> String {
        match self.lookup {
            Lookup::Lines => self.cite_line(line),
            Lookup::Chains => self.prefixed(format!("table {table} chain {chain}")),
        }
    }

    /// Where a line is that was read but not understood as a rule. On the live node
    /// the line is counted in what the backend's save tool prints (a read over netlink
    /// renders the same lines), since such a line has no chain to name.
    pub fn cite_line(&self, line: u32) -> String {
        match (self.lookup, line) {
            (_, 0) => self.origin.clone(),
            (Lookup::Lines, _) => format!("{}:{line}", self.origin),
            (Lookup::Chains, _) => match self.backend {
                Backend::Nftables => format!("{} line {line}", self.origin),
                _ => format!("{}-save line {line}", iptables_tool(self.backend, self.family)),
            },
        }
    }

    /// `place` after the tool that shows it on the live node, or the file that holds it.
    fn prefixed(&self, place: String) -> String {
        match self.lookup {
            Lookup::Lines => format!("{}: {place}", self.origin),
            Lookup::Chains => match self.backend {
                Backend::Nftables => format!("nft {place}"),
                _ => format!("{} {place}", iptables_tool(self.backend, self.family)),
            },
        }
    }
}

/// The command that lists a backend's rules for a family.
fn iptables_tool(backend: Backend, family: Family) -> &'static str {
    match (backend, family) {
        (Backend::IptablesLegacy, Family::Ipv4) => "iptables-legacy",
        (Backend::IptablesLegacy, Family::Ipv6) => "ip6tables-legacy",
        (_, Family::Ipv4) => "iptables-nft",
        (_, Family::Ipv6) => "ip6tables-nft",
    }
}

/// A citation's text ordered as people count: `rule 9` before `rule 10`, `:97` before
/// `:100`. Hand-written: a few lines, where a crate would be one more dependency to
/// order a report's findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NaturalOrder<'a>(pub &'a str);

impl Ord for NaturalOrder<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let (mut a, mut b) = (self.0.as_bytes(), other.0.as_bytes());
        loop {
            match (a.first(), b.first()) {
                (None, None) => return std::cmp::Ordering::Equal,
                (None, Some(_)) => return std::cmp::Ordering::Less,
                (Some(_), None) => return std::cmp::Ordering::Greater,
                (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                    let (da, ra) = split_digits(a);
                    let (db, rb) = split_digits(b);
                    // Without leading zeros, the longer run is the larger number.
                    let (na, nb) = (trim_zeros(da), trim_zeros(db));
                    let by_value = na.len().cmp(&nb.len()).then(na.cmp(nb));
                    if by_value.is_ne() {
                        return by_value;
                    }
                    (a, b) = (ra, rb);
                }
                (Some(x), Some(y)) if x != y => return x.cmp(y),
                _ => (a, b) = (&a[1..], &b[1..]),
            }
        }
    }
}

impl PartialOrd for NaturalOrder<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

fn split_digits(s: &[u8]) -> (&[u8], &[u8]) {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    s.split_at(n)
}

fn trim_zeros(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| **b == b'0').count();
    &s[n..]
}

#[cfg(test)]
mod tests;
