//! The intermediate form → [`RuleDump`]s: NodePorts from the NodePort maps, with
//! their DNAT targets found by following chains, and the chains nothing reaches.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

use super::graph::{DnatRule, Jump, RuleGraph, jump_to};
use super::ir::{ElementIr, ElementVerdict, ParsedRuleset};
use super::{NAT_PREROUTING, REJECT_CHAIN, SERVICE_NODEPORTS_MAP, is_service_chain, table_label, unparsed};
use crate::heart::kube_proxy::parse_nft_service_chain;
use crate::heart::model::{
    Backend, DestMatch, DnatTarget, EntryJump, Lookup, NodePortRule, OrphanChain, Protocol, RuleDump,
    RuleIdentity, RuleText, ServicePortRef, Unparsed, Verdict,
};

/// One [`RuleDump`] per table of a decoded dump.
pub fn build_rule_dumps(parsed: &ParsedRuleset<'_>, origin: &str) -> Vec<RuleDump> {
    build_sources(&parsed.tables, &parsed.unattributed, origin)
}

/// One [`RuleDump`] per table, IPv4 first; `unattributed` is reported with each.
pub fn build_sources<G: RuleGraph>(tables: &[G], unattributed: &[Unparsed], origin: &str) -> Vec<RuleDump> {
    let mut tables: Vec<&G> = tables.iter().collect();
    tables.sort_by_key(|t| t.family());
    tables
        .into_iter()
        .map(|t| build_rule_source(t, origin, unattributed))
        .collect()
}

fn build_rule_source(table: &impl RuleGraph, origin: &str, unattributed: &[Unparsed]) -> RuleDump {
    let mut unparsed = table.unparsed().to_vec();
    unparsed.extend_from_slice(unattributed);
    // Exact: the agent keeps the sources between reads, and a vector grown by doubling
    // would keep up to half its room unused.
    let elements = table.nodeport_maps().map(|m| m.elements.len()).sum();
    let mut nodeports = Vec::with_capacity(elements);
    let mut names = SharedNames::new(table);
    for map in table.nodeport_maps() {
        let map_name: Arc<str> = Arc::from(&*map.name);
        for element in &map.elements {
            match nodeport_rule(table, &map_name, element, &mut names) {
                Ok(rule) => nodeports.push(rule),
                Err(u) => unparsed.push(u),
            }
        }
    }
    // What could not be understood may have been a rule that proves something absent.
    let complete = table.complete() && unparsed.is_empty();
    RuleDump {
        origin: origin.to_string(),
        lookup: Lookup::Lines,
        backend: Backend::Nftables,
        family: table.family(),
        nodeports,
        // The CNI portmap plugin writes iptables rules; its nftables form is not read yet.
        hostports: Vec::new(),
        orphans: orphan_chains(table),
        unparsed,
        has_kube_proxy: true,
        // nftables mode has no canary chain: kube-proxy owns the whole table.
        has_canary: false,
        kube_rule_count: table.rule_count() + table.element_count(),
        complete,
        notes: table.notes().to_vec(),
        signals: Default::default(),
        gaps: Vec::new(),
        malformed: Vec::new(),
        // kube-proxy's own table holds its maps and chains together.
        forwarding_shown: true,
        missing_entry: missing_entry(table),
        bad_capture: None,
    }
}

/// kube-proxy's way in to its NodePort map that the table lacks: the `services` rule
/// that looks packets up in `service-nodeports`, and `nat-prerouting`'s way to it.
fn missing_entry(table: &impl RuleGraph) -> Vec<EntryJump> {
    let dispatch: Vec<usize> = table.nodeport_dispatch().collect();
    if dispatch.is_empty() {
        return vec![EntryJump {
            rule: "`… vmap @service-nodeports` (in chain services)",
            every_packet: true,
        }];
    }
    let reached = table
        .find_chain(NAT_PREROUTING)
        .is_some_and(|start| walk_jumps(table, start, |_| true, |chain| dispatch.contains(&chain)));
    if reached {
        Vec::new()
    } else {
        vec![EntryJump {
            rule: "`jump services` (in chain nat-prerouting)",
            every_packet: false,
        }]
    }
}

/// Visits `start` and the chains its jumps lead to, breadth first and each once, not
/// following a jump into a chain `enter` refuses; stops at the first chain `visit`
/// answers true for, and says whether it did.
fn walk_jumps(
    table: &impl RuleGraph,
    start: usize,
    enter: impl Fn(usize) -> bool,
    mut visit: impl FnMut(usize) -> bool,
) -> bool {
    // A handful of chains: a set the size of the table per walk would cost more.
    let mut seen: rustc_hash::FxHashSet<usize> = Default::default();
    let mut queue = VecDeque::from([start]);
    while let Some(index) = queue.pop_front() {
        if !seen.insert(index) {
            continue;
        }
        if visit(index) {
            return true;
        }
        queue.extend(table.jumps(index).filter_map(Result::ok).filter(|&j| enter(j)));
    }
    false
}

/// `tcp . 30080` → (tcp, 30080).
pub(super) fn parse_nodeport_key(key: &str) -> Option<(Protocol, u16)> {
    let (protocol, port) = key.split_once(" . ")?;
    Some((Protocol::parse(protocol.trim())?, port.trim().parse().ok()?))
}

/// One element of `service-nodeports` or `no-endpoint-nodeports` as a [`NodePortRule`].
fn nodeport_rule(
    table: &impl RuleGraph,
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
            if table.find_chain(c).is_none() {
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
        family: table.family(),
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
        rule: RuleText::at_line(text, element.line),
        identity: RuleIdentity::Nftables {
            table: names.table.clone(),
            container: map.clone(),
            handle: None,
            element: Some(element.key.as_str().into()),
        },
    })
}

/// One `Arc` per chain name (the table's own, when it keeps them) and one for the
/// table's label, shared by every rule and DNAT built from the table: the findings would
/// otherwise copy each endpoint chain's name twice and the label once per DNAT.
struct SharedNames {
    table: Arc<str>,
    chains: Vec<Option<Arc<str>>>,
}

impl SharedNames {
    fn new(table: &impl RuleGraph) -> Self {
        SharedNames {
            table: table_label(table.family()).into(),
            chains: vec![None; table.chain_count()],
        }
    }

    fn chain(&mut self, table: &impl RuleGraph, index: usize) -> Arc<str> {
        self.chains[index]
            .get_or_insert_with(|| table.shared_chain_name(index))
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
fn external_targets(table: &impl RuleGraph, start: &str) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    if let Some(start) = table.find_chain(start) {
        let outside_service_chains = |j: usize| {
            let name = table.chain_name(j);
            !(name.starts_with("service-") && is_service_chain(name))
        };
        walk_jumps(table, start, outside_service_chains, |index| {
            out.extend(table.dnats(index).map(|r| r.dnat.addr));
            false
        });
    }
    out
}

/// Follows every `goto`/`jump` (including inline `numgen … vmap { … }` maps) from `start`,
/// breadth first and in rule order, collecting every DNAT reached. Helper chains such as
/// `mark-for-masquerade` are visited like any other; they hold no DNAT and lead to none,
/// so they stay out of the path, which keeps the first hop and every chain that leads to
/// a DNAT: `external-…`, then `service-…`/`local-…`, then `endpoint-…`. A visited set
/// makes loops safe, and no recursion means no stack to overflow.
fn follow_chains<G: RuleGraph>(table: &G, start: &str, names: &mut SharedNames) -> Walk {
    let mut walk = Walk::to_verdict(Verdict::Forward);
    // Visited chains in visiting order, each with the visited chains it jumps to.
    let mut order: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut position: HashMap<usize, usize> = HashMap::new();
    let mut has_dnat: Vec<bool> = Vec::new();
    let mut queue: VecDeque<(Option<usize>, Jump<'_>)> = VecDeque::from([(None, jump_to(table, start))]);
    while let Some((from, jump)) = queue.pop_front() {
        let index = match jump {
            Ok(index) => index,
            Err(name) => {
                walk.dangling.get_or_insert_with(|| name.to_string());
                continue;
            }
        };
        if let Some(from) = from {
            order[from].1.push(index);
        }
        if position.contains_key(&index) {
            continue;
        }
        position.insert(index, order.len());
        let before = walk.targets.len();
        for rule in table.dnats(index) {
            walk.targets.push(dnat_target(index, rule, names, table));
        }
        has_dnat.push(walk.targets.len() > before);
        let me = order.len();
        order.push((index, Vec::new()));
        queue.extend(table.jumps(index).map(|j| (Some(me), j)));
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
    rule: DnatRule<'_>,
    names: &mut SharedNames,
    table: &impl RuleGraph,
) -> DnatTarget {
    let dnat = rule.dnat;
    let chain = names.chain(table, chain);
    DnatTarget {
        addr: dnat.addr,
        chain: chain.clone(),
        rule: RuleText::at_line(dnat.text.clone(), rule.line),
        identity: RuleIdentity::Nftables {
            table: names.table.clone(),
            container: chain,
            handle: rule.handle,
            element: None,
        },
    }
}

/// Per-service chains that nothing reaches. Reachability starts from every chain that
/// is not a per-service chain (base chains, kube-proxy's helper chains, hand-written
/// chains) and from every map element's verdict; a service chain reached only from
/// another orphan (the endpoint chain of a deleted Service) is an orphan too, since no
/// packet can get there.
fn orphan_chains(table: &impl RuleGraph) -> Vec<OrphanChain> {
    let mut reached = vec![false; table.chain_count()];
    let mut stack: Vec<usize> = (0..table.chain_count())
        .filter(|&c| !is_service_chain(table.chain_name(c)))
        .collect();
    stack.extend(table.element_jumps().filter_map(Result::ok));
    while let Some(index) = stack.pop() {
        if std::mem::replace(&mut reached[index], true) {
            continue;
        }
        stack.extend(table.jumps(index).filter_map(Result::ok));
    }
    (0..table.chain_count())
        .filter(|&c| !reached[c] && is_service_chain(table.chain_name(c)))
        .map(|c| OrphanChain {
            backend: Backend::Nftables,
            family: table.family(),
            table: table_label(table.family()).to_string(),
            chain: table.chain_name(c).to_string(),
            line: table.chain_line(c),
            // nftables chain names carry the Service port themselves.
            dnat: None,
        })
        .collect()
}
