//! `nft -j list ruleset` → explain's tables: every chain of every ip, ip6 and inet
//! table, each rule's matches as conditions and its verdict, NAT or vmap as the action,
//! and the named sets and maps with their elements.
//!
//! An inet table is run by both families' packets, so it becomes two tables, one per
//! family. Each copy holds the rules a packet of its family can match: nft makes
//! `ip daddr` imply `meta nfproto ipv4`, so a rule reading the other family's header
//! can never match and is left out of that copy (it is still in the other).
//!
//! Expressions are read with the scan's borrowed expression tree and rendered with its
//! renderer (`decode::nftables::json`), so a rule reads the same in explain as in a
//! finding. What cannot be read becomes a gap, a [`Cond::Unknown`] or an
//! [`Action::Unknown`]; nothing is dropped unsaid.
//!
//! [`Cond::Unknown`]: crate::heart::explain::model::Cond::Unknown
//! [`Action::Unknown`]: crate::heart::explain::model::Action::Unknown

mod rule;
mod set;

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use crate::decode::nftables::json::Expr;
use crate::heart::explain::model::{BaseChain, Chain, ChainType, Hook, RulePlace, Rulesets, Table};
use crate::heart::model::{Backend, Family};

use rule::{Lowered, RuleCx, lower_rule};
use set::{lower_set, number};

/// Why a document could not be read at all; anything less is a gap in [`Rulesets`].
#[derive(Debug, thiserror::Error)]
pub enum NftExplainError {
    #[error("{origin}: not valid JSON: {source}")]
    InvalidJson {
        origin: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{origin}: not an `nft -j list ruleset` document (expected {{\"nftables\": [...]}}): {source}")]
    NotARuleset {
        origin: String,
        #[source]
        source: serde_json::Error,
    },
}

/// `nft -j list ruleset` → one Table per nftables table, in the dump's order (an inet
/// table as an IPv4 and an IPv6 table). `skip(family, table_name)` says which tables to
/// leave out (iptables-nft's own `ip nat`, `ip filter`, … are read from iptables-save
/// instead). Several documents one after another are read as one ruleset.
pub fn parse_ruleset(
    json: &[u8],
    origin: &str,
    skip: &dyn Fn(Family, &str) -> bool,
) -> Result<Rulesets, NftExplainError> {
    let documents = read_documents(json, origin)?;
    let mut reader = Reader {
        origin,
        skip,
        tables: Vec::new(),
        index: HashMap::new(),
        gaps: Vec::new(),
        strays: BTreeMap::new(),
    };
    for object in documents.iter().flat_map(|d| d.nftables.iter()) {
        reader.object(object);
    }
    Ok(reader.finish())
}

#[derive(Deserialize)]
struct Document<'a> {
    #[serde(borrow)]
    nftables: Vec<Expr<'a>>,
}

fn read_documents<'a>(json: &'a [u8], origin: &str) -> Result<Vec<Document<'a>>, NftExplainError> {
    let classify = |source: serde_json::Error| match source.classify() {
        // Well-formed JSON of another shape.
        serde_json::error::Category::Data => NftExplainError::NotARuleset {
            origin: origin.to_string(),
            source,
        },
        _ => NftExplainError::InvalidJson {
            origin: origin.to_string(),
            source,
        },
    };
    let mut documents = Vec::new();
    for document in serde_json::Deserializer::from_slice(json).into_iter::<Document<'a>>() {
        documents.push(document.map_err(classify)?);
    }
    if documents.is_empty() {
        // Nothing but blanks: the error of reading one document says so.
        if let Err(e) = serde_json::from_slice::<Document<'a>>(json) {
            return Err(classify(e));
        }
    }
    Ok(documents)
}

struct RawTable<'d> {
    family: &'d str,
    name: &'d str,
    /// The families explain reads the table as; empty for arp, bridge and netdev.
    families: Vec<Family>,
    chains: Vec<RawChain<'d>>,
    chain_index: HashMap<&'d str, usize>,
    sets: Vec<RawSet<'d>>,
    set_index: HashMap<&'d str, usize>,
}

impl RawTable<'_> {
    fn label(&self) -> String {
        format!("{} {}", self.family, self.name)
    }
}

struct RawChain<'d> {
    body: &'d Expr<'d>,
    rules: Vec<&'d Expr<'d>>,
}

struct RawSet<'d> {
    body: &'d Expr<'d>,
    is_map: bool,
    /// Standalone `element` objects for this set.
    extra: Vec<&'d Expr<'d>>,
}

enum Slot {
    Read(usize),
    Skipped,
}

struct Reader<'d, 'o> {
    origin: &'o str,
    skip: &'o dyn Fn(Family, &str) -> bool,
    tables: Vec<RawTable<'d>>,
    index: HashMap<(&'d str, &'d str), Slot>,
    gaps: Vec<String>,
    /// Objects that name no declared table, chain or set, or are of a kind this reader
    /// does not know: counted, and told once each.
    strays: BTreeMap<String, usize>,
}

impl<'d> Reader<'d, '_> {
    fn object(&mut self, object: &'d Expr<'d>) {
        let Some((kind, body)) = object.single() else {
            return self.stray("an object that is not one nftables object".to_string());
        };
        let str_of = |key: &str| body.get(key).and_then(Expr::as_str);
        match kind {
            "table" => {
                let (Some(family), Some(name)) = (str_of("family"), str_of("name")) else {
                    return self.stray("a table without family or name".to_string());
                };
                self.table(family, name);
            }
            "chain" | "rule" | "set" | "map" | "element" => {
                let (Some(family), Some(table)) = (str_of("family"), str_of("table")) else {
                    return self.stray(format!("a {kind} without family or table"));
                };
                let t = match self.index.get(&(family, table)) {
                    Some(Slot::Read(t)) => *t,
                    Some(Slot::Skipped) => return,
                    None => return self.stray(format!("{kind}s of the undeclared table {family} {table}")),
                };
                self.member(t, kind, body);
            }
            // Stateful objects (named counters, quotas, helpers …) are read through the
            // rules that use them; flowtables only carry established flows.
            "metainfo" | "flowtable" | "counter" | "quota" | "limit" | "ct helper" | "ct timeout"
            | "ct expectation" | "synproxy" | "secmark" => {}
            other => self.stray(format!("`{other}` objects, which this explanation does not read")),
        }
    }

    fn table(&mut self, family: &'d str, name: &'d str) {
        if self.index.contains_key(&(family, name)) {
            return;
        }
        let candidates: &[Family] = match family {
            "ip" => &[Family::Ipv4],
            "ip6" => &[Family::Ipv6],
            "inet" => &[Family::Ipv4, Family::Ipv6],
            _ => &[],
        };
        let families: Vec<Family> = candidates
            .iter()
            .copied()
            .filter(|f| !(self.skip)(*f, name))
            .collect();
        if !candidates.is_empty() && families.is_empty() {
            self.index.insert((family, name), Slot::Skipped);
            return;
        }
        self.index.insert((family, name), Slot::Read(self.tables.len()));
        self.tables.push(RawTable {
            family,
            name,
            families,
            chains: Vec::new(),
            chain_index: HashMap::new(),
            sets: Vec::new(),
            set_index: HashMap::new(),
        });
    }

    fn member(&mut self, t: usize, kind: &str, body: &'d Expr<'d>) {
        let table = &mut self.tables[t];
        let Some(name) = body
            .get(if kind == "rule" { "chain" } else { "name" })
            .and_then(Expr::as_str)
        else {
            return self.stray(format!("a {kind} without a name"));
        };
        match kind {
            "chain" => {
                if !table.chain_index.contains_key(name) {
                    table.chain_index.insert(name, table.chains.len());
                    table.chains.push(RawChain {
                        body,
                        rules: Vec::new(),
                    });
                }
            }
            // Rules and sets of arp, bridge and netdev tables are not read.
            _ if table.families.is_empty() => {}
            "rule" => match table.chain_index.get(name) {
                Some(&c) => table.chains[c].rules.push(body),
                None => {
                    let label = table.label();
                    self.stray(format!("rules of the undeclared chain {name} of table {label}"));
                }
            },
            "set" | "map" => {
                if !table.set_index.contains_key(name) {
                    table.set_index.insert(name, table.sets.len());
                    table.sets.push(RawSet {
                        body,
                        is_map: kind == "map",
                        extra: Vec::new(),
                    });
                }
            }
            _ => match table.set_index.get(name) {
                Some(&s) => table.sets[s].extra.push(body),
                None => {
                    let label = table.label();
                    self.stray(format!("elements of the undeclared set {name} of table {label}"));
                }
            },
        }
    }

    fn stray(&mut self, what: String) {
        *self.strays.entry(what).or_default() += 1;
    }

    fn finish(mut self) -> Rulesets {
        let mut out = Rulesets::default();
        for raw in &self.tables {
            match raw.family {
                "ip" | "ip6" | "inet" => lower_table(raw, self.origin, &mut out),
                "arp" => {}
                "bridge" => {
                    let hooks = ["prerouting", "input", "forward"];
                    if raw
                        .chains
                        .iter()
                        .any(|c| hook_of(c).is_some_and(|h| hooks.contains(&h)))
                    {
                        out.gaps.push(format!(
                            "{}: bridge table {} has base chains at prerouting, input or forward, which \
                             bridged traffic passes; this explanation does not evaluate them",
                            self.origin, raw.name
                        ));
                    }
                }
                "netdev" => {
                    if raw.chains.iter().any(|c| hook_of(c) == Some("ingress")) {
                        out.gaps.push(format!(
                            "{}: netdev table {} has an ingress chain this explanation does not evaluate",
                            self.origin, raw.name
                        ));
                    }
                }
                other => out.gaps.push(format!(
                    "{}: table {other} {} is of a family this explanation does not read",
                    self.origin, raw.name
                )),
            }
        }
        for (what, count) in std::mem::take(&mut self.strays) {
            let times = if count == 1 {
                String::new()
            } else {
                format!(" ({count} objects)")
            };
            out.gaps.push(format!("{}: {what} not read{times}", self.origin));
        }
        out.gaps.append(&mut self.gaps);
        out
    }
}

fn hook_of<'d>(chain: &RawChain<'d>) -> Option<&'d str> {
    chain.body.get("hook").and_then(Expr::as_str)
}

/// One ip/ip6/inet table as a Table per family it is read for.
fn lower_table(raw: &RawTable<'_>, origin: &str, out: &mut Rulesets) {
    let label = raw.label();
    let timeouts: HashMap<&str, u32> = raw
        .sets
        .iter()
        .filter_map(|s| {
            let name = s.body.get("name").and_then(Expr::as_str)?;
            Some((name, timeout_seconds(s.body.get("timeout")?)?))
        })
        .collect();
    let mut sets: Vec<_> = raw
        .sets
        .iter()
        .map(|s| lower_set(s.body, s.is_map, &s.extra))
        .collect();
    for (i, &family) in raw.families.iter().enumerate() {
        // Notes are told once, not once per copy of an inet table.
        let first = i == 0;
        let cx = RuleCx {
            family,
            timeouts: &timeouts,
        };
        let mut chains = Vec::with_capacity(raw.chains.len());
        for chain in &raw.chains {
            let name = chain.body.get("name").and_then(Expr::as_str).unwrap_or_default();
            let base = match base_chain(chain.body) {
                Ok(base) => base,
                Err(reason) => {
                    if first {
                        out.gaps
                            .push(format!("{origin}: table {label} chain {name}: {reason}"));
                    }
                    None
                }
            };
            let mut rules = Vec::with_capacity(chain.rules.len());
            for body in &chain.rules {
                match lower_rule(body, &cx) {
                    Lowered::Rule(rule, notes) => {
                        if first {
                            let at = match rule.place {
                                RulePlace::Handle(h) => format!(" handle {h}"),
                                _ => String::new(),
                            };
                            for note in notes {
                                out.gaps
                                    .push(format!("{origin}: table {label} chain {name}{at}: {note}"));
                            }
                        }
                        rules.push(rule);
                    }
                    Lowered::OtherFamily => {}
                }
            }
            chains.push(Chain {
                name: name.to_string(),
                base,
                rules,
            });
        }
        let last = i + 1 == raw.families.len();
        out.tables.push(Table {
            backend: Backend::Nftables,
            family,
            name: label.clone(),
            origin: origin.to_string(),
            chains,
            sets: if last {
                std::mem::take(&mut sets)
            } else {
                sets.clone()
            },
        });
    }
}

/// The chain's hook, or None for a regular chain; Err says why a hooked chain is not
/// one explain runs.
fn base_chain(body: &Expr<'_>) -> Result<Option<BaseChain>, String> {
    let Some(hook_name) = body.get("hook").and_then(Expr::as_str) else {
        return Ok(None);
    };
    let Some(hook) = Hook::parse(hook_name) else {
        return Err(match hook_name {
            "ingress" => "an ingress chain this explanation does not evaluate".to_string(),
            other => format!("a chain at the hook {other}, which this explanation does not evaluate"),
        });
    };
    let kind = match body.get("type").and_then(Expr::as_str) {
        Some("filter") => ChainType::Filter,
        Some("nat") => ChainType::Nat,
        Some("route") => ChainType::Route,
        other => {
            return Err(format!(
                "a base chain of unknown type {}",
                other.unwrap_or("(none)")
            ));
        }
    };
    let priority = match body.get("prio") {
        Some(Expr::Str(p)) => priority(p),
        Some(p) => number_i32(p),
        None => None,
    };
    let Some(priority) = priority else {
        return Err("a base chain whose priority is not readable, so its order is unknown".to_string());
    };
    Ok(Some(BaseChain {
        hook,
        priority,
        kind,
        accepts: body.get("policy").and_then(Expr::as_str) != Some("drop"),
    }))
}

fn number_i32(value: &Expr<'_>) -> Option<i32> {
    match value {
        Expr::Int(n) => i32::try_from(*n).ok(),
        Expr::Uint(n) => i32::try_from(*n).ok(),
        _ => None,
    }
}

/// `-100`, `dstnat`, `filter + 10`, `dstnat - 10`: the ip/inet families' names.
fn priority(text: &str) -> Option<i32> {
    let text = text.trim();
    if let Ok(n) = text.parse() {
        return Some(n);
    }
    let (name, offset) = match text.find(['+', '-']) {
        Some(at) => {
            let n: i32 = text[at + 1..].trim().parse().ok()?;
            (
                text[..at].trim(),
                if text[at..].starts_with('-') { -n } else { n },
            )
        }
        None => (text, 0),
    };
    let base: i32 = match name {
        "raw" => -300,
        "mangle" => -150,
        "dstnat" => -100,
        "filter" => 0,
        "security" => 50,
        "srcnat" => 100,
        _ => return None,
    };
    base.checked_add(offset)
}

/// A set's timeout: seconds as a number, or nft's `3h`, `1d2h30m`, `10s` text.
fn timeout_seconds(value: &Expr<'_>) -> Option<u32> {
    if let Some(n) = number(value) {
        return u32::try_from(n).ok();
    }
    let text = value.as_str()?;
    let mut total: u64 = 0;
    let mut digits = String::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let c = rest.chars().next()?;
        if c.is_ascii_digit() {
            digits.push(c);
            rest = &rest[1..];
            continue;
        }
        let n: u64 = digits.parse().ok()?;
        digits.clear();
        let (unit, len) = match rest {
            r if r.starts_with("ms") => (0, 2),
            r if r.starts_with('d') => (86_400, 1),
            r if r.starts_with('h') => (3_600, 1),
            r if r.starts_with('m') => (60, 1),
            r if r.starts_with('s') => (1, 1),
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
        rest = &rest[len..];
    }
    if !digits.is_empty() {
        return None;
    }
    u32::try_from(total).ok()
}

#[cfg(test)]
mod tests;
