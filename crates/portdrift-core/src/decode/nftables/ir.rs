//! The intermediate form both front ends lower kube-proxy's tables into: chains with
//! their jumps and DNATs, maps with their elements.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::decode::name_index::NameIndex;
use crate::heart::model::{Family, Unparsed};

/// What a front end found in one dump: kube-proxy's tables, plus the things it could
/// not attribute to any table (they are reported with every kube-proxy table, since
/// they may belong to one).
#[derive(Debug, Default)]
pub struct ParsedRuleset<'a> {
    pub tables: Vec<TableIr<'a>>,
    pub unattributed: Vec<Unparsed>,
}

impl<'a> ParsedRuleset<'a> {
    /// The IR of kube-proxy's table for `family`, created on first mention.
    pub fn table_mut(&mut self, family: Family) -> &mut TableIr<'a> {
        match self.tables.iter().position(|t| t.family == family) {
            Some(i) => &mut self.tables[i],
            None => {
                self.tables.push(TableIr::new(family));
                self.tables.last_mut().expect("just pushed")
            }
        }
    }

    /// Marks incomplete each kube-proxy table that a dump's text or JSON shows only in
    /// part, as listings of part of it do, so that nothing is concluded missing from it.
    /// A netlink read lists every chain and element.
    pub(crate) fn note_what_is_left_out(&mut self) {
        self.note_elements_left_out();
        self.note_chains_left_out();
    }

    /// Service chains but not one map element: the elements were left out (`nft -t
    /// list ruleset`, `nft list chains`), since kube-proxy reaches every Service chain
    /// through its maps (`service-ips` at least).
    fn note_elements_left_out(&mut self) {
        for table in &mut self.tables {
            let service_chains = table
                .chains
                .iter()
                .filter(|c| super::is_service_chain(&c.name))
                .count();
            if service_chains == 0 || table.maps.iter().any(|m| !m.elements.is_empty()) {
                continue;
            }
            table.complete = false;
            table.notes.push(format!(
                "the table has {service_chains} Service chains but no map element, though its maps lead to every Service: the dump leaves elements out, as `nft -t list ruleset` and `nft list chains` do; capture it with `nft list ruleset` or `nft -j list ruleset`"
            ));
        }
    }

    /// Jumps and map verdicts to chains the dump does not hold: the kernel refuses
    /// such a jump and keeps a chain while one leads to it, so the dump shows part of
    /// the table (`nft list map …`, a chain cut out of a paste).
    fn note_chains_left_out(&mut self) {
        for table in &mut self.tables {
            let rule_jumps = table
                .chains
                .iter()
                .flat_map(|c| &c.rules)
                .flat_map(|r| &r.jumps)
                .map(|j| &**j);
            let element_jumps = table
                .maps
                .iter()
                .flat_map(|m| &m.elements)
                .filter_map(|e| e.verdict.chain());
            let mut absent = rule_jumps
                .chain(element_jumps)
                .filter(|name| table.chain_position_of(name).is_none());
            let Some(first) = absent.next() else { continue };
            let (first, more) = (first.to_string(), absent.count());
            table.complete = false;
            table.notes.push(format!(
                "{} lead to chains the dump does not hold ({first}{}), which the kernel never allows: the dump shows part of the table, as `nft list map` does; capture it with `nft list ruleset` or `nft -j list ruleset`",
                crate::heart::words::count_of(more + 1, "jump"),
                if more > 0 { ", …" } else { "" }
            ));
        }
    }
}

/// One kube-proxy table, reduced to what NodePort resolution needs.
#[derive(Debug)]
pub struct TableIr<'a> {
    pub(crate) family: Family,
    pub chains: Vec<ChainIr<'a>>,
    /// Positions in `chains`, found by the chain's own name, so a table's many chain
    /// names are not stored twice.
    pub(crate) chain_index: NameIndex,
    /// The chain `chain_mut` returned last: dumps list a chain's rules together, so this
    /// saves hashing a long chain name per rule.
    pub(crate) last_chain: Option<usize>,
    pub maps: Vec<MapIr<'a>>,
    pub unparsed: Vec<Unparsed>,
    /// False when the dump ended inside this table (a truncated text dump).
    pub complete: bool,
    /// What the dump said of this table's state, for the report.
    pub(crate) notes: Vec<String>,
}

impl<'a> TableIr<'a> {
    pub fn new(family: Family) -> Self {
        TableIr {
            family,
            chains: Vec::new(),
            chain_index: NameIndex::default(),
            last_chain: None,
            maps: Vec::new(),
            unparsed: Vec::new(),
            complete: true,
            notes: Vec::new(),
        }
    }

    /// The chain called `name`, created on first mention (a JSON rule may name its chain
    /// before, or without, the chain object).
    pub fn chain_mut(&mut self, name: Cow<'a, str>, line: u32) -> &mut ChainIr<'a> {
        let index = self.chain_position(name, line);
        &mut self.chains[index]
    }

    /// The position of the chain called `name`, created on first mention.
    pub(crate) fn chain_position(&mut self, name: Cow<'a, str>, line: u32) -> usize {
        if let Some(index) = self.find_chain(&name) {
            return index;
        }
        let chains = &self.chains;
        self.chain_index
            .insert(&name, chains.len() as u32, |at| &chains[at as usize].name);
        self.chains.push(ChainIr {
            name,
            line,
            rules: Vec::new(),
        });
        self.last_chain = Some(self.chains.len() - 1);
        self.chains.len() - 1
    }

    /// The position of the chain called `name`, which rules are added to next.
    pub fn find_chain(&mut self, name: &str) -> Option<usize> {
        let last = self.last_chain.filter(|&i| self.chains[i].name == name);
        if let (None, Some(previous)) = (last, self.last_chain) {
            // Dumps list a chain's rules together and most chains hold one or two, so
            // the chain left behind gives back its spare capacity.
            self.chains[previous].rules.shrink_to_fit();
        }
        let index = last.or_else(|| self.chain_position_of(name))?;
        self.last_chain = Some(index);
        Some(index)
    }

    /// Room for `more` chains, made once rather than by doubling.
    pub fn reserve_chains(&mut self, more: usize) {
        self.chains.reserve_exact(more);
        let chains = &self.chains;
        self.chain_index.reserve(more, |at| &chains[at as usize].name);
    }

    /// The position of the chain called `name`.
    pub(crate) fn chain_position_of(&self, name: &str) -> Option<usize> {
        self.chain_index
            .find(name, |at| &self.chains[at as usize].name)
            .map(|at| at as usize)
    }
}

#[derive(Debug)]
pub struct ChainIr<'a> {
    pub name: Cow<'a, str>,
    pub(crate) line: u32,
    pub rules: Vec<RuleIr<'a>>,
}

/// A rule, reduced to where it can send a packet.
#[derive(Debug, Default)]
pub struct RuleIr<'a> {
    pub(crate) handle: Option<u64>,
    pub(crate) line: u32,
    /// Chains named by `goto`/`jump`, also inside an inline `vmap { … }`, in rule order.
    pub(crate) jumps: Vec<Cow<'a, str>>,
    /// Boxed: few rules have a DNAT, and a kube-proxy table holds very many rules.
    pub(crate) dnat: Option<Box<DnatIr>>,
    /// The rule dispatches NodePorts: `… vmap @service-nodeports` (kube-proxy's
    /// `services` chain), without which no element of that map is reached.
    pub(crate) nodeport_dispatch: bool,
}

/// Why a DNAT's target is not one the model holds: the reason the rule's `unparsed`
/// entry gives, the same from `nft -j` and from `nft list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DnatError {
    #[error("DNAT in a form portdrift does not read")]
    Form,
    #[error("DNAT without an address")]
    WithoutAddress,
    #[error("DNAT to a computed address (not a literal IP), which portdrift cannot resolve")]
    ComputedAddress,
    #[error("DNAT to a computed or invalid port")]
    ComputedPort,
    #[error("DNAT without a port (keeps the NodePort), which portdrift cannot pair with an endpoint")]
    WithoutPort,
}

#[derive(Debug)]
pub struct DnatIr {
    pub(crate) addr: SocketAddr,
    /// The whole rule as `nft list` prints it, without `# handle N`; shared with the
    /// findings' [`DnatTarget`]s.
    pub(crate) text: Arc<str>,
}

#[derive(Debug)]
pub struct MapIr<'a> {
    pub name: Cow<'a, str>,
    pub elements: Vec<ElementIr<'a>>,
}

impl MapIr<'_> {
    /// The map, owning what it borrowed from the dump, to be kept past it.
    pub(crate) fn into_owned(self) -> MapIr<'static> {
        let owned = |c: Cow<'_, str>| Cow::Owned(c.into_owned());
        MapIr {
            name: owned(self.name),
            elements: self
                .elements
                .into_iter()
                .map(|e| ElementIr {
                    key: e.key,
                    comment: e.comment.map(owned),
                    verdict: match e.verdict {
                        ElementVerdict::Goto(c) => ElementVerdict::Goto(owned(c)),
                        ElementVerdict::Jump(c) => ElementVerdict::Jump(owned(c)),
                        ElementVerdict::Drop => ElementVerdict::Drop,
                        ElementVerdict::Accept => ElementVerdict::Accept,
                        ElementVerdict::Other(s) => ElementVerdict::Other(s),
                    },
                    line: e.line,
                })
                .collect(),
        }
    }
}

/// One element of a verdict map.
#[derive(Debug)]
pub struct ElementIr<'a> {
    /// The key as `nft list` prints it (`tcp . 30080`).
    pub(crate) key: String,
    pub(crate) comment: Option<Cow<'a, str>>,
    pub(crate) verdict: ElementVerdict<'a>,
    pub(crate) line: u32,
}

impl ElementIr<'_> {
    /// The element as `nft list` prints it: `tcp . 3006 comment "ns/svc:p" : goto reject-chain`.
    pub(crate) fn text(&self) -> String {
        match &self.comment {
            Some(c) => format!("{} comment \"{}\" : {}", self.key, c, self.verdict),
            None => format!("{} : {}", self.key, self.verdict),
        }
    }
}

#[derive(Debug)]
pub enum ElementVerdict<'a> {
    Goto(Cow<'a, str>),
    Jump(Cow<'a, str>),
    Drop,
    Accept,
    /// Anything else (`return`, `continue`, a non-verdict value), as printed.
    Other(String),
}

impl ElementVerdict<'_> {
    pub(crate) fn chain(&self) -> Option<&str> {
        match self {
            ElementVerdict::Goto(c) | ElementVerdict::Jump(c) => Some(c),
            _ => None,
        }
    }
}

impl std::fmt::Display for ElementVerdict<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ElementVerdict::Goto(c) => write!(f, "goto {c}"),
            ElementVerdict::Jump(c) => write!(f, "jump {c}"),
            ElementVerdict::Drop => f.write_str("drop"),
            ElementVerdict::Accept => f.write_str("accept"),
            ElementVerdict::Other(s) => f.write_str(s),
        }
    }
}
