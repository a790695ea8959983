//! The API's view of the port beside the effective one: what kube-proxy would make of
//! it on this node, and each difference with the findings that explain it.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use crate::heart::explain::eval::{Branch, End, place_of};

use super::{Difference, EndpointShare, Expected, ExplainInput, Outcome, percent, probe_port, shares};

pub(super) fn expected(input: &ExplainInput<'_>) -> Option<Expected> {
    let desired = input.desired?;
    let probe = input.probe;
    let family = probe.family();
    let Some(port) = desired
        .ports
        .iter()
        .find(|p| p.protocol == probe.protocol && p.node_port == probe.port)
    else {
        let allocated = desired.other_allocated.contains(&(probe.protocol, probe.port));
        return Some(Expected {
            service: None,
            traffic_policy: None,
            outcome: Outcome::None,
            endpoints: Vec::new(),
            uncertain: allocated || desired.uncertain,
        });
    };
    let endpoints = port.endpoints(family);
    let (outcome, set) = match endpoints {
        None => (Outcome::None, Vec::new()),
        Some(e) if !e.has_endpoints => (Outcome::Reject, Vec::new()),
        Some(e) if !e.has_external_endpoints => (Outcome::Drop, Vec::new()),
        Some(e) => {
            let set: Vec<SocketAddr> = if port.external_policy_local {
                e.local.iter().collect()
            } else {
                e.cluster.iter().collect()
            };
            (Outcome::Dnat, set)
        }
    };
    let each = if set.is_empty() {
        0.0
    } else {
        1.0 / set.len() as f64
    };
    Some(Expected {
        service: Some(port.service.kube_proxy_name()),
        traffic_policy: Some(
            if port.external_policy_local {
                "Local"
            } else {
                "Cluster"
            }
            .to_string(),
        ),
        outcome,
        endpoints: shares(set.into_iter().map(|s| (s, each))),
        uncertain: port.uncertain || endpoints.is_some_and(|e| e.cluster_uncertain),
    })
}

/// Each way the effective result differs from the API's: the outcome, then each
/// endpoint's share, then each endpoint the API lists that no connection reaches.
pub(super) fn differences(
    input: &ExplainInput<'_>,
    effective: &[EndpointShare],
    outcome: Outcome,
    expected: Option<&Expected>,
    branches: &[Branch],
) -> Vec<Difference> {
    let Some(expected) = expected else {
        return Vec::new();
    };
    // Where some connections cannot be followed, neither their shares nor what they
    // miss is known: nothing is claimed (the explanation's not_checked says why).
    if branches.iter().any(|b| matches!(b.end, End::Undecided { .. })) {
        return Vec::new();
    }
    let mut out: Vec<Difference> = outcome_difference(input, outcome, expected).into_iter().collect();
    out.extend(share_differences(input, effective, expected, branches));
    out.extend(unreached(input, effective, expected));
    out
}

/// The findings about this endpoint, else those about the port as a whole (a
/// duplicate rule explains why the API's endpoints are not reached).
fn findings_for(input: &ExplainInput<'_>, target: Option<&str>) -> Vec<String> {
    let probe = input.probe;
    let of_port = || {
        input
            .findings
            .iter()
            .filter(|f| f.protocol.is_none_or(|p| p == probe.protocol) && f.port == Some(probe.port))
    };
    let exact: Vec<String> = of_port()
        .filter(|f| target.is_some() && f.target.as_deref() == target)
        .map(|f| f.id())
        .collect();
    if !exact.is_empty() {
        return exact;
    }
    of_port().filter(|f| f.target.is_none()).map(|f| f.id()).collect()
}

fn outcome_difference(input: &ExplainInput<'_>, outcome: Outcome, expected: &Expected) -> Option<Difference> {
    if outcome == expected.outcome || outcome == Outcome::Undetermined {
        return None;
    }
    Some(Difference {
        target: None,
        effective: None,
        expected: None,
        explanation: format!(
            "the API says {} should {}, but new connections {}",
            probe_port(&input.probe),
            describe(expected.outcome),
            describe_effective(outcome)
        ),
        findings: findings_for(input, None),
    })
}

/// Endpoints that take a share the API would not give them.
fn share_differences(
    input: &ExplainInput<'_>,
    effective: &[EndpointShare],
    expected: &Expected,
    branches: &[Branch],
) -> Vec<Difference> {
    let expected_by: HashMap<&str, f64> = expected
        .endpoints
        .iter()
        .map(|e| (e.target.as_str(), e.fraction))
        .collect();
    let mut out = Vec::new();
    for e in effective {
        let want = expected_by.get(e.target.as_str()).copied();
        if want.is_some_and(|w| (w - e.fraction).abs() < 1e-3) {
            continue;
        }
        let by = translated_by(input, branches, &e.target)
            .map(|b| format!(" ({b})"))
            .unwrap_or_default();
        let explanation = match want {
            None => format!(
                "{} takes {} of new connections but is not an endpoint the API lists for this port{by}",
                e.target,
                percent(e.fraction),
            ),
            Some(w) => format!(
                "{} takes {} of new connections where the API's endpoints would give it {}{by}",
                e.target,
                percent(e.fraction),
                percent(w),
            ),
        };
        out.push(Difference {
            target: Some(e.target.clone()),
            effective: Some(e.fraction),
            expected: want,
            explanation,
            findings: findings_for(input, Some(&e.target)),
        });
    }
    out
}

/// Endpoints the API lists that no new connection reaches.
fn unreached(input: &ExplainInput<'_>, effective: &[EndpointShare], expected: &Expected) -> Vec<Difference> {
    let reached: HashSet<&str> = effective.iter().map(|e| e.target.as_str()).collect();
    expected
        .endpoints
        .iter()
        .filter(|e| !reached.contains(e.target.as_str()))
        .map(|e| Difference {
            target: Some(e.target.clone()),
            effective: Some(0.0),
            expected: Some(e.fraction),
            explanation: format!(
                "{} is an endpoint the API lists for this port (share {}), but no new connection reaches it",
                e.target,
                percent(e.fraction)
            ),
            findings: findings_for(input, Some(&e.target)),
        })
        .collect()
}

/// "DNAT at iptables-nft-save.txt:50, not written by kube-proxy": who sends
/// connections to `target`.
fn translated_by(input: &ExplainInput<'_>, branches: &[Branch], target: &str) -> Option<String> {
    let t = branches
        .iter()
        .filter_map(|b| b.packet.translated)
        .find(|t| t.to.to_string() == target)?;
    let rules = input.rules;
    let table = &rules.tables[t.by.table];
    let chain = &table.chains[t.by.chain];
    let rule = t.by.rule.map(|ri| &chain.rules[ri])?;
    let kube_proxy = chain.name.starts_with("KUBE-SEP-")
        || chain.name.starts_with("endpoint-")
        || rule.comment.as_deref().is_some_and(|c| c.contains('/'));
    Some(if kube_proxy {
        format!("the DNAT at {}", place_of(rules, t.by))
    } else {
        format!(
            "a DNAT at {} in {} that kube-proxy did not write",
            place_of(rules, t.by),
            chain.name
        )
    })
}

fn describe(o: Outcome) -> &'static str {
    match o {
        Outcome::Dnat => "reach the Service's endpoints",
        Outcome::Drop => "be dropped (no endpoint on this node for a Local policy)",
        Outcome::Reject => "be rejected (the Service has no endpoints)",
        Outcome::Local | Outcome::None => "reach nothing (no Service owns it)",
        Outcome::Undetermined => "be undetermined",
    }
}

fn describe_effective(o: Outcome) -> &'static str {
    match o {
        Outcome::Dnat => "are translated to endpoints",
        Outcome::Drop => "are dropped",
        Outcome::Reject => "are rejected",
        Outcome::Local => "are delivered to a socket of this node",
        Outcome::None => "reach nothing",
        Outcome::Undetermined => "cannot be followed",
    }
}
