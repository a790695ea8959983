//! One hook of the walk: its base chains in the kernel's order, each run in turn for
//! every branch still going, and a chain's policy where a branch falls off its end.

use crate::heart::explain::model::{ChainType, Hook};
use crate::heart::model::Family;

use super::{Branch, End, Entry, Flow, RuleRef, Step, StepKind, TieOrder, Walker, backend_order, place_of};

/// A base chain at the hook, ordered as the walk runs them: by priority, then by
/// backend (see [`Walker::note_nat_ties`]), then by where the dump has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct BaseAt {
    priority: i32,
    rank: u8,
    table: usize,
    chain: usize,
}

impl BaseAt {
    /// The chain itself as a place on the path (its policy, or the chain not run).
    fn place(self) -> RuleRef {
        RuleRef {
            table: self.table,
            chain: self.chain,
            rule: None,
        }
    }
}

impl Walker<'_> {
    /// The base chains at `hook`, in the kernel's order, run one after the other for
    /// every branch still going.
    pub(super) fn hook(&mut self, hook: Hook, start: Branch) -> Vec<Branch> {
        let bases = self.bases_at(hook, start.packet.destination.family());
        self.note_nat_ties(hook, &bases);
        let mut live = vec![start];
        let mut ended = Vec::new();
        for &base in &bases {
            let mut going = Vec::new();
            for branch in live {
                self.run_base(hook, base, branch, &mut going, &mut ended);
            }
            live = going;
        }
        // Branches still going were accepted by every chain at this hook.
        ended.extend(live);
        ended
    }

    /// The base chains of `family`'s tables at `hook`, sorted.
    fn bases_at(&self, hook: Hook, family: Family) -> Vec<BaseAt> {
        let mut bases = Vec::new();
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
                    bases.push(BaseAt {
                        priority: base.priority,
                        rank,
                        table: ti,
                        chain: ci,
                    });
                }
            }
        }
        bases.sort();
        bases
    }

    /// Same priority: the kernel runs the chain registered last first, and a dump
    /// does not show that order. The newer backend is taken first (a node with two
    /// got the second when kube-proxy switched to it) and the tie is reported.
    fn note_nat_ties(&mut self, hook: Hook, bases: &[BaseAt]) {
        for pair in bases.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if a.priority == b.priority
                && a.rank != b.rank
                && self.nat_with_rules(a)
                && self.nat_with_rules(b)
            {
                self.remarks.nat_order_unknown.push((hook, a.table, b.table));
            }
        }
    }

    fn nat_with_rules(&self, at: BaseAt) -> bool {
        let chain = &self.rules.tables[at.table].chains[at.chain];
        chain.base.is_some_and(|b| b.kind == ChainType::Nat) && !chain.rules.is_empty()
    }

    /// One branch through one base chain: into `going` what comes out accepted (for
    /// the next base chain), into `ended` what ends in it.
    fn run_base(
        &mut self,
        hook: Hook,
        at: BaseAt,
        branch: Branch,
        going: &mut Vec<Branch>,
        ended: &mut Vec<Branch>,
    ) {
        let base = self.rules.tables[at.table].chains[at.chain]
            .base
            .expect("a base chain");
        if base.kind == ChainType::Nat
            && matches!(hook, Hook::Prerouting | Hook::Output)
            && let Some(t) = branch.packet.translated
        {
            return going.push(self.not_run(hook, at, t.by, branch));
        }
        if base.kind == ChainType::Nat && hook == Hook::Input {
            // INPUT nat chains translate sources only, for connections this
            // explanation has already delivered.
            return going.push(branch);
        }
        let mut left = Vec::new();
        let entry = Entry {
            table: at.table,
            chain: at.chain,
            from: 0,
        };
        self.run(hook, entry, branch, 0, &mut |b, flow| left.push((b, flow)));
        for (mut b, flow) in left {
            match (flow, &b.end) {
                // Fell off the base chain's end: its policy decides.
                (Flow::Returned, _) => {
                    b.steps.push(Step {
                        hook,
                        at: at.place(),
                        kind: StepKind::Policy {
                            accepts: base.accepts,
                        },
                    });
                    if base.accepts {
                        going.push(b);
                    } else {
                        b.end = End::Dropped(at.place());
                        ended.push(b);
                    }
                }
                // Accepted (or translated) by this chain: the next base chain runs.
                (Flow::Ended, End::Accepted) => going.push(b),
                (Flow::Ended, _) => ended.push(b),
            }
        }
    }

    /// A nat chain the kernel skips: the connection's translation is bound already.
    fn not_run(&self, hook: Hook, at: BaseAt, by: RuleRef, mut branch: Branch) -> Branch {
        branch.steps.push(Step {
            hook,
            at: at.place(),
            kind: StepKind::NotRun {
                why: format!(
                    "not run: the connection's address translation is already bound by {}",
                    place_of(self.rules, by)
                ),
            },
        });
        branch
    }
}
