//! Building blocks shared by the findings about rules.

use std::borrow::Cow;

use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::model::{NodePortRule, RuleDump, RuleIdentity, ServicePortRef};

use super::attribution::{Attribution, DesiredIndex};

pub(super) fn rule_finding(
    kind: Kind,
    severity: Severity,
    source: &RuleDump,
    rule: &NodePortRule,
    message: String,
) -> Finding {
    let mut f = Finding::new(kind, severity, message);
    f.protocol = Some(rule.protocol);
    f.port = Some(rule.port);
    f.family = Some(source.family);
    f.backend = Some(source.backend);
    f.rule = Some(rule.rule.text.to_string());
    f.rule_source = Some(source.cite_rule(&rule.rule, &rule.identity));
    f.evidence.extend(describe_path(rule, None));
    f
}

/// The service-level chains of a rule's path (endpoint chains are many and named by
/// the target instead), ending in `endpoint_chain` when one target is meant.
pub(super) fn describe_path(rule: &NodePortRule, endpoint_chain: Option<&str>) -> Option<String> {
    let is_endpoint = |c: &str| c.starts_with("KUBE-SEP-") || c.starts_with("endpoint-");
    let mut hops: Vec<&str> = rule
        .path
        .iter()
        .map(|c| &**c)
        .filter(|c| !is_endpoint(c))
        .collect();
    let endpoints = rule.path.iter().filter(|c| is_endpoint(c)).count();
    match endpoint_chain {
        Some(chain) => hops.push(chain),
        None if endpoints > 0 => {
            return Some(format!(
                "path: {} → {endpoints} endpoint chains",
                hops.join(" → ")
            ));
        }
        None => {}
    }
    (!hops.is_empty()).then(|| format!("path: {}", hops.join(" → ")))
}

pub(super) fn set_service(f: &mut Finding, svc: &ServicePortRef) {
    f.service = Some(svc.service());
    f.service_port = Some(svc.port_name.clone());
}

/// The Service port a rule is for, as the report names it: its owner, or the one its
/// comment names (decoded from the rule text when the parser left it to the hash).
pub(super) fn describe_attribution<'r>(
    index: &DesiredIndex<'r>,
    rule: &'r NodePortRule,
    a: Attribution<'r>,
) -> Option<Cow<'r, ServicePortRef>> {
    match a {
        Attribution::Known(i) | Attribution::Unconfirmed(i) | Attribution::Superseded(i, _) => {
            Some(Cow::Borrowed(&index.port(i).service))
        }
        Attribution::Foreign(Some(s)) => Some(Cow::Borrowed(s)),
        Attribution::Foreign(None) if matches!(rule.identity, RuleIdentity::Iptables { .. }) => {
            rule.undecoded_comment_service().map(Cow::Owned)
        }
        Attribution::Foreign(None) | Attribution::Unknown => None,
    }
}
