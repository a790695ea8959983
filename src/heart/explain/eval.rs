//! Following one new connection through the tables, as the kernel runs them: the base
//! chains of each hook in priority order, each chain's rules in order, jumps, gotos and
//! returns, verdict maps, and a branch wherever a rule matches only a share of new
//! connections (`statistic`, `numgen`). Each branch ends in an [`End`] with its share.
//!
//! A condition the evaluator cannot decide stops its branch as undecided, naming the
//! rule: a path is promised only as far as every rule on it was decided.

use std::net::{IpAddr, SocketAddr};

use crate::heart::explain::model::{
    Action, ChainType, Cond, CtState, Destination, Element, Field, Hook, KeyPart, Probe, Rule, Rulesets,
    SetRef, Side, Table, target_of,
};
use crate::heart::model::Protocol;

/// At most this many branches: kube-proxy's cascades give one per endpoint, so more
/// means rules that multiply each other, and the rest is reported undecided.
const MAX_BRANCHES: usize = 20_000;
/// kube-proxy's session affinity timeout when a rule does not say (3 hours).
const AFFINITY_DEFAULT: u32 = 10_800;
/// The kernel refuses jumps nested deeper than this.
const MAX_DEPTH: usize = 64;

/// The connection as it stands at some point of its path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Packet {
    pub protocol: Protocol,
    pub destination: Destination,
    pub port: u16,
    pub source: IpAddr,
    pub mark: u32,
    /// Where a DNAT or REDIRECT sent it, once one did.
    pub translated: Option<Translation>,
}

/// An address translation bound to the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translation {
    pub to: SocketAddr,
    /// The target is this node (a REDIRECT, or a DNAT to the address connected to or a
    /// loopback address): the connection is delivered locally.
    pub local: bool,
    /// A REDIRECT (to this node's own port), not a DNAT to an endpoint.
    pub redirect: bool,
    /// Where the rule that translated it is (a table index, chain index, rule index).
    pub by: RuleRef,
}

impl Packet {
    pub fn new(probe: &Probe) -> Packet {
        Packet {
            protocol: probe.protocol,
            destination: probe.destination,
            port: probe.port,
            source: probe.source,
            mark: 0,
            translated: None,
        }
    }

    /// Whether the destination is one of this node's addresses.
    fn destination_local(&self) -> bool {
        self.translated.is_none_or(|t| t.local)
    }
}

/// A rule by position: table, chain and rule indices in the [`Rulesets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleRef {
    pub table: usize,
    pub chain: usize,
    /// None: the chain's policy.
    pub rule: Option<usize>,
}

/// What happened at one rule on a path.
#[derive(Debug, Clone, PartialEq)]
pub enum StepKind {
    /// The rule matched (`share`: the part of the connections reaching it that it
    /// takes, below 1 for a `statistic` or `numgen` branch); `does` says what it did.
    Matched { does: String, share: f64 },
    /// The rule did not match, for a reason worth showing (not merely another port).
    Skipped { why: String },
    /// A base chain ended without a verdict: its policy.
    Policy { accepts: bool },
    /// A nat chain the kernel does not run for this connection: an earlier one at the
    /// hook already bound its translation.
    NotRun { why: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub hook: Hook,
    pub at: RuleRef,
    pub kind: StepKind,
}

/// How a branch ended.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    /// Still going: accepted by the chains so far (only while walking).
    Accepted,
    /// Forwarded to the DNAT target.
    Forwarded(SocketAddr),
    /// Delivered to this node (on `port`, translated or not).
    Delivered {
        port: u16,
    },
    Dropped(RuleRef),
    Rejected(RuleRef),
    /// A rule on the path could not be decided: why, and where.
    Undecided {
        at: Option<RuleRef>,
        why: String,
    },
}

/// One way a new connection goes, and the share of new connections that go this way.
#[derive(Debug, Clone, PartialEq)]
pub struct Branch {
    pub share: f64,
    pub packet: Packet,
    pub steps: Vec<Step>,
    pub end: End,
    /// A session-affinity rule on the path pins a returning client to its endpoint.
    pub affinity: Option<u32>,
}

/// What else the walk noticed, for the explanation's notes.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Remarks {
    /// Rules skipped only because they name another address of the node: the port is
    /// handled differently for connections to that address.
    pub address_specific: Vec<(RuleRef, String)>,
    /// Where two nat chains of different backends sit at one hook and priority, so the
    /// kernel's order between them is their registration order, which no dump shows.
    pub nat_order_unknown: Vec<(Hook, usize, usize)>,
    /// Rules skipped without being listed (other ports and addresses), per hook.
    pub quietly_skipped: usize,
}

/// Follows `probe` through every table of its family in `rules`.
pub fn follow(rules: &Rulesets, probe: &Probe) -> (Vec<Branch>, Remarks) {
    let mut walker = Walker {
        rules,
        remarks: Remarks::default(),
        branches: 0,
    };
    let start = Branch {
        share: 1.0,
        packet: Packet::new(probe),
        steps: Vec::new(),
        end: End::Accepted,
        affinity: None,
    };
    let mut done = Vec::new();
    for branch in walker.hook(Hook::Prerouting, start) {
        if branch.end != End::Accepted {
            done.push(branch);
            continue;
        }
        let next = if branch.packet.destination_local() {
            Hook::Input
        } else {
            Hook::Forward
        };
        for b in walker.hook(next, branch) {
            // A forwarded connection passes postrouting too (where kube-proxy
            // masquerades); one delivered here does not.
            let after: Vec<Branch> = if next == Hook::Forward && b.end == End::Accepted {
                walker.hook(Hook::Postrouting, b)
            } else {
                vec![b]
            };
            for mut b in after {
                if b.end == End::Accepted {
                    b.end = match b.packet.translated {
                        Some(t) if !t.local => End::Forwarded(t.to),
                        Some(t) => End::Delivered { port: t.to.port() },
                        None => End::Delivered { port: probe.port },
                    };
                }
                done.push(b);
            }
        }
    }
    (done, walker.remarks)
}

struct Walker<'a> {
    rules: &'a Rulesets,
    remarks: Remarks,
    branches: usize,
}

/// The result of a condition for this connection.
enum Test {
    Yes,
    No { why: String, quiet: bool, address: bool },
    Share(f64),
    Undecided(String),
}

/// What a chain walk handed back: ended in the chain (or one it jumped to), or fell
/// off its end / returned.
enum Flow {
    Ended,
    Returned,
}

impl<'a> Walker<'a> {
    /// The base chains at `hook`, in the kernel's order, run one after the other for
    /// every branch still going.
    fn hook(&mut self, hook: Hook, start: Branch) -> Vec<Branch> {
        let family = start.packet.destination.family();
        let mut bases: Vec<(i32, u8, usize, usize)> = Vec::new();
        for (ti, table) in self.rules.tables.iter().enumerate() {
            if table.family != family {
                continue;
            }
            for (ci, chain) in table.chains.iter().enumerate() {
                if let Some(base) = chain.base
                    && base.hook == hook
                {
                    bases.push((base.priority, backend_order(table), ti, ci));
                }
            }
        }
        // Same priority: the kernel runs the chain registered last first, and a dump
        // does not show that order. The newer backend is taken first (a node with two
        // got the second when kube-proxy switched to it) and the tie is reported.
        bases.sort();
        for pair in bases.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let nat = |t: usize, c: usize| {
                self.rules.tables[t].chains[c]
                    .base
                    .is_some_and(|b| b.kind == ChainType::Nat)
                    && !self.rules.tables[t].chains[c].rules.is_empty()
            };
            if a.0 == b.0 && a.1 != b.1 && nat(a.2, a.3) && nat(b.2, b.3) {
                self.remarks.nat_order_unknown.push((hook, a.2, b.2));
            }
        }
        let mut live = vec![start];
        let mut out = Vec::new();
        for &(_, _, ti, ci) in &bases {
            let mut next = Vec::new();
            for branch in live {
                let base = self.rules.tables[ti].chains[ci].base.expect("a base chain");
                if base.kind == ChainType::Nat
                    && matches!(hook, Hook::Prerouting | Hook::Output)
                    && let Some(t) = branch.packet.translated
                {
                    let mut b = branch;
                    b.steps.push(Step {
                        hook,
                        at: RuleRef {
                            table: ti,
                            chain: ci,
                            rule: None,
                        },
                        kind: StepKind::NotRun {
                            why: format!(
                                "not run: the connection's address translation is already bound by {}",
                                self.place(t.by)
                            ),
                        },
                    });
                    next.push(b);
                    continue;
                }
                if base.kind == ChainType::Nat && hook == Hook::Input {
                    // INPUT nat chains translate sources only, for connections this
                    // explanation has already delivered.
                    next.push(branch);
                    continue;
                }
                let mut left = Vec::new();
                self.run(hook, ti, ci, 0, branch, 0, &mut |b, flow| left.push((b, flow)));
                for (mut b, flow) in left {
                    match (flow, &b.end) {
                        // Fell off the base chain's end: its policy decides.
                        (Flow::Returned, _) => {
                            let policy = RuleRef {
                                table: ti,
                                chain: ci,
                                rule: None,
                            };
                            b.steps.push(Step {
                                hook,
                                at: policy,
                                kind: StepKind::Policy {
                                    accepts: base.accepts,
                                },
                            });
                            if base.accepts {
                                next.push(b);
                            } else {
                                b.end = End::Dropped(policy);
                                out.push(b);
                            }
                        }
                        // Accepted (or translated) by this chain: the next base chain runs.
                        (Flow::Ended, End::Accepted) => next.push(b),
                        (Flow::Ended, _) => out.push(b),
                    }
                }
            }
            live = next;
        }
        // Branches still going were accepted by every chain at this hook.
        out.extend(live);
        out
    }

    /// Runs chain `ci` of table `ti` from rule `from`, handing each branch that leaves
    /// it to `emit`: `Flow::Returned` when it falls off the end or returns.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        hook: Hook,
        ti: usize,
        ci: usize,
        from: usize,
        mut branch: Branch,
        depth: usize,
        emit: &mut dyn FnMut(Branch, Flow),
    ) {
        let table: &'a Table = &self.rules.tables[ti];
        let chain = &table.chains[ci];
        if depth > MAX_DEPTH {
            branch.end = End::Undecided {
                at: None,
                why: format!("jumps nest deeper than {MAX_DEPTH} chains at {}", chain.name),
            };
            return emit(branch, Flow::Ended);
        }
        for (ri, rule) in chain.rules.iter().enumerate().skip(from) {
            let at = RuleRef {
                table: ti,
                chain: ci,
                rule: Some(ri),
            };
            match self.test_rule(table, rule, &branch.packet) {
                Test::No { why, quiet, address } => {
                    if let Some(seconds) = rule.conds.iter().find_map(|c| match c {
                        Cond::Affinity { seconds, .. } => Some(seconds.unwrap_or(AFFINITY_DEFAULT)),
                        _ => None,
                    }) {
                        branch.affinity = Some(seconds);
                    }
                    if address {
                        self.remarks.address_specific.push((at, why.clone()));
                    }
                    if quiet {
                        self.remarks.quietly_skipped += 1;
                    } else {
                        branch.steps.push(Step {
                            hook,
                            at,
                            kind: StepKind::Skipped { why },
                        });
                    }
                    continue;
                }
                Test::Undecided(why) => {
                    branch.end = End::Undecided { at: Some(at), why };
                    return emit(branch, Flow::Ended);
                }
                Test::Yes => {
                    return self.act(hook, at, &rule.action, 1.0, branch, depth, emit, None);
                }
                Test::Share(p) => {
                    if p <= 0.0 {
                        continue;
                    }
                    if p >= 1.0 || !self.may_branch() {
                        return self.act(hook, at, &rule.action, p.min(1.0), branch, depth, emit, None);
                    }
                    let mut taken = branch.clone();
                    taken.share *= p;
                    branch.share *= 1.0 - p;
                    self.act(hook, at, &rule.action, p, taken, depth, emit, None);
                    continue;
                }
            }
        }
        emit(branch, Flow::Returned)
    }

    fn may_branch(&mut self) -> bool {
        self.branches += 1;
        self.branches < MAX_BRANCHES
    }

    /// Applies a matched rule's action; `share` is what part of the arriving
    /// connections it takes (for the step).
    #[allow(clippy::too_many_arguments)]
    fn act(
        &mut self,
        hook: Hook,
        at: RuleRef,
        action: &Action,
        share: f64,
        mut branch: Branch,
        depth: usize,
        emit: &mut dyn FnMut(Branch, Flow),
        via: Option<&str>,
    ) {
        let table = &self.rules.tables[at.table];
        let matched = |does: String| Step {
            hook,
            at,
            kind: StepKind::Matched {
                does: match via {
                    Some(via) => format!("{via}: {does}"),
                    None => does,
                },
                share,
            },
        };
        match action {
            Action::Continue => {
                branch.steps.push(matched("continue".to_string()));
                self.run(
                    hook,
                    at.table,
                    at.chain,
                    at.rule.expect("a rule") + 1,
                    branch,
                    depth,
                    emit,
                )
            }
            Action::SetMark { value, mask } => {
                branch.packet.mark = (branch.packet.mark & !mask) ^ value;
                branch
                    .steps
                    .push(matched(format!("set mark {:#x}", branch.packet.mark)));
                self.run(
                    hook,
                    at.table,
                    at.chain,
                    at.rule.expect("a rule") + 1,
                    branch,
                    depth,
                    emit,
                )
            }
            Action::Jump(target) | Action::Goto(target) => {
                let goto = matches!(action, Action::Goto(_));
                let Some(tci) = table.chain(target) else {
                    branch.end = End::Undecided {
                        at: Some(at),
                        why: format!("it leads to the chain {target}, which the dump does not hold"),
                    };
                    return emit(branch, Flow::Ended);
                };
                branch.steps.push(matched(format!(
                    "{} {target}",
                    if goto { "goto" } else { "jump" }
                )));
                let mut returned = Vec::new();
                self.run(
                    hook,
                    at.table,
                    tci,
                    0,
                    branch,
                    depth + 1,
                    &mut |b, flow| match flow {
                        Flow::Ended => emit(b, Flow::Ended),
                        Flow::Returned => returned.push(b),
                    },
                );
                for b in returned {
                    if goto {
                        emit(b, Flow::Returned);
                    } else {
                        self.run(
                            hook,
                            at.table,
                            at.chain,
                            at.rule.expect("a rule") + 1,
                            b,
                            depth,
                            emit,
                        );
                    }
                }
            }
            Action::Return => {
                branch.steps.push(matched("return".to_string()));
                emit(branch, Flow::Returned)
            }
            Action::Accept => {
                branch.steps.push(matched("accept".to_string()));
                // Accepted by this base chain; the next base chain at the hook still runs.
                branch.end = End::Accepted;
                emit(branch, Flow::Ended)
            }
            Action::Drop => {
                branch.steps.push(matched("drop".to_string()));
                branch.end = End::Dropped(at);
                emit(branch, Flow::Ended)
            }
            Action::Reject => {
                branch.steps.push(matched("reject".to_string()));
                branch.end = End::Rejected(at);
                emit(branch, Flow::Ended)
            }
            Action::Dnat(_) | Action::Redirect(_) if self.translates(at) => {
                let redirect = matches!(action, Action::Redirect(_));
                let (target, local, does) = match action {
                    Action::Dnat(to) => {
                        let target = target_of(*to, branch.packet.port);
                        let local = match branch.packet.destination {
                            Destination::Addr(ip) => ip == to.addr,
                            Destination::AnyNodeAddress(_) => false,
                        } || to.addr.is_loopback();
                        (target, local, format!("dnat to {target}"))
                    }
                    _ => {
                        let port = match action {
                            Action::Redirect(Some(p)) => *p,
                            _ => branch.packet.port,
                        };
                        let here = match branch.packet.destination {
                            Destination::Addr(ip) => ip,
                            Destination::AnyNodeAddress(f) => match f {
                                crate::heart::model::Family::Ipv4 => IpAddr::from([127, 0, 0, 1]),
                                crate::heart::model::Family::Ipv6 => {
                                    IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1])
                                }
                            },
                        };
                        (
                            SocketAddr::new(here, port),
                            true,
                            format!("redirect to this node's port {port}"),
                        )
                    }
                };
                branch.steps.push(matched(does));
                branch.packet.translated = Some(Translation {
                    to: target,
                    local,
                    redirect,
                    by: at,
                });
                branch.end = End::Accepted;
                emit(branch, Flow::Ended)
            }
            Action::Dnat(_) | Action::Redirect(_) => {
                branch.end = End::Undecided {
                    at: Some(at),
                    why: "a DNAT outside a nat chain at prerouting, which this explanation does not model"
                        .to_string(),
                };
                emit(branch, Flow::Ended)
            }
            Action::SourceNat => {
                branch.steps.push(matched("source NAT".to_string()));
                branch.end = End::Accepted;
                emit(branch, Flow::Ended)
            }
            Action::Vmap { key, map } => {
                let Some(elements) = self.elements(table, map) else {
                    branch.end = End::Undecided {
                        at: Some(at),
                        why: format!("the map {} is not in the dump", set_name(map)),
                    };
                    return emit(branch, Flow::Ended);
                };
                match find_element(elements, key, &branch.packet) {
                    Lookup::Found(element) => {
                        let Some(action) = element.action.clone() else {
                            branch.end = End::Undecided {
                                at: Some(at),
                                why: format!(
                                    "the element {} of {} has no verdict",
                                    element.text,
                                    set_name(map)
                                ),
                            };
                            return emit(branch, Flow::Ended);
                        };
                        let via = format!("{} finds {}", set_name(map), element.text);
                        self.act(hook, at, &action, share, branch, depth, emit, Some(&via))
                    }
                    Lookup::Missing => {
                        branch.steps.push(Step {
                            hook,
                            at,
                            kind: StepKind::Skipped {
                                why: format!("{} has no element for this connection", set_name(map)),
                            },
                        });
                        self.run(
                            hook,
                            at.table,
                            at.chain,
                            at.rule.expect("a rule") + 1,
                            branch,
                            depth,
                            emit,
                        )
                    }
                    Lookup::Undecided(why) => {
                        branch.end = End::Undecided { at: Some(at), why };
                        emit(branch, Flow::Ended)
                    }
                }
            }
            Action::Numgen { modulus, map } => {
                let Some(elements) = self.elements(table, map) else {
                    branch.end = End::Undecided {
                        at: Some(at),
                        why: format!("the map {} is not in the dump", set_name(map)),
                    };
                    return emit(branch, Flow::Ended);
                };
                let modulus = f64::from((*modulus).max(1));
                let mut rest = branch.share;
                for element in elements {
                    let Some(KeyPart::Int(lo, hi)) = element.key.first() else {
                        continue;
                    };
                    let Some(action) = element.action.clone() else {
                        continue;
                    };
                    let part = ((hi.saturating_sub(*lo) + 1) as f64 / modulus).min(1.0);
                    let mut b = branch.clone();
                    b.share *= part;
                    rest -= b.share;
                    self.may_branch();
                    let via = format!("numgen picks {}", element.text);
                    self.act(hook, at, &action, part, b, depth, emit, Some(&via));
                }
                if rest > 1e-9 {
                    // Numbers no element holds: the rule does nothing for them.
                    let mut b = branch;
                    b.share = rest;
                    self.run(
                        hook,
                        at.table,
                        at.chain,
                        at.rule.expect("a rule") + 1,
                        b,
                        depth,
                        emit,
                    );
                }
            }
            Action::Unknown(what) => {
                branch.end = End::Undecided {
                    at: Some(at),
                    why: format!("its action ({what}) is not one this explanation follows"),
                };
                emit(branch, Flow::Ended)
            }
        }
    }

    /// Only a nat chain (or a chain it calls) translates addresses. iptables' nat
    /// table holds nothing else; an nftables table may mix nat and filter chains, and
    /// the walk does not track which base chain called a user chain, so a table with
    /// a nat base chain counts.
    fn translates(&self, at: RuleRef) -> bool {
        let table = &self.rules.tables[at.table];
        table.name == "nat"
            || table
                .chains
                .iter()
                .any(|c| c.base.is_some_and(|b| b.kind == ChainType::Nat))
    }

    fn elements(&self, table: &'a Table, map: &'a SetRef) -> Option<&'a [Element]> {
        match map {
            SetRef::Inline(elements) => Some(elements),
            SetRef::Named(name) => table.set(name).map(|s| s.elements.as_slice()),
        }
    }

    /// Where a rule is, for sentences.
    pub(crate) fn place(&self, at: RuleRef) -> String {
        place_of(self.rules, at)
    }

    /// Every condition of the rule, for this connection: a definite "no" from any
    /// condition wins over one that cannot be decided.
    fn test_rule(&self, table: &Table, rule: &Rule, packet: &Packet) -> Test {
        let mut share = 1.0;
        let mut undecided = None;
        // The first reason worth showing, else the first quiet one.
        let mut first_no: Option<(String, bool)> = None;
        let mut only_address = true;
        for cond in &rule.conds {
            match test(table, cond, packet) {
                Test::Yes => {}
                Test::Share(p) => share *= p,
                Test::Undecided(why) => {
                    undecided.get_or_insert(why);
                }
                Test::No { why, quiet, address } => {
                    only_address &= address;
                    if first_no.as_ref().is_none_or(|(_, q)| *q && !quiet) {
                        first_no = Some((why, quiet));
                    }
                }
            }
        }
        if let Some((why, quiet)) = first_no {
            // Skipped only because it names another address, while its port is ours.
            let address = only_address
                && rule.conds.iter().any(|c| {
                    matches!(c, Cond::Port { side: Side::Destination, ranges, negated: false }
                        if ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&packet.port)))
                });
            return Test::No { why, quiet, address };
        }
        if let Some(why) = undecided {
            return Test::Undecided(format!("{why} cannot be decided for this connection"));
        }
        if share < 1.0 {
            Test::Share(share)
        } else {
            Test::Yes
        }
    }
}

/// Whether the rule at `at` could match the new connection of `probe` (for sure or
/// for a share of connections), judged on the connection as it arrives.
pub fn could_match(rules: &Rulesets, at: RuleRef, probe: &Probe) -> bool {
    let walker = Walker {
        rules,
        remarks: Remarks::default(),
        branches: 0,
    };
    let table = &rules.tables[at.table];
    let Some(ri) = at.rule else { return false };
    let rule = &table.chains[at.chain].rules[ri];
    matches!(
        walker.test_rule(table, rule, &Packet::new(probe)),
        Test::Yes | Test::Share(_)
    )
}

/// Newest backend first among equals: see [`Walker::hook`].
fn backend_order(table: &Table) -> u8 {
    match table.backend {
        crate::heart::model::Backend::Nftables => 0,
        crate::heart::model::Backend::IptablesNft => 1,
        crate::heart::model::Backend::IptablesLegacy => 2,
    }
}

fn set_name(map: &SetRef) -> String {
    match map {
        SetRef::Named(n) => format!("@{n}"),
        SetRef::Inline(_) => "the rule's map".to_string(),
    }
}

/// `iptables-nft-save.txt:57`, `nft.json handle 42`, or the chain's policy.
pub fn place_of(rules: &Rulesets, at: RuleRef) -> String {
    let table = &rules.tables[at.table];
    let chain = &table.chains[at.chain];
    match at.rule {
        None => format!("{} {} {} policy", table.origin, table.name, chain.name),
        Some(ri) => match chain.rules[ri].place {
            crate::heart::explain::model::RulePlace::Line(n) => format!("{}:{n}", table.origin),
            crate::heart::explain::model::RulePlace::Handle(h) => {
                format!("{} {} {} handle {h}", table.origin, table.name, chain.name)
            }
            crate::heart::explain::model::RulePlace::Unknown => {
                format!("{} {} {} rule {}", table.origin, table.name, chain.name, ri + 1)
            }
        },
    }
}

fn no(why: impl Into<String>, quiet: bool) -> Test {
    Test::No {
        why: why.into(),
        quiet,
        address: false,
    }
}

/// One condition for this connection. `quiet` skips are the ones about other Services
/// (another port, protocol or address), not listed on the path.
fn test(table: &Table, cond: &Cond, p: &Packet) -> Test {
    let flip = |yes: bool, negated: bool| yes != negated;
    match cond {
        Cond::Protocol { protocol, negated } => {
            if flip(*protocol == Some(p.protocol), *negated) {
                Test::Yes
            } else {
                no("another protocol", true)
            }
        }
        Cond::Addr { side, nets, negated } => {
            let shown = nets.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",");
            match side {
                Side::Source => {
                    let inside = nets.iter().any(|n| n.contains(p.source));
                    if flip(inside, *negated) {
                        Test::Yes
                    } else if *negated {
                        no(format!("the source {} is in {shown}", p.source), false)
                    } else {
                        no(format!("the source {} is not in {shown}", p.source), false)
                    }
                }
                Side::Destination => {
                    let (ip, any) = match (p.translated, p.destination) {
                        (Some(t), _) => (Some(t.to.ip()), false),
                        (None, Destination::Addr(ip)) => (Some(ip), false),
                        (None, Destination::AnyNodeAddress(_)) => (None, true),
                    };
                    let inside = match ip {
                        Some(ip) => nets.iter().any(|n| n.contains(ip)),
                        // "Any node address" is in no named prefix but loopback's, and is
                        // not loopback: connections come from outside.
                        None => false,
                    };
                    if flip(inside, *negated) {
                        Test::Yes
                    } else if any && !*negated && !nets.iter().any(|n| n.addr.is_loopback()) {
                        Test::No {
                            why: format!("it applies only to connections to {shown}"),
                            quiet: true,
                            address: true,
                        }
                    } else {
                        no(format!("the destination is not in {shown}"), true)
                    }
                }
            }
        }
        Cond::Port {
            side,
            ranges,
            negated,
        } => match side {
            Side::Destination => {
                let port = p.translated.map_or(p.port, |t| t.to.port());
                let inside = ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&port));
                if flip(inside, *negated) {
                    Test::Yes
                } else {
                    no("another port", true)
                }
            }
            Side::Source => Test::Undecided("a source-port match".to_string()),
        },
        Cond::AddrLocal { side, local, negated } => {
            let is_local = match side {
                Side::Destination => p.destination_local(),
                Side::Source => p.source.is_loopback(),
            };
            let yes = if *local { is_local } else { false };
            if flip(yes, *negated) {
                Test::Yes
            } else {
                let what = match side {
                    Side::Destination => "destination",
                    Side::Source => "source",
                };
                let is = if is_local { "is" } else { "is not" };
                no(format!("the {what} {is} an address of this node"), false)
            }
        }
        Cond::Interface {
            inbound,
            name,
            negated,
        } => {
            let lo = name == "lo";
            if *inbound && lo {
                // Connections from outside never arrive on loopback.
                if *negated {
                    Test::Yes
                } else {
                    no("the connection does not arrive on lo", false)
                }
            } else {
                Test::Undecided(format!(
                    "the {} interface match {}{name}",
                    if *inbound { "input" } else { "output" },
                    if *negated { "! " } else { "" }
                ))
            }
        }
        Cond::Mark { value, mask, negated } => {
            if flip(p.mark & mask == *value, *negated) {
                Test::Yes
            } else {
                no(
                    format!("the mark is {:#x}, not {value:#x}/{mask:#x}", p.mark & mask),
                    false,
                )
            }
        }
        Cond::CtState { states, negated } => {
            let yes = states.iter().any(|s| match s {
                CtState::New => true,
                CtState::Dnat => p.translated.is_some(),
                _ => false,
            });
            if flip(yes, *negated) {
                Test::Yes
            } else {
                no("the connection is new", false)
            }
        }
        Cond::Random { probability } => Test::Share(*probability),
        Cond::Nth { every } => Test::Share(1.0 / f64::from(*every)),
        Cond::Affinity { .. } => no("a new client has no affinity entry yet", false),
        Cond::Lookup { key, set, negated } => {
            let elements = match set {
                SetRef::Inline(e) => Some(e.as_slice()),
                SetRef::Named(name) => table.set(name).map(|s| s.elements.as_slice()),
            };
            let Some(elements) = elements else {
                return Test::Undecided(format!("the set {} is not in the dump", set_name(set)));
            };
            match find_element(elements, key, p) {
                Lookup::Found(_) if !negated => Test::Yes,
                Lookup::Missing if *negated => Test::Yes,
                Lookup::Found(e) => no(format!("{} holds {}", set_name(set), e.text), true),
                Lookup::Missing => no(
                    format!("{} has no element for this connection", set_name(set)),
                    true,
                ),
                Lookup::Undecided(why) => Test::Undecided(why),
            }
        }
        Cond::Unknown(what) => Test::Undecided(format!("`{what}`")),
    }
}

enum Lookup<'e> {
    Found(&'e Element),
    Missing,
    Undecided(String),
}

/// The element whose key holds this connection's `key` fields.
fn find_element<'e>(elements: &'e [Element], key: &[Field], p: &Packet) -> Lookup<'e> {
    let mut undecided = None;
    'elements: for element in elements {
        if element.key.len() != key.len() {
            continue;
        }
        for (field, part) in key.iter().zip(&element.key) {
            match holds(*field, part, p) {
                Some(true) => {}
                Some(false) => continue 'elements,
                None => {
                    undecided.get_or_insert_with(|| format!("the element {}", element.text));
                    continue 'elements;
                }
            }
        }
        return Lookup::Found(element);
    }
    match undecided {
        Some(why) => Lookup::Undecided(format!("{why} cannot be compared with this connection")),
        None => Lookup::Missing,
    }
}

/// Whether one component of an element holds the connection's field; None: unknown.
fn holds(field: Field, part: &KeyPart, p: &Packet) -> Option<bool> {
    let destination = p.translated.map(|t| t.to.ip()).or(match p.destination {
        Destination::Addr(ip) => Some(ip),
        Destination::AnyNodeAddress(_) => None,
    });
    match (field, part) {
        (Field::Addr(Side::Source), KeyPart::Addr(net)) => Some(net.contains(p.source)),
        // "Any node address" is no loopback address; whether it is in another set the
        // dump cannot say.
        (Field::Addr(Side::Destination), KeyPart::Addr(net)) => match destination {
            Some(ip) => Some(net.contains(ip)),
            None if net.addr.is_loopback() => Some(false),
            None => None,
        },
        (Field::Port(Side::Destination), KeyPart::Port(lo, hi)) => {
            let port = p.translated.map_or(p.port, |t| t.to.port());
            Some((*lo..=*hi).contains(&port))
        }
        (Field::Port(Side::Source), _) => None,
        (Field::L4Proto, KeyPart::Protocol(proto)) => Some(*proto == Some(p.protocol)),
        (Field::AddrType(Side::Destination), KeyPart::AddrType(t)) => {
            Some((t == "local") == p.destination_local())
        }
        (Field::AddrType(Side::Source), KeyPart::AddrType(t)) => {
            Some((t == "local") == p.source.is_loopback())
        }
        (Field::Mark, KeyPart::Int(lo, hi)) => Some((*lo..=*hi).contains(&u64::from(p.mark))),
        (_, KeyPart::Unknown(_)) => None,
        _ => None,
    }
}

#[cfg(test)]
mod tests;
