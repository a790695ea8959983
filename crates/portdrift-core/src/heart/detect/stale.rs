//! stale-nodeport and stale-endpoint: rules for ports or endpoints the cluster no longer has.

use std::collections::HashSet;

use rustc_hash::FxHashMap;
use std::sync::Arc;

use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::kube_proxy::{self, Naming};
use crate::heart::model::{DestMatch, DnatTarget, NodePortRule, Protocol, RuleDump, RuleIdentity, Verdict};

use super::attribution::{Attribution, DesiredIndex, Evidence, Judged};
use super::builders::{describe_attribution, describe_path, rule_finding, set_service};

/// For each NodePort key, the first line at which the port's owner has its own rule.
pub(super) type OwnerLines<'s> = FxHashMap<(Protocol, u16, &'s DestMatch), u32>;

pub(super) fn owner_rule_lines<'s>(source: &'s RuleDump, judged: &[Judged<'_>]) -> OwnerLines<'s> {
    let mut lines = OwnerLines::default();
    for (r, j) in source.nodeports.iter().zip(judged) {
        if r.verdict == Verdict::Forward
            && j.owner.is_some()
            && matches!(j.attribution, Attribution::Known(_) | Attribution::Unconfirmed(_))
        {
            let line = lines.entry((r.protocol, r.port, &r.dest)).or_insert(r.rule.line);
            *line = (*line).min(r.rule.line);
        }
    }
    lines
}

pub(super) fn stale_rules(
    source: &RuleDump,
    judged: &[Judged<'_>],
    index: &DesiredIndex<'_>,
    out: &mut Vec<Finding>,
) {
    let mut reported_dnats: HashSet<&RuleIdentity> = HashSet::new();
    let mut checked: rustc_hash::FxHashSet<(usize, usize)> = Default::default();
    // Needed only to judge stale rules, which a healthy node has none of.
    let mut owner_lines: Option<OwnerLines<'_>> = None;
    let all_judged = judged;
    // The main rules first, so evidence shows them rather than kube-proxy's localhost twins.
    let rules = || source.nodeports.iter().zip(all_judged);
    let main_first = rules()
        .filter(|(r, _)| r.dest != DestMatch::Localhost)
        .chain(rules().filter(|(r, _)| r.dest == DestMatch::Localhost));
    for (rule, judged) in main_first {
        // A port held by a Service the cluster state could not show in full (an
        // unreadable object, or a Service kube-proxy skips) is not judged: its rules
        // may be right, and "stale" would be a guess.
        if index.state.uncertain || index.state.other_allocated.contains(&(rule.protocol, rule.port)) {
            continue;
        }
        if index.state.services_partial
            && index
                .owners(rule.protocol, rule.port, source.family)
                .next()
                .is_none()
        {
            continue;
        }
        match rule.verdict {
            Verdict::HealthCheckAccept => stale_health_check(source, rule, index, out),
            Verdict::Reject | Verdict::Drop => {
                if index
                    .owners(rule.protocol, rule.port, source.family)
                    .next()
                    .is_none()
                {
                    out.push(stale_filter_finding(source, rule));
                }
            }
            Verdict::Forward => match judged.owner {
                Some(owner) if matches!(judged.attribution, Attribution::Unconfirmed(_)) => {
                    out.push(unattributed_finding(source, rule, index, owner));
                }
                None => {
                    let lines = owner_lines.get_or_insert_with(|| owner_rule_lines(source, all_judged));
                    out.push(stale_nodeport_finding(
                        source,
                        rule,
                        index,
                        lines,
                        judged.attribution,
                    ));
                }
                Some(owner) => {
                    // kube-proxy's localhost twin shares its targets with the main rule:
                    // one check serves both.
                    if checked.insert((Arc::as_ptr(&rule.targets) as *const DnatTarget as usize, owner)) {
                        stale_endpoints(source, rule, index, owner, &mut reported_dnats, out);
                    }
                }
            },
        }
    }
}

pub(super) fn stale_filter_finding(source: &RuleDump, rule: &NodePortRule) -> Finding {
    let mut f = rule_finding(
        Kind::StaleNodeport,
        Severity::Info,
        source,
        rule,
        format!(
            "{} still {} {}/{} for a Service that no longer owns the port; the port is dead anyway, but kube-proxy should have removed this rule: check that kube-proxy is syncing.",
            source.backend,
            if rule.verdict == Verdict::Reject {
                "rejects"
            } else {
                "drops"
            },
            rule.protocol,
            rule.port
        ),
    );
    if let Some(svc) = &rule.comment_service {
        set_service(&mut f, svc);
    }
    f
}

pub(super) fn stale_health_check(
    source: &RuleDump,
    rule: &NodePortRule,
    index: &DesiredIndex<'_>,
    out: &mut Vec<Finding>,
) {
    let owned = index
        .health_check
        .get(&rule.port)
        .is_some_and(|&i| index.port(i).in_family(source.family));
    if owned {
        return;
    }
    let mut f = rule_finding(
        Kind::StaleNodeport,
        Severity::Info,
        source,
        rule,
        format!(
            "{} still accepts health checks on tcp/{} although no Service uses it as healthCheckNodePort; harmless, but kube-proxy should have removed it: check that kube-proxy is syncing.",
            source.backend, rule.port
        ),
    );
    if let Some(svc) = &rule.comment_service {
        set_service(&mut f, svc);
    }
    out.push(f);
}

pub(super) fn stale_endpoints<'s>(
    source: &'s RuleDump,
    rule: &'s NodePortRule,
    index: &DesiredIndex<'_>,
    owner: usize,
    reported_dnats: &mut HashSet<&'s RuleIdentity>,
    out: &mut Vec<Finding>,
) {
    if !index.endpoints_certain(owner) {
        return;
    }
    let desired = index.port(owner);
    let Some(eps) = desired.endpoints(source.family) else {
        return;
    };
    for target in rule.targets.iter() {
        if eps.listed.contains(&target.addr) || !reported_dnats.insert(&target.identity) {
            continue;
        }
        let mut f = rule_finding(
            Kind::StaleEndpoint,
            Severity::Critical,
            source,
            rule,
            format!(
                "{}'s NodePort {}/{} still sends traffic to {}, which no EndpointSlice of the Service lists (a deleted pod): connections there fail; kube-proxy has not synced this Service — check its logs for restore errors, or remove the stale rule.",
                desired.service.service(),
                rule.protocol,
                rule.port,
                target.addr
            ),
        );
        set_service(&mut f, &desired.service);
        f.target = Some(target.addr.to_string());
        f.evidence.clear();
        // A DNAT written straight into the dispatch chain is its own evidence.
        if target.rule.line != rule.rule.line || target.rule.text != rule.rule.text {
            f.evidence.push(format!(
                "NodePort rule: {} ({})",
                rule.rule.text,
                source.cite_rule(&rule.rule, &rule.identity)
            ));
            f.evidence.extend(describe_path(rule, Some(&target.chain)));
        }
        f.rule = Some(target.rule.text.to_string());
        f.rule_source = Some(source.cite_rule(&target.rule, &target.identity));
        out.push(f);
    }
}

pub(super) fn stale_nodeport_finding(
    source: &RuleDump,
    rule: &NodePortRule,
    index: &DesiredIndex<'_>,
    owner_lines: &OwnerLines<'_>,
    attribution: Attribution<'_>,
) -> Finding {
    let named = describe_attribution(index, rule, attribution);
    let owner = index.owners(rule.protocol, rule.port, source.family).next();
    // A stale rule ahead of the owner's rule takes the owner's traffic.
    let owner_line = owner_lines.get(&(rule.protocol, rule.port, &rule.dest)).copied();
    let hijacks = owner.is_some() && owner_line.is_none_or(|l| rule.rule.line < l);
    let whose = match &named {
        Some(svc) => format!("for {}", svc.service()),
        None => "naming no Service".to_string(),
    };
    let message = stale_message(source, rule, index, owner, attribution, &whose, hijacks);
    let severity = if hijacks {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let mut f = rule_finding(Kind::StaleNodeport, severity, source, rule, message);
    if let Some(svc) = &named {
        set_service(&mut f, svc);
    }
    for t in rule.targets.iter() {
        f.evidence.push(format!(
            "forwards to {} ({})",
            t.addr,
            source.cite_rule(&t.rule, &t.identity)
        ));
    }
    if let Some(chain) = &rule.dangling {
        f.evidence
            .push(format!("jumps to chain {chain}, which the dump does not define"));
    }
    f
}

/// Why a rule commented as its port's owner is an earlier incarnation's.
fn superseded_because(rule: &NodePortRule, evidence: Evidence) -> String {
    let chain = rule.path.first().map_or("its chain", |c| &**c);
    match evidence {
        Evidence::OtherProtocol => format!(
            "{chain} is the Service port's name hashed with another protocol than {}",
            rule.protocol
        ),
        Evidence::NoCurrentEndpoint => format!(
            "{chain} is not the name any kube-proxy release gives it, and the rule forwards only to addresses none of its EndpointSlices list"
        ),
    }
}

/// The sentence of a stale NodePort rule: for no owner, for a Service port other than
/// the port's owner, or an earlier incarnation of the owner's.
fn stale_message(
    source: &RuleDump,
    rule: &NodePortRule,
    index: &DesiredIndex<'_>,
    owner: Option<usize>,
    attribution: Attribution<'_>,
    whose: &str,
    hijacks: bool,
) -> String {
    match owner {
        Some(owner) if let Attribution::Superseded(_, evidence) = attribution => format!(
            "{}/{} belongs to {}, and {} has a rule commented as its{} that an earlier incarnation left: {}; delete the stale rule.",
            rule.protocol,
            rule.port,
            index.port(owner).service.service(),
            source.backend,
            if hijacks {
                ", matching first and taking the port's traffic,"
            } else {
                ""
            },
            superseded_because(rule, evidence),
        ),
        None => format!(
            "No Service owns {}/{} in {}, but {} still forwards it ({whose}); kube-proxy should have removed this rule: check that it is running and syncing, then delete the rule.",
            rule.protocol, rule.port, source.family, source.backend
        ),
        Some(owner) => format!(
            "{}/{} now belongs to {}, but {} still has a rule {whose}{}; delete the stale rule.",
            rule.protocol,
            rule.port,
            index.port(owner).service.service(),
            source.backend,
            if hijacks {
                " that matches first and takes the port's traffic"
            } else {
                ""
            }
        ),
    }
}

/// A rule commented as its port's owner whose chain name no release gives the owner,
/// with nothing else to tell: said at info level, taken as the owner's, never to be
/// deleted. The names each release would give the owner are the evidence.
pub(super) fn unattributed_finding(
    source: &RuleDump,
    rule: &NodePortRule,
    index: &DesiredIndex<'_>,
    owner: usize,
) -> Finding {
    let desired = index.port(owner);
    let chain = rule.path.first().map_or("", |c| &**c);
    let prefix = chain.get(..chain.len().saturating_sub(16)).unwrap_or("");
    let why = if rule.targets.is_empty() {
        "it leads to no DNAT the dump shows"
    } else {
        "the cluster state does not list the Service's endpoints in full"
    };
    let mut f = rule_finding(
        Kind::UnattributedRule,
        Severity::Info,
        source,
        rule,
        format!(
            "{}/{}'s rule in {} is commented as {}'s, but its chain {chain} is not the name any kube-proxy release known here gives that Service port, and nothing else shows whose it is ({why}): it is taken as {}'s and left alone. A kube-proxy release that names chains another way would do this; nothing here says to delete it.",
            rule.protocol,
            rule.port,
            source.backend,
            desired.service,
            desired.service.service(),
        ),
    );
    set_service(&mut f, &desired.service);
    let namings: Vec<Naming> = Naming::ALL
        .into_iter()
        .filter(|n| n.applies_to(&desired.service))
        .collect();
    for &naming in &namings {
        let hash = kube_proxy::service_chain_hash_as(&desired.service, rule.protocol, naming);
        let releases = if namings.len() == 1 {
            // A named port was spelled the same in every release.
            kube_proxy::NAMING_ALL_RELEASES
        } else {
            naming.releases()
        };
        f.evidence.push(format!(
            "{prefix}{} is its name in kube-proxy {releases}",
            String::from_utf8_lossy(&hash)
        ));
    }
    f
}
