//! One branch of the walk as a path a person reads: each step as evidence (where the
//! rule is, what it says, what it did) and where the branch ended.

use crate::heart::explain::eval::{Branch, End, Step, StepKind, place_of};
use crate::heart::explain::model::{RulePlace, Rulesets};

use super::{ExplainInput, Outcome, Path, PathStep, SAME_SHARE, StepResult, round};

pub(super) fn path_of(input: &ExplainInput<'_>, b: &Branch) -> Path {
    let (outcome, target, undecided) = end_of(b);
    Path {
        fraction: round(b.share),
        outcome,
        target,
        steps: b.steps.iter().map(|s| path_step(input.rules, s)).collect(),
        undecided,
    }
}

/// One step, with the rule it was taken at as the dump has it.
fn path_step(rules: &Rulesets, s: &Step) -> PathStep {
    let table = &rules.tables[s.at.table];
    let chain = &table.chains[s.at.chain];
    let rule = s.at.rule.map(|ri| &chain.rules[ri]);
    let (result, does, share) = result_of(&s.kind);
    PathStep {
        hook: s.hook.as_str().to_string(),
        backend: table.backend,
        table: table.name.clone(),
        chain: chain.name.clone(),
        at: place_of(rules, s.at),
        line: rule.and_then(|r| match r.place {
            RulePlace::Line(n) => Some(n),
            _ => None,
        }),
        handle: rule.and_then(|r| match r.place {
            RulePlace::Handle(h) => Some(h),
            _ => None,
        }),
        rule: rule.map(|r| r.text.clone()),
        result,
        does,
        share,
    }
}

/// What happened at a step, what it did as a sentence, and its share when it took
/// only part of the connections.
fn result_of(kind: &StepKind) -> (StepResult, String, Option<f64>) {
    match kind {
        StepKind::Matched { does, share } => (
            StepResult::Matched,
            does.clone(),
            (*share < 1.0 - SAME_SHARE).then_some(round(*share)),
        ),
        StepKind::Skipped { why } => (StepResult::Skipped, format!("skipped: {why}"), None),
        StepKind::Policy { accepts } => (
            StepResult::Policy,
            format!("policy {}", if *accepts { "accept" } else { "drop" }),
            None,
        ),
        StepKind::NotRun { why } => (StepResult::NotRun, why.clone(), None),
    }
}

/// Where the branch ended: its outcome, its target, and why it stopped if undecided.
fn end_of(b: &Branch) -> (Outcome, Option<String>, Option<String>) {
    match &b.end {
        End::Forwarded(to) => (Outcome::Dnat, Some(to.to_string()), None),
        End::Delivered { port } => match b.packet.translated {
            Some(t) if !t.redirect => (Outcome::Dnat, Some(t.to.to_string()), None),
            _ => (Outcome::Local, Some(format!("this node, port {port}")), None),
        },
        End::Dropped(_) => (Outcome::Drop, None, None),
        End::Rejected(_) => (Outcome::Reject, None, None),
        End::Undecided { why, .. } => (Outcome::Undetermined, None, Some(why.clone())),
        End::Accepted => (Outcome::Local, None, None),
    }
}
