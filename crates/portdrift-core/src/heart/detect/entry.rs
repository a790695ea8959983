//! missing-rule, node-wide: kube-proxy's NodePort rules that no packet reaches, because
//! a rule leading to them is gone (`nat KUBE-SERVICES -j KUBE-NODEPORTS`, `nat
//! PREROUTING -j KUBE-SERVICES`; nftables mode's `vmap @service-nodeports` in `services`,
//! `jump services` in `nat-prerouting`). Every NodePort rule is there, and none works.

use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::model::{RuleDump, Verdict};

/// `source` is the backend kube-proxy writes now for its family.
pub(super) fn unreached_nodeports(source: &RuleDump, out: &mut Vec<Finding>) {
    // Only a dump that shows the whole nat table shows a jump absent.
    if source.missing_entry.is_empty() || !source.complete || !source.forwarding_shown {
        return;
    }
    let mut forwarding = source.nodeports.iter().filter(|r| r.verdict == Verdict::Forward);
    let Some(first) = forwarding.next() else {
        return;
    };
    let count = 1 + forwarding.count();
    let jumps: Vec<&str> = source.missing_entry.iter().map(|j| j.rule).collect();
    let (reached_by, fails) = if source.missing_entry.iter().any(|j| j.every_packet) {
        ("no packet reaches", "every NodePort fails on this node")
    } else {
        // The output hook still leads the node's own connections in.
        (
            "no packet from outside the node reaches",
            "every NodePort fails for clients outside the node",
        )
    };
    let mut f = Finding::new(
        Kind::MissingRule,
        Severity::Critical,
        format!(
            "{} {} lacks kube-proxy's {}, so {reached_by} its {count} NodePort rules: {fails} although its rule is there — kube-proxy is not syncing, or the rule was deleted by hand; check kube-proxy's logs (its next sync writes the rule again).",
            source.backend,
            source.family,
            jumps.join(" and ")
        ),
    );
    f.backend = Some(source.backend);
    f.family = Some(source.family);
    f.evidence.push(format!(
        "first NodePort rule left unreached: {} ({})",
        first.rule.text,
        source.cite_rule(&first.rule, &first.identity)
    ));
    out.push(f);
}
