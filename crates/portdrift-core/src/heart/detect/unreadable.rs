//! malformed-rule and unparsed-rule: rules the parsers could not use.

use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::model::RuleDump;

use super::UNPARSED_REPORTED;

pub(super) fn malformed_rules(source: &RuleDump, out: &mut Vec<Finding>) {
    for m in &source.malformed {
        let mut f = Finding::new(
            Kind::MalformedRule,
            Severity::Warning,
            format!(
                "A rule in {} {} chain {} {}, which kube-proxy never writes: an iptables binary that does not match the one that wrote the rules (kubernetes#112477), or a hand edit, leaves such rules — compare the node's and kube-proxy's iptables versions, and let kube-proxy resync.",
                source.backend, m.table, m.chain, m.problem
            ),
        );
        f.family = Some(source.family);
        f.backend = Some(source.backend);
        f.rule = Some(m.rule.text.to_string());
        f.rule_source = Some(source.cite_in(&m.table, &m.chain, &m.rule));
        out.push(f);
    }
}

// === unparsed-rule ===

pub(super) fn unparsed_rules(source: &RuleDump, out: &mut Vec<Finding>) {
    for u in source.unparsed.iter().take(UNPARSED_REPORTED) {
        let mut f = Finding::new(
            Kind::UnparsedRule,
            Severity::Warning,
            format!(
                "Line {} of {} could not be understood ({}); the analysis of this dump may be incomplete — check the capture, and report the line if it is a valid rule.",
                u.line, source.origin, u.reason
            ),
        );
        f.family = Some(source.family);
        f.backend = Some(source.backend);
        f.rule = Some(u.text.clone());
        f.rule_source = Some(source.cite_line(u.line));
        out.push(f);
    }
    let rest = source.unparsed.len().saturating_sub(UNPARSED_REPORTED);
    if rest > 0 {
        let mut f = Finding::new(
            Kind::UnparsedRule,
            Severity::Warning,
            format!(
                "{rest} more lines of {} could not be understood; the dump looks damaged.",
                source.origin
            ),
        );
        f.family = Some(source.family);
        f.backend = Some(source.backend);
        f.rule_source = Some(source.cite_whole());
        out.push(f);
    }
}
