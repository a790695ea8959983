//! duplicate-rule: one port dispatched twice in one backend.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet};

use std::net::SocketAddr;

use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::model::{Backend, NodePortRule, RuleDump, Verdict};

use super::attribution::{DesiredIndex, Judged, JudgedRule};
use super::builders::{describe_attribution, rule_finding, set_service};

pub(super) fn duplicate_rules(
    source: &RuleDump,
    judged: &[Judged<'_>],
    index: &DesiredIndex<'_>,
    out: &mut Vec<Finding>,
) {
    // Sorted by key, stable, so each group keeps dump order: the first rule matches.
    let mut forward: Vec<JudgedRule<'_, '_>> = source
        .nodeports
        .iter()
        .zip(judged)
        .filter(|(r, _)| r.verdict == Verdict::Forward)
        .collect();
    forward.sort_by(|(a, _), (b, _)| (a.protocol, a.port, &a.dest).cmp(&(b.protocol, b.port, &b.dest)));
    let same_key = |(a, _): &JudgedRule<'_, '_>, (b, _): &JudgedRule<'_, '_>| {
        (a.protocol, a.port, &a.dest) == (b.protocol, b.port, &b.dest)
    };
    // In a dump that is not whole (a paste of several greps), one line can appear twice
    // without the rule being there twice: only copies that differ prove a duplicate.
    if !source.complete {
        let mut seen: HashSet<&str> = HashSet::new();
        forward.retain(|(r, _)| seen.insert(&r.rule.text));
    }
    for rules in forward.chunk_by(same_key).filter(|g| g.len() > 1) {
        let (protocol, port) = (rules[0].0.protocol, rules[0].0.port);
        let first = rules[0].0;
        // The rule to keep: kube-proxy's own when exactly one is, else the first (the
        // one that matches). Every other rule of the group is reported.
        let kube_proxys: Vec<usize> = (0..rules.len())
            .filter(|&i| written_by_kube_proxy(rules[i].0))
            .collect();
        let keep = if kube_proxys.len() == 1 { kube_proxys[0] } else { 0 };
        let kept = rules[keep].0;
        let kept_targets: BTreeSet<SocketAddr> = kept.targets.iter().map(|t| t.addr).collect();
        for (i, &(rule, j)) in rules.iter().enumerate().filter(|&(i, _)| i != keep) {
            let targets: BTreeSet<SocketAddr> = rule.targets.iter().map(|t| t.addr).collect();
            let differ = targets != kept_targets;
            let shadows = i == 0;
            let message = format!(
                "{protocol}/{port} has {} NodePort rules in {}; only the first ({}) ever matches{}: delete this {}rule{}.",
                rules.len(),
                source.backend,
                source.cite_rule(&first.rule, &first.identity),
                if differ {
                    ", and they disagree on where traffic goes"
                } else {
                    ""
                },
                if written_by_kube_proxy(rule) {
                    ""
                } else {
                    "hand-written "
                },
                if shadows {
                    format!(
                        ", which shadows kube-proxy's ({})",
                        source.cite_rule(&kept.rule, &kept.identity)
                    )
                } else {
                    String::new()
                }
            );
            let severity = if differ {
                Severity::Critical
            } else {
                Severity::Warning
            };
            let mut f = rule_finding(Kind::DuplicateRule, severity, source, rule, message);
            // A hand-written rule names no Service: it serves the port's owner.
            let named = describe_attribution(index, rule, j.attribution)
                .or_else(|| j.owner.map(|i| Cow::Borrowed(&index.port(i).service)));
            if let Some(svc) = named {
                set_service(&mut f, &svc);
            }
            f.evidence.push(format!("kept rule: {}", kept.rule.text));
            out.push(f);
        }
    }
}

/// Rules kube-proxy writes jump to its hashed per-service chains (iptables) or are its
/// map elements (nftables); anything else was written by someone else.
pub(super) fn written_by_kube_proxy(rule: &NodePortRule) -> bool {
    rule.chain_hash.is_some() || rule.backend == Backend::Nftables
}
