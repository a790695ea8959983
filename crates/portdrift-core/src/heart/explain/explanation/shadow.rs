//! Rules that never see the connections they were written for: those after a rule
//! that takes every new connection first, looked for through jumps a few chains deep.

use crate::heart::explain::eval::{Branch, RuleRef, StepKind, could_match, place_of};
use crate::heart::explain::model::{Cond, Side};
use crate::heart::model::Protocol;

use super::{ExplainInput, SAME_SHARE, Shadowed, probe_port};

/// Rules after a definite match in the same chain that would match too: they never see
/// the connection.
pub(super) fn shadowed(input: &ExplainInput<'_>, branches: &[Branch]) -> Vec<Shadowed> {
    let rules = input.rules;
    let mut out: Vec<Shadowed> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for b in branches {
        for (i, step) in b.steps.iter().enumerate() {
            let StepKind::Matched { share, .. } = step.kind else {
                continue;
            };
            if share < 1.0 - SAME_SHARE {
                continue;
            }
            let Some(ri) = step.at.rule else { continue };
            let back = b.steps[i + 1..]
                .iter()
                .any(|s| s.at.table == step.at.table && s.at.chain == step.at.chain);
            if back {
                continue;
            }
            let chain = &rules.tables[step.at.table].chains[step.at.chain];
            let later: Vec<RuleRef> = (ri + 1..chain.rules.len())
                .map(|r| RuleRef {
                    rule: Some(r),
                    ..step.at
                })
                .collect();
            let mut found = Vec::new();
            shadowed_in(input, &later, 0, &mut found);
            for at in found {
                if !seen.insert(at) {
                    continue;
                }
                let rule = &rules.tables[at.table].chains[at.chain].rules[at.rule.expect("a rule")];
                out.push(Shadowed {
                    at: place_of(rules, at),
                    rule: rule.text.clone(),
                    by: place_of(rules, step.at),
                    why: format!(
                        "{} takes every new connection to {} first",
                        place_of(rules, step.at),
                        probe_port(&input.probe)
                    ),
                });
            }
        }
    }
    out
}

/// Among `candidates` (rules a connection would meet later), those written for this
/// port that would match it, looking through jumps a few chains deep (a CNI's
/// `CNI-HOSTPORT-DNAT` behind a `PREROUTING` jump, kube-proxy's `KUBE-NODEPORTS`).
fn shadowed_in(input: &ExplainInput<'_>, candidates: &[RuleRef], depth: usize, found: &mut Vec<RuleRef>) {
    use crate::heart::explain::model::Action;
    let rules = input.rules;
    for &at in candidates {
        let table = &rules.tables[at.table];
        let rule = &table.chains[at.chain].rules[at.rule.expect("a rule")];
        if !could_match(rules, at, &input.probe) {
            continue;
        }
        if names_port(rule, input.probe.protocol, input.probe.port) {
            found.push(at);
            continue;
        }
        if let (Action::Jump(target) | Action::Goto(target), true) = (&rule.action, depth < 3)
            && let Some(ci) = table.chain(target)
        {
            let inner: Vec<RuleRef> = (0..table.chains[ci].rules.len())
                .map(|r| RuleRef {
                    table: at.table,
                    chain: ci,
                    rule: Some(r),
                })
                .collect();
            shadowed_in(input, &inner, depth + 1, found);
        }
    }
}

/// The rule is written for this protocol and port (and no other address).
fn names_port(rule: &crate::heart::explain::model::Rule, protocol: Protocol, port: u16) -> bool {
    let mut port_named = false;
    for c in &rule.conds {
        match c {
            Cond::Port {
                side: Side::Destination,
                ranges,
                negated: false,
            } => {
                if !ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&port)) {
                    return false;
                }
                port_named = true;
            }
            Cond::Protocol {
                protocol: p,
                negated: false,
            } if *p != Some(protocol) => return false,
            Cond::Addr {
                side: Side::Destination,
                negated: false,
                nets,
            } if nets.iter().all(|n| n.addr.is_loopback()) => return false,
            Cond::Random { .. } | Cond::Nth { .. } | Cond::Affinity { .. } => return false,
            _ => {}
        }
    }
    port_named
}
