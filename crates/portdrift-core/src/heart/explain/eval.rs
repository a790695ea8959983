//! Following one new connection through the tables, as the kernel runs them: the base
//! chains of each hook in priority order, each chain's rules in order, jumps, gotos and
//! returns, verdict maps, and a branch wherever a rule matches only a share of new
//! connections (`statistic`, `numgen`). Each branch ends in an [`End`] with its share.
//!
//! A condition the evaluator cannot decide stops its branch as undecided, naming the
//! rule: a path is promised only as far as every rule on it was decided.

use std::net::{IpAddr, SocketAddr};

use crate::heart::explain::model::{
    Action, ChainType, Cond, Destination, Hook, KeyPart, Probe, Rulesets, Table, target_of,
};

/// At most this many branches: kube-proxy's cascades give one per endpoint, so more
/// means rules that multiply each other, and the rest is reported undecided.
const MAX_BRANCHES: usize = 20_000;
/// kube-proxy's session affinity timeout when a rule does not say (3 hours).
const AFFINITY_DEFAULT: u32 = 10_800;
/// The kernel refuses jumps nested deeper than this.
const MAX_DEPTH: usize = 64;

/// Follows `probe` through every table of its family in `rules`.
pub fn follow(rules: &Rulesets, probe: &Probe) -> (Vec<Branch>, Remarks) {
    follow_in_order(rules, probe, TieOrder::NewestFirst)
}

/// [`follow`], with ties between backends broken as `order` says.
pub fn follow_in_order(rules: &Rulesets, probe: &Probe, order: TieOrder) -> (Vec<Branch>, Remarks) {
    let mut walker = Walker {
        rules,
        remarks: Remarks::default(),
        branches: 0,
        order,
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
    order: TieOrder,
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
                    let rank = match self.order {
                        TieOrder::NewestFirst => backend_order(table),
                        TieOrder::OldestFirst => 2 - backend_order(table),
                    };
                    bases.push((base.priority, rank, ti, ci));
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
                                place_of(self.rules, t.by)
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
            match test_rule(table, rule, &branch.packet) {
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
                    return stop(branch, at, why, emit);
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
                self.after(hook, at, branch, depth, emit)
            }
            Action::SetMark { value, mask } => {
                branch.packet.mark = (branch.packet.mark & !mask) ^ value;
                branch
                    .steps
                    .push(matched(format!("set mark {:#x}", branch.packet.mark)));
                self.after(hook, at, branch, depth, emit)
            }
            Action::Jump(target) | Action::Goto(target) => {
                let goto = matches!(action, Action::Goto(_));
                let Some(tci) = table.chain(target) else {
                    return stop(
                        branch,
                        at,
                        format!("it leads to the chain {target}, which the dump does not hold"),
                        emit,
                    );
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
                        self.after(hook, at, b, depth, emit);
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
            Action::Dnat(_) | Action::Redirect(_) => stop(
                branch,
                at,
                "a DNAT outside a nat chain at prerouting, which this explanation does not model".to_string(),
                emit,
            ),
            Action::SourceNat => {
                branch.steps.push(matched("source NAT".to_string()));
                branch.end = End::Accepted;
                emit(branch, Flow::Ended)
            }
            Action::Vmap { key, map } => {
                let Some(elements) = table.elements(map) else {
                    return stop(
                        branch,
                        at,
                        format!("the map {} is not in the dump", set_name(map)),
                        emit,
                    );
                };
                match find_element(elements, key, &branch.packet) {
                    Lookup::Found(element) => {
                        let Some(action) = element.action.clone() else {
                            return stop(
                                branch,
                                at,
                                format!("the element {} of {} has no verdict", element.text, set_name(map)),
                                emit,
                            );
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
                        self.after(hook, at, branch, depth, emit)
                    }
                    Lookup::Undecided(why) => stop(branch, at, why, emit),
                }
            }
            Action::Numgen { modulus, map } => {
                let Some(elements) = table.elements(map) else {
                    return stop(
                        branch,
                        at,
                        format!("the map {} is not in the dump", set_name(map)),
                        emit,
                    );
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
                    self.after(hook, at, b, depth, emit);
                }
            }
            Action::Unknown(what) => stop(
                branch,
                at,
                format!("its action ({what}) is not one this explanation follows"),
                emit,
            ),
        }
    }

    /// Goes on with the rule after `at` in its chain.
    fn after(
        &mut self,
        hook: Hook,
        at: RuleRef,
        branch: Branch,
        depth: usize,
        emit: &mut dyn FnMut(Branch, Flow),
    ) {
        let next = at.rule.expect("a rule") + 1;
        self.run(hook, at.table, at.chain, next, branch, depth, emit)
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
}

/// Ends `branch` as undecided at the rule `at`: nothing is followed past it.
fn stop(mut branch: Branch, at: RuleRef, why: String, emit: &mut dyn FnMut(Branch, Flow)) {
    branch.end = End::Undecided { at: Some(at), why };
    emit(branch, Flow::Ended)
}

/// Newest backend first among equals: see [`Walker::hook`].
fn backend_order(table: &Table) -> u8 {
    match table.backend {
        crate::heart::model::Backend::Nftables => 0,
        crate::heart::model::Backend::IptablesNft => 1,
        crate::heart::model::Backend::IptablesLegacy => 2,
    }
}

mod conditions;
mod path;

pub use conditions::could_match;
pub use path::{Branch, End, Packet, Remarks, RuleRef, Step, StepKind, TieOrder, Translation, place_of};

use path::set_name;

use conditions::{Lookup, Test, find_element, test_rule};

#[cfg(test)]
mod tests;
