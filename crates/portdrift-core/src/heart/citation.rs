//! Where a finding says its rule is: something a person can look up.
//!
//! A dump the reader holds (a bundle's file, a pasted listing) is cited by file and
//! line. Rules read from the live node are not kept anywhere the reader can see, so a
//! line of the listing portdrift read would name nothing: they are cited by table, chain
//! and the rule's number in the chain (`iptables -t nat -L CHAIN --line-numbers`), with
//! the nf_tables handle where there is one (`nft -a list chain ip nat CHAIN`), which the
//! kernel keeps while the rule stands.

use std::cmp::Ordering;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::heart::model::{Backend, Family, Lookup, RuleDump, RuleIdentity, RuleText};
use crate::heart::repair::ruleset::iptables_tools;

/// Where a finding says its rule is: its JSON's `rule_source`, in the words
/// [`fmt::Display`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Citation {
    /// A file by line (`iptables-save.txt:123`), or as a whole.
    Line(Location),
    /// A place in a file that has no lines to count, nft's JSON:
    /// `nft.json: table ip kube-proxy chain endpoint-X handle 31`.
    InFile { origin: Arc<str>, place: Place },
    /// A place on the live node, after the tool that lists it:
    /// `iptables-nft table nat chain KUBE-SEP-X rule 2 handle 124`.
    Live { tool: Tool, place: Place },
    /// On the live node, a line that has no chain to name (one not understood), by its
    /// number in a listing: `iptables-nft-save line 95`.
    ListedLine { listing: Listing, line: u32 },
    /// Read back from a document another portdrift wrote: kept as written.
    Written(Box<str>),
}

/// A file, or a line of it: `origin:line`, the origin alone for line 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub origin: Arc<str>,
    /// 1-based; 0 for the file as a whole (or a source without lines).
    pub line: u32,
}

/// A rule, chain or map element in a table, as `iptables -L --line-numbers` and
/// `nft -a list` find it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// `table T chain C`, with the rule's number in the chain and its nf_tables handle
    /// when there are: `table nat chain KUBE-SEP-X rule 2 handle 124`.
    Chain {
        table: Arc<str>,
        chain: Arc<str>,
        rule: Option<NonZeroU32>,
        handle: Option<u64>,
    },
    /// `table ip kube-proxy map service-nodeports element tcp . 30080`.
    Element {
        table: Arc<str>,
        map: Arc<str>,
        key: Arc<str>,
    },
}

/// The command that lists a backend's rules in a family on the live node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tool {
    pub backend: Backend,
    pub family: Family,
}

/// What a live line not understood is counted in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Listing {
    /// What the backend's save tool prints (a read over netlink renders the same lines).
    Save(Tool),
    /// A listing the reader printed itself (nft's), by its origin.
    Origin(Arc<str>),
}

impl Citation {
    /// A file (or any source) as a whole.
    pub fn file(origin: impl Into<Arc<str>>) -> Citation {
        Citation::line(origin, 0)
    }

    /// Line `line` of a file; the file as a whole for line 0.
    pub fn line(origin: impl Into<Arc<str>>, line: u32) -> Citation {
        Citation::Line(Location {
            origin: origin.into(),
            line,
        })
    }

    /// What the text begins with, and how what follows it begins, ordered as the
    /// texts are: nothing, then ` line`, ` table`, `: table` and `:N`.
    fn head(&self) -> (&str, u8) {
        match self {
            Citation::Line(l) if l.line == 0 => (&l.origin, 0),
            Citation::ListedLine { listing, .. } => (listing.name(), 1),
            Citation::Live { tool, .. } => (tool.name(), 2),
            Citation::InFile { origin, .. } => (origin, 3),
            Citation::Line(l) => (&l.origin, 4),
            Citation::Written(text) => (text, 5),
        }
    }
}

impl RuleDump {
    /// Where the rule of a NodePort rule or DNAT target is.
    pub fn cite_rule(&self, rule: &RuleText, identity: &RuleIdentity) -> Citation {
        match identity {
            RuleIdentity::Iptables { table, chain, .. } => {
                self.cite_iptables(table.clone(), chain.clone(), rule)
            }
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
                let place = match element {
                    Some(key) => Place::Element {
                        table: table.clone(),
                        map: container.clone(),
                        key: key.clone(),
                    },
                    None => Place::Chain {
                        table: table.clone(),
                        chain: container.clone(),
                        rule: None,
                        handle: *handle,
                    },
                };
                self.cite_place(place)
            }
        }
    }

    /// Where an iptables rule of `table`'s `chain` is.
    pub fn cite_in(&self, table: &str, chain: &str, rule: &RuleText) -> Citation {
        self.cite_iptables(table.into(), chain.into(), rule)
    }

    fn cite_iptables(&self, table: Arc<str>, chain: Arc<str>, rule: &RuleText) -> Citation {
        if self.lookup == Lookup::Lines {
            return self.cite_line(rule.line);
        }
        self.cite_place(Place::Chain {
            table,
            chain,
            rule: NonZeroU32::new(rule.position),
            handle: rule.handle.map(|h| h.get()),
        })
    }

    /// Where a chain is (one declared on `line` of a file).
    pub fn cite_chain(&self, table: &str, chain: &str, line: u32) -> Citation {
        match self.lookup {
            Lookup::Lines => self.cite_line(line),
            Lookup::Chains => self.cite_place(Place::Chain {
                table: table.into(),
                chain: chain.into(),
                rule: None,
                handle: None,
            }),
        }
    }

    /// Where a line is that was read but not understood as a rule. On the live node
    /// the line is counted in what the backend's save tool prints (a read over netlink
    /// renders the same lines), since such a line has no chain to name.
    pub fn cite_line(&self, line: u32) -> Citation {
        match (self.lookup, line) {
            (_, 0) | (Lookup::Lines, _) => Citation::line(self.origin.as_str(), line),
            (Lookup::Chains, _) => {
                let listing = match self.backend {
                    Backend::Nftables => Listing::Origin(self.origin.as_str().into()),
                    _ => Listing::Save(self.tool()),
                };
                Citation::ListedLine { listing, line }
            }
        }
    }

    /// The source as a whole.
    pub fn cite_whole(&self) -> Citation {
        Citation::file(self.origin.as_str())
    }

    /// `place` after the tool that shows it on the live node, or the file that holds it.
    fn cite_place(&self, place: Place) -> Citation {
        match self.lookup {
            Lookup::Lines => Citation::InFile {
                origin: self.origin.as_str().into(),
                place,
            },
            Lookup::Chains => Citation::Live {
                tool: self.tool(),
                place,
            },
        }
    }

    fn tool(&self) -> Tool {
        Tool {
            backend: self.backend,
            family: self.family,
        }
    }
}

impl Tool {
    fn name(self) -> &'static str {
        match self.backend {
            Backend::Nftables => "nft",
            _ => iptables_tool(self.backend, self.family),
        }
    }
}

impl Listing {
    fn name(&self) -> &str {
        match self {
            Listing::Save(tool) => iptables_save(tool.backend, tool.family),
            Listing::Origin(origin) => origin,
        }
    }
}

impl fmt::Display for Citation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Citation::Line(l) if l.line == 0 => f.write_str(&l.origin),
            Citation::Line(l) => write!(f, "{}:{}", l.origin, l.line),
            Citation::InFile { origin, place } => write!(f, "{origin}: {place}"),
            Citation::Live { tool, place } => write!(f, "{} {place}", tool.name()),
            Citation::ListedLine { listing, line } => write!(f, "{} line {line}", listing.name()),
            Citation::Written(text) => f.write_str(text),
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Chain {
                table,
                chain,
                rule,
                handle,
            } => {
                write!(f, "table {table} chain {chain}")?;
                if let Some(n) = rule {
                    write!(f, " rule {n}")?;
                }
                if let Some(h) = handle {
                    write!(f, " handle {h}")?;
                }
                Ok(())
            }
            Place::Element { table, map, key } => write!(f, "table {table} map {map} element {key}"),
        }
    }
}

/// As people count: by file (or tool), then line 97 before line 100, rule 9 before
/// rule 10 — the order of the texts, read with their numbers as numbers (names too:
/// `KUBE-SEP-A7` before `KUBE-SEP-A10`).
impl Ord for Citation {
    fn cmp(&self, other: &Citation) -> Ordering {
        let ((head, shape), (other_head, other_shape)) = (self.head(), other.head());
        if head != other_head && (head.starts_with(other_head) || other_head.starts_with(head)) {
            // One name begins the other (`nft`, `nft -j list ruleset`): what follows the
            // shorter one decides, as in the texts.
            return natural(&self.to_string(), &other.to_string());
        }
        natural(head, other_head)
            .then(shape.cmp(&other_shape))
            .then_with(|| match (self, other) {
                (Citation::Line(a), Citation::Line(b)) => a.line.cmp(&b.line),
                (
                    Citation::ListedLine { listing: la, line: a },
                    Citation::ListedLine { listing: lb, line: b },
                ) => a.cmp(b).then_with(|| la.cmp(lb)),
                (Citation::InFile { place: a, .. }, Citation::InFile { place: b, .. }) => a.cmp(b),
                // `nft` is one tool in both families: the family decides last.
                (Citation::Live { tool: ta, place: a }, Citation::Live { tool: tb, place: b }) => {
                    a.cmp(b).then(ta.cmp(tb))
                }
                // Same head and shape: the head is the whole of the rest.
                _ => Ordering::Equal,
            })
    }
}

impl PartialOrd for Citation {
    fn partial_cmp(&self, other: &Citation) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Place {
    fn table(&self) -> &str {
        match self {
            Place::Chain { table, .. } | Place::Element { table, .. } => table,
        }
    }
}

impl Ord for Place {
    fn cmp(&self, other: &Place) -> Ordering {
        natural(self.table(), other.table()).then_with(|| match (self, other) {
            (
                Place::Chain {
                    chain: a,
                    rule: ra,
                    handle: ha,
                    ..
                },
                Place::Chain {
                    chain: b,
                    rule: rb,
                    handle: hb,
                    ..
                },
            ) => natural(a, b).then(ra.cmp(rb)).then(ha.cmp(hb)),
            (Place::Element { map: a, key: ka, .. }, Place::Element { map: b, key: kb, .. }) => {
                natural(a, b).then_with(|| natural(ka, kb))
            }
            // `chain` before `map`.
            (Place::Chain { .. }, Place::Element { .. }) => Ordering::Less,
            (Place::Element { .. }, Place::Chain { .. }) => Ordering::Greater,
        })
    }
}

impl PartialOrd for Place {
    fn partial_cmp(&self, other: &Place) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A citation's JSON is its text.
impl Serialize for Citation {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Read back, a citation is only shown: it is kept as written.
impl<'de> Deserialize<'de> for Citation {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Citation, D::Error> {
        String::deserialize(deserializer).map(|text| Citation::Written(text.into_boxed_str()))
    }
}

/// Names in the order [`NaturalOrder`] gives, the same spelled alike.
fn natural(a: &str, b: &str) -> Ordering {
    NaturalOrder(a).cmp(&NaturalOrder(b)).then_with(|| a.cmp(b))
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

/// The command that saves a backend's rules for a family: repair's, which reads them
/// back with it. A listing of nft's own is named by its origin instead.
fn iptables_save(backend: Backend, family: Family) -> &'static str {
    iptables_tools(backend, family).map_or("nft", |(save, _)| save)
}

/// A name ordered as people count: `KUBE-SEP-A7` before `KUBE-SEP-A10`. Hand-written:
/// a few lines, where a crate would be one more dependency to order a report's findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NaturalOrder<'a>(&'a str);

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
