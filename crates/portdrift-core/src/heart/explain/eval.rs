//! Following one new connection through the tables, as the kernel runs them: the base
//! chains of each hook in priority order, each chain's rules in order, jumps, gotos and
//! returns, verdict maps, and a branch wherever a rule matches only a share of new
//! connections (`statistic`, `numgen`). Each branch ends in an [`End`] with its share.
//!
//! A condition the evaluator cannot decide stops its branch as undecided, naming the
//! rule: a path is promised only as far as every rule on it was decided.

use crate::heart::explain::model::{ChainType, Cond, Hook, Probe, Rule, Rulesets, Table};

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

/// Where a walk enters a chain: the chain (its table's index and its own) and the first
/// rule it tries.
#[derive(Debug, Clone, Copy)]
struct Entry {
    table: usize,
    chain: usize,
    from: usize,
}

impl<'a> Walker<'a> {
    /// Runs a chain from its `entry`, handing each branch that leaves it to `emit`:
    /// `Flow::Returned` when it falls off the end or returns.
    fn run(
        &mut self,
        hook: Hook,
        entry: Entry,
        mut branch: Branch,
        depth: usize,
        emit: &mut dyn FnMut(Branch, Flow),
    ) {
        let Entry {
            table: ti,
            chain: ci,
            from,
        } = entry;
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
            let hit = |share| Hit::new(hook, at, depth, share);
            match test_rule(table, rule, &branch.packet) {
                Test::No { why, quiet, address } => {
                    self.skip(hook, at, rule, Skip { why, quiet, address }, &mut branch)
                }
                Test::Undecided(why) => return stop(branch, at, why, emit),
                Test::Yes => return self.act(hit(1.0), &rule.action, branch, emit),
                Test::Share(p) if p <= 0.0 => {}
                Test::Share(p) => {
                    if p >= 1.0 || !self.may_branch() {
                        return self.act(hit(p.min(1.0)), &rule.action, branch, emit);
                    }
                    let mut taken = branch.clone();
                    taken.share *= p;
                    branch.share *= 1.0 - p;
                    self.act(hit(p), &rule.action, taken, emit);
                }
            }
        }
        emit(branch, Flow::Returned)
    }

    /// A rule the connection does not match: listed on the path unless the reason is
    /// only another Service's port, protocol or address.
    fn skip(&mut self, hook: Hook, at: RuleRef, rule: &Rule, skip: Skip, branch: &mut Branch) {
        // An affinity check that misses still says the path has session affinity.
        if let Some(seconds) = rule.conds.iter().find_map(|c| match c {
            Cond::Affinity { seconds, .. } => Some(seconds.unwrap_or(AFFINITY_DEFAULT)),
            _ => None,
        }) {
            branch.affinity = Some(seconds);
        }
        if skip.address {
            self.remarks.address_specific.push((at, skip.why.clone()));
        }
        if skip.quiet {
            self.remarks.quietly_skipped += 1;
        } else {
            branch.steps.push(Step {
                hook,
                at,
                kind: StepKind::Skipped { why: skip.why },
            });
        }
    }

    fn may_branch(&mut self) -> bool {
        self.branches += 1;
        self.branches < MAX_BRANCHES
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
        let entry = Entry {
            table: at.table,
            chain: at.chain,
            from: next,
        };
        self.run(hook, entry, branch, depth, emit)
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

/// Why a rule did not match, as [`Test::No`] says it.
struct Skip {
    why: String,
    /// About another Service: counted, not listed.
    quiet: bool,
    /// Only because the rule names another address of the node.
    address: bool,
}

/// Ends `branch` as undecided at the rule `at`: nothing is followed past it.
fn stop(mut branch: Branch, at: RuleRef, why: String, emit: &mut dyn FnMut(Branch, Flow)) {
    branch.end = End::Undecided { at: Some(at), why };
    emit(branch, Flow::Ended)
}

/// Newest backend first among equals: see [`Walker::note_nat_ties`].
fn backend_order(table: &Table) -> u8 {
    match table.backend {
        crate::heart::model::Backend::Nftables => 0,
        crate::heart::model::Backend::IptablesNft => 1,
        crate::heart::model::Backend::IptablesLegacy => 2,
    }
}

mod act;
mod conditions;
mod hook;
mod path;

pub use conditions::could_match;
pub use path::{Branch, End, Packet, Remarks, RuleRef, Step, StepKind, TieOrder, Translation, place_of};

use path::set_name;

use act::Hit;
use conditions::{Test, test_rule};

#[cfg(test)]
mod tests;
