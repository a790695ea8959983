//! kube-proxy's nftables mode (`table ip kube-proxy`, `table ip6 kube-proxy`) → the
//! shared rule model.
//!
//! Two front ends read the two forms a node bundle may hold: [`parse_ruleset_json`] for
//! `nft -j list ruleset` (or `nft -j list table ip kube-proxy`) and
//! [`parse_ruleset_text`] for `nft list ruleset` (with or without `-a`). Both lower
//! kube-proxy's tables into the same small intermediate form ([`TableIr`]: chains with
//! their jumps and DNATs, maps with their elements), and one builder turns that into
//! [`RuleSource`]s, so the two forms of one ruleset give the same model.
//!
//! NodePorts live in map elements, not in rules: every element of `service-nodeports`
//! (`tcp . 30080 : goto external-…`) is a forwarding NodePort rule whose DNAT targets
//! are found by following the chain it jumps to, and every element of
//! `no-endpoint-nodeports` is a reject or drop rule (see the reference, section 5).
//!
//! Every other table in the ruleset (iptables-nft's `ip nat`, `ip filter`, firewalld's
//! `inet firewalld`, ...) is not kube-proxy's nftables mode and is ignored here; the
//! iptables parser reads iptables-nft's tables from `iptables-nft-save`.

pub(crate) mod json;
mod text;

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

use crate::heart::kube_proxy::parse_nft_service_chain;
use crate::heart::model::{
    Backend, DestMatch, DnatTarget, Family, NodePortRule, OrphanChain, Protocol, RuleIdentity, RuleSource,
    RuleText, ServicePortRef, Unparsed, Verdict,
};
use crate::heart::repair::nft_table::{ChainView, ElementView, MapView, RuleView, TableView};

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
/// [`RuleSource`] per kube-proxy table present: `ip kube-proxy` (IPv4) first, then
/// `ip6 kube-proxy` (IPv6). A ruleset without either gives an empty vector.
pub fn parse_ruleset_json(input: &[u8], origin: &str) -> Result<Vec<RuleSource>, NftError> {
    let parsed = json::parse(input, origin)?;
    Ok(build_rule_sources(parsed, origin))
}

/// Parses `nft list ruleset` text (the bundle's `nft.txt`; `nft -a` adds the rule
/// handles repair needs) into the same [`RuleSource`]s [`parse_ruleset_json`] gives for
/// the same ruleset, with 1-based line numbers.
pub fn parse_ruleset_text(input: &str, origin: &str) -> Result<Vec<RuleSource>, NftError> {
    let parsed = text::parse(input, origin)?;
    Ok(build_rule_sources(parsed, origin))
}

/// The names kube-proxy gives the things this parser reads (pkg/proxy/nftables).
pub(crate) const KUBE_PROXY_TABLE: &str = "kube-proxy";
const SERVICE_NODEPORTS_MAP: &str = "service-nodeports";
const NO_ENDPOINT_NODEPORTS_MAP: &str = "no-endpoint-nodeports";
const REJECT_CHAIN: &str = "reject-chain";

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
fn table_label(family: Family) -> &'static str {
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

pub(crate) fn unparsed(line: u32, text: &str, reason: impl Into<String>) -> Unparsed {
    Unparsed {
        line,
        text: readable(text),
        reason: reason.into(),
    }
}

/// What a front end found in one dump: kube-proxy's tables, plus the things it could
/// not attribute to any table (they are reported with every kube-proxy table, since
/// they may belong to one).
#[derive(Debug, Default)]
pub(crate) struct ParsedRuleset<'a> {
    pub(crate) tables: Vec<TableIr<'a>>,
    pub(crate) unattributed: Vec<Unparsed>,
}

impl<'a> ParsedRuleset<'a> {
    /// The IR of kube-proxy's table for `family`, created on first mention.
    pub(crate) fn table_mut(&mut self, family: Family) -> &mut TableIr<'a> {
        match self.tables.iter().position(|t| t.family == family) {
            Some(i) => &mut self.tables[i],
            None => {
                self.tables.push(TableIr::new(family));
                self.tables.last_mut().expect("just pushed")
            }
        }
    }
}

/// One kube-proxy table, reduced to what NodePort resolution needs.
#[derive(Debug)]
pub(crate) struct TableIr<'a> {
    pub(crate) family: Family,
    pub(crate) chains: Vec<ChainIr<'a>>,
    /// Positions in `chains`, found by the chain's own name: the name is not stored
    /// twice (a 10,000-Service table has 66,000 chains).
    pub(crate) chain_index: ChainIndex,
    /// The chain `chain_mut` returned last: dumps list a chain's rules together, so this
    /// saves hashing a long chain name per rule.
    pub(crate) last_chain: Option<usize>,
    pub(crate) maps: Vec<MapIr<'a>>,
    pub(crate) unparsed: Vec<Unparsed>,
    /// False when the dump ended inside this table (a truncated text dump).
    pub(crate) complete: bool,
    /// What the dump said of this table's state, for the report.
    pub(crate) notes: Vec<String>,
}

impl<'a> TableIr<'a> {
    pub(crate) fn new(family: Family) -> Self {
        TableIr {
            family,
            chains: Vec::new(),
            chain_index: ChainIndex::default(),
            last_chain: None,
            maps: Vec::new(),
            unparsed: Vec::new(),
            complete: true,
            notes: Vec::new(),
        }
    }

    /// The chain called `name`, created on first mention (a JSON rule may name its chain
    /// before, or without, the chain object).
    pub(crate) fn chain_mut(&mut self, name: Cow<'a, str>, line: u32) -> &mut ChainIr<'a> {
        let index = self.chain_position(name, line);
        &mut self.chains[index]
    }

    /// The position of the chain called `name`, created on first mention.
    pub(crate) fn chain_position(&mut self, name: Cow<'a, str>, line: u32) -> usize {
        if let Some(index) = self.find_chain(&name) {
            return index;
        }
        self.chain_index.insert(&self.chains, &name, self.chains.len());
        self.chains.push(ChainIr {
            name,
            line,
            rules: Vec::new(),
        });
        self.last_chain = Some(self.chains.len() - 1);
        self.chains.len() - 1
    }

    /// The position of the chain called `name`, which rules are added to next.
    pub(crate) fn find_chain(&mut self, name: &str) -> Option<usize> {
        let last = self.last_chain.filter(|&i| self.chains[i].name == name);
        if let (None, Some(previous)) = (last, self.last_chain) {
            // Dumps list a chain's rules together and most chains hold one or two:
            // the chain left keeps no spare capacity (a 10,000-Service table's rules
            // took 28 MiB with it, 7 without).
            self.chains[previous].rules.shrink_to_fit();
        }
        let index = last.or_else(|| self.chain_index.find(&self.chains, name))?;
        self.last_chain = Some(index);
        Some(index)
    }

    /// Room for `more` chains, made once rather than by doubling.
    pub(crate) fn reserve_chains(&mut self, more: usize) {
        self.chains.reserve_exact(more);
        self.chain_index.reserve(&self.chains, more);
    }

    pub(crate) fn chain(&self, name: &str) -> Option<(usize, &ChainIr<'a>)> {
        self.chain_index
            .find(&self.chains, name)
            .map(|i| (i, &self.chains[i]))
    }
}

/// A hash index of chains by name that holds only their positions.
#[derive(Debug, Default)]
pub(crate) struct ChainIndex(hashbrown::HashTable<usize>);

impl ChainIndex {
    pub(crate) fn hash(name: &str) -> u64 {
        use std::hash::BuildHasher as _;
        rustc_hash::FxBuildHasher.hash_one(name)
    }

    pub(crate) fn find(&self, chains: &[ChainIr<'_>], name: &str) -> Option<usize> {
        self.0
            .find(Self::hash(name), |&i| chains[i].name == name)
            .copied()
    }

    /// Records that `chains[index]` (about to be pushed) is called `name`.
    pub(crate) fn insert(&mut self, chains: &[ChainIr<'_>], name: &str, index: usize) {
        self.0
            .insert_unique(Self::hash(name), index, |&i| Self::hash(&chains[i].name));
    }

    pub(crate) fn reserve(&mut self, chains: &[ChainIr<'_>], more: usize) {
        self.0.reserve(more, |&i| Self::hash(&chains[i].name));
    }
}

#[derive(Debug)]
pub(crate) struct ChainIr<'a> {
    pub(crate) name: Cow<'a, str>,
    pub(crate) line: u32,
    pub(crate) rules: Vec<RuleIr<'a>>,
}

/// A rule, reduced to where it can send a packet.
#[derive(Debug, Default)]
pub(crate) struct RuleIr<'a> {
    pub(crate) handle: Option<u64>,
    pub(crate) line: u32,
    /// Chains named by `goto`/`jump`, also inside an inline `vmap { … }`, in rule order.
    pub(crate) jumps: Vec<Cow<'a, str>>,
    /// Boxed: one rule in five or so has a DNAT, and a kube-proxy table holds a
    /// hundred thousand rules.
    pub(crate) dnat: Option<Box<DnatIr>>,
}

#[derive(Debug)]
pub(crate) struct DnatIr {
    pub(crate) addr: SocketAddr,
    /// The whole rule as `nft list` prints it, without `# handle N`; shared with the
    /// findings' [`DnatTarget`]s.
    pub(crate) text: Arc<str>,
}

#[derive(Debug)]
pub(crate) struct MapIr<'a> {
    pub(crate) name: Cow<'a, str>,
    pub(crate) elements: Vec<ElementIr<'a>>,
}

/// One element of a verdict map.
#[derive(Debug)]
pub(crate) struct ElementIr<'a> {
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
pub(crate) enum ElementVerdict<'a> {
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

pub(crate) fn build_rule_sources(parsed: ParsedRuleset<'_>, origin: &str) -> Vec<RuleSource> {
    let ParsedRuleset {
        mut tables,
        unattributed,
    } = parsed;
    tables.sort_by_key(|t| t.family);
    tables
        .into_iter()
        .map(|t| build_rule_source(t, origin, &unattributed))
        .collect()
}

fn build_rule_source(table: TableIr<'_>, origin: &str, unattributed: &[Unparsed]) -> RuleSource {
    let mut unparsed = table.unparsed.clone();
    unparsed.extend_from_slice(unattributed);
    let mut nodeports = Vec::new();
    let mut names = SharedNames::new(&table);
    for map in &table.maps {
        if map.name != SERVICE_NODEPORTS_MAP && map.name != NO_ENDPOINT_NODEPORTS_MAP {
            continue;
        }
        let map_name: Arc<str> = Arc::from(&*map.name);
        for element in &map.elements {
            match nodeport_rule(&table, &map_name, element, &mut names) {
                Ok(rule) => nodeports.push(rule),
                Err(u) => unparsed.push(u),
            }
        }
    }
    let rule_count: usize = table.chains.iter().map(|c| c.rules.len()).sum();
    // What could not be understood may have been a rule that proves something absent.
    let complete = table.complete && unparsed.is_empty();
    let element_count: usize = table.maps.iter().map(|m| m.elements.len()).sum();
    RuleSource {
        origin: origin.to_string(),
        backend: Backend::Nftables,
        family: table.family,
        nodeports,
        // The CNI portmap plugin writes iptables rules; its nftables form is not read yet.
        hostports: Vec::new(),
        orphans: orphan_chains(&table),
        unparsed,
        has_kube_proxy: true,
        // nftables mode has no canary chain: kube-proxy owns the whole table.
        has_canary: false,
        kube_rule_count: rule_count + element_count,
        complete,
        notes: table.notes.clone(),
        signals: Default::default(),
        gaps: Vec::new(),
        malformed: Vec::new(),
    }
}

/// `tcp . 30080` → (tcp, 30080).
fn parse_nodeport_key(key: &str) -> Option<(Protocol, u16)> {
    let (protocol, port) = key.split_once(" . ")?;
    Some((Protocol::parse(protocol.trim())?, port.trim().parse().ok()?))
}

/// One element of `service-nodeports` or `no-endpoint-nodeports` as a [`NodePortRule`].
fn nodeport_rule(
    table: &TableIr<'_>,
    map: &Arc<str>,
    element: &ElementIr<'_>,
    names: &mut SharedNames,
) -> Result<NodePortRule, Unparsed> {
    let text = element.text();
    let (protocol, port) = parse_nodeport_key(&element.key).ok_or_else(|| {
        unparsed(
            element.line,
            &text,
            format!("{map} element key is not `protocol . port`"),
        )
    })?;
    let walk = match &element.verdict {
        ElementVerdict::Drop => Walk::to_verdict(Verdict::Drop),
        ElementVerdict::Goto(c) | ElementVerdict::Jump(c) if c == REJECT_CHAIN => {
            let mut walk = Walk::to_verdict(Verdict::Reject);
            if table.chain(c).is_none() {
                walk.dangling = Some(c.to_string());
            }
            walk
        }
        ElementVerdict::Goto(c) | ElementVerdict::Jump(c) if &**map == SERVICE_NODEPORTS_MAP => {
            let mut walk = follow_chains(table, c, names);
            walk.external = external_targets(table, c);
            walk
        }
        other => {
            return Err(unparsed(
                element.line,
                &text,
                format!("{map} element has verdict `{other}`, which kube-proxy never writes there"),
            ));
        }
    };
    let first_hop = element
        .verdict
        .chain()
        .filter(|_| walk.verdict == Verdict::Forward);
    let comment_service = element
        .comment
        .as_deref()
        .and_then(ServicePortRef::parse)
        .or_else(|| first_hop.and_then(parse_nft_service_chain).map(|(svc, _)| svc));
    Ok(NodePortRule {
        backend: Backend::Nftables,
        family: table.family,
        protocol,
        port,
        // The dispatch rule in `services` restricts NodePorts to `@nodeport-ips` (the
        // node's own addresses) or to any local address: both are "the node", which is
        // what `Any` means to the detector.
        dest: DestMatch::Any,
        verdict: walk.verdict,
        path: walk.path.into(),
        targets: walk.targets.into(),
        external_targets: walk.external.into(),
        comment_service,
        undecoded_comment: None,
        // The chain name itself names the Service port (`comment_service`); the hash
        // field holds iptables-mode hashes only.
        chain_hash: None,
        dangling: walk.dangling,
        rule: RuleText {
            text: text.into(),
            line: element.line,
        },
        identity: RuleIdentity::Nftables {
            table: names.table.clone(),
            container: map.clone(),
            handle: None,
            element: Some(element.key.as_str().into()),
        },
    })
}

/// One `Arc` per chain name and one for the table's label, shared by every rule and
/// DNAT built from the table: a 10,000-Service table's findings would otherwise copy
/// each endpoint chain's name twice and the label once per DNAT.
struct SharedNames {
    table: Arc<str>,
    chains: Vec<Option<Arc<str>>>,
}

impl SharedNames {
    fn new(table: &TableIr<'_>) -> Self {
        SharedNames {
            table: table_label(table.family).into(),
            chains: vec![None; table.chains.len()],
        }
    }

    fn chain(&mut self, table: &TableIr<'_>, index: usize) -> Arc<str> {
        self.chains[index]
            .get_or_insert_with(|| Arc::from(&*table.chains[index].name))
            .clone()
    }
}

/// Where a NodePort's traffic goes.
struct Walk {
    verdict: Verdict,
    path: Vec<Arc<str>>,
    targets: Vec<DnatTarget>,
    /// The DNAT addresses reached without entering the cluster chain (`service-*`).
    external: Vec<SocketAddr>,
    dangling: Option<String>,
}

impl Walk {
    fn to_verdict(verdict: Verdict) -> Walk {
        Walk {
            verdict,
            path: Vec::new(),
            targets: Vec::new(),
            external: Vec::new(),
            dangling: None,
        }
    }
}

/// The DNAT addresses reachable from `start` without entering a `service-*` chain: with
/// externalTrafficPolicy Local kube-proxy's `external-*` chain sends only pod and host
/// traffic there, so these are what a client outside the node reaches.
fn external_targets(table: &TableIr<'_>, start: &str) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    // A handful of chains: a set the size of the table per NodePort would cost more.
    let mut seen: rustc_hash::FxHashSet<usize> = Default::default();
    let mut queue: VecDeque<&str> = VecDeque::from([start]);
    while let Some(name) = queue.pop_front() {
        let Some((index, chain)) = table.chain(name) else {
            continue;
        };
        if !seen.insert(index) {
            continue;
        }
        out.extend(chain.rules.iter().filter_map(|r| r.dnat.as_ref().map(|d| d.addr)));
        queue.extend(
            chain
                .rules
                .iter()
                .flat_map(|r| r.jumps.iter())
                .map(|j| j.as_ref())
                .filter(|j| !(j.starts_with("service-") && is_service_chain(j))),
        );
    }
    out
}

/// Follows every `goto`/`jump` (including inline `numgen … vmap { … }` maps) from `start`,
/// breadth first and in rule order, collecting every DNAT reached. Helper chains such as
/// `mark-for-masquerade` are visited like any other; they hold no DNAT and lead to none,
/// so they stay out of the path, which keeps the first hop and every chain that leads to
/// a DNAT: `external-…`, then `service-…`/`local-…`, then `endpoint-…`. A visited set
/// makes loops safe, and no recursion means no stack to overflow.
fn follow_chains(table: &TableIr<'_>, start: &str, names: &mut SharedNames) -> Walk {
    let mut walk = Walk::to_verdict(Verdict::Forward);
    // Visited chains in visiting order, each with the visited chains it jumps to.
    let mut order: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut position: HashMap<usize, usize> = HashMap::new();
    let mut has_dnat: Vec<bool> = Vec::new();
    let mut queue: VecDeque<(Option<usize>, &str)> = VecDeque::from([(None, start)]);
    while let Some((from, name)) = queue.pop_front() {
        let Some((index, chain)) = table.chain(name) else {
            walk.dangling.get_or_insert_with(|| name.to_string());
            continue;
        };
        if let Some(from) = from {
            order[from].1.push(index);
        }
        if position.contains_key(&index) {
            continue;
        }
        position.insert(index, order.len());
        let before = walk.targets.len();
        for rule in &chain.rules {
            walk.targets.extend(dnat_target(index, rule, names, table));
        }
        has_dnat.push(walk.targets.len() > before);
        let me = order.len();
        order.push((index, Vec::new()));
        queue.extend(
            chain
                .rules
                .iter()
                .flat_map(|r| r.jumps.iter())
                .map(|j| (Some(me), j.as_ref())),
        );
    }
    let leads = leads_to_dnat(&order, &position, has_dnat);
    walk.path = order
        .iter()
        .zip(&leads)
        .enumerate()
        .filter(|&(i, (_, &leads))| i == 0 || leads)
        .map(|(_, ((chain, _), _))| names.chain(table, *chain))
        .collect();
    walk
}

/// Which visited chains hold a DNAT or jump (directly or not) to one that does: a
/// fixpoint, since chains may jump back and forth.
fn leads_to_dnat(
    order: &[(usize, Vec<usize>)],
    position: &HashMap<usize, usize>,
    mut leads: Vec<bool>,
) -> Vec<bool> {
    let mut changed = true;
    while changed {
        changed = false;
        for (i, (_, successors)) in order.iter().enumerate() {
            if !leads[i] && successors.iter().any(|s| leads[position[s]]) {
                leads[i] = true;
                changed = true;
            }
        }
    }
    leads
}

fn dnat_target(
    chain: usize,
    rule: &RuleIr<'_>,
    names: &mut SharedNames,
    table: &TableIr<'_>,
) -> Option<DnatTarget> {
    let dnat = rule.dnat.as_ref()?;
    let chain = names.chain(table, chain);
    Some(DnatTarget {
        addr: dnat.addr,
        chain: chain.clone(),
        rule: RuleText {
            text: dnat.text.clone(),
            line: rule.line,
        },
        identity: RuleIdentity::Nftables {
            table: names.table.clone(),
            container: chain,
            handle: rule.handle,
            element: None,
        },
    })
}

/// Per-service chains that nothing reaches. Reachability starts from every chain that
/// is not a per-service chain (base chains, kube-proxy's helper chains, hand-written
/// chains) and from every map element's verdict; a service chain reached only from
/// another orphan (the endpoint chain of a deleted Service) is an orphan too, since no
/// packet can get there.
fn orphan_chains(table: &TableIr<'_>) -> Vec<OrphanChain> {
    let mut reached = vec![false; table.chains.len()];
    let mut stack: Vec<&str> = table
        .chains
        .iter()
        .filter(|c| !is_service_chain(&c.name))
        .map(|c| c.name.as_ref())
        .collect();
    stack.extend(
        table
            .maps
            .iter()
            .flat_map(|m| m.elements.iter())
            .filter_map(|e| e.verdict.chain()),
    );
    while let Some(name) = stack.pop() {
        let Some((index, chain)) = table.chain(name) else {
            continue;
        };
        if std::mem::replace(&mut reached[index], true) {
            continue;
        }
        stack.extend(
            chain
                .rules
                .iter()
                .flat_map(|r| r.jumps.iter())
                .map(|j| j.as_ref()),
        );
    }
    table
        .chains
        .iter()
        .zip(&reached)
        .filter(|(chain, reached)| !**reached && is_service_chain(&chain.name))
        .map(|(chain, _)| OrphanChain {
            backend: Backend::Nftables,
            family: table.family,
            table: table_label(table.family).to_string(),
            chain: chain.name.to_string(),
            line: chain.line,
            // nftables chain names carry the Service port themselves.
            dnat: None,
        })
        .collect()
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
