//! backend-split: rules in a backend kube-proxy no longer writes, and which backend is primary.

use std::collections::BTreeMap;

use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::model::{Backend, DestMatch, Family, NodePortRule, Protocol, RuleDump, Verdict};
use crate::heart::proxy_mode::{self};

use super::attribution::{DesiredIndex, Judged};

/// Backend preference when the evidence ties: iptables-nft is what current kube-proxy
/// images pick by default, nftables is opt-in, legacy is the leftover of old nodes.
pub(super) fn backend_rank(b: Backend) -> u8 {
    match b {
        Backend::IptablesNft => 0,
        Backend::Nftables => 1,
        Backend::IptablesLegacy => 2,
    }
}

/// Picks, per family, the source kube-proxy is actively writing: the one whose rules
/// agree best with the cluster state.
pub(super) fn choose_primaries(
    sources: &[RuleDump],
    judged: &[Vec<Judged<'_>>],
    index: &DesiredIndex<'_>,
    has_desired: bool,
) -> BTreeMap<Family, usize> {
    let mut best: BTreeMap<Family, (i64, usize)> = BTreeMap::new();
    for (i, s) in sources.iter().enumerate() {
        if !s.has_kube_proxy || !proxy_mode::holds_live_dispatch(s) {
            continue;
        }
        let score = if has_desired {
            agreement(s, &judged[i], index)
        } else {
            s.kube_rule_count as i64
        };
        let better = match best.get(&s.family) {
            None => true,
            Some(&(bs, bi)) => {
                score > bs || (score == bs && backend_rank(s.backend) < backend_rank(sources[bi].backend))
            }
        };
        if better {
            best.insert(s.family, (score, i));
        }
    }
    best.into_iter().map(|(f, (_, i))| (f, i)).collect()
}

/// +1 for every forwarding rule that matches its Service's current endpoints, -1 for
/// every one that does not.
pub(super) fn agreement(source: &RuleDump, judged: &[Judged<'_>], index: &DesiredIndex<'_>) -> i64 {
    source
        .nodeports
        .iter()
        .zip(judged)
        .filter(|(r, _)| r.verdict == Verdict::Forward)
        .map(|(r, j)| {
            let fresh = j.owner.is_some_and(|i| {
                index
                    .port(i)
                    .endpoints(source.family)
                    .is_some_and(|eps| r.targets.iter().all(|t| eps.listed.contains(&t.addr)))
            });
            if fresh { 1 } else { -1 }
        })
        .sum()
}

pub(super) fn backend_split(
    sources: &[RuleDump],
    primaries: &BTreeMap<Family, usize>,
    out: &mut Vec<Finding>,
) {
    for (i, s) in sources.iter().enumerate() {
        let Some(&primary) = primaries.get(&s.family) else {
            continue;
        };
        if i == primary || !s.has_kube_proxy || sources[primary].backend == s.backend {
            continue;
        }
        let active = sources[primary].backend;
        let forwarding: Vec<&NodePortRule> = s
            .nodeports
            .iter()
            .filter(|r| r.verdict == Verdict::Forward && r.dest != DestMatch::Localhost)
            .collect();
        let mut ports: Vec<(Protocol, u16)> = forwarding.iter().map(|r| (r.protocol, r.port)).collect();
        ports.sort();
        ports.dedup();
        // One finding per stale backend and family: what each stale copy does to its
        // port is in the stale-* findings.
        let message = if ports.is_empty() {
            format!(
                "{} {} also holds kube-proxy chains ({} rules) while kube-proxy writes {}; the kernel evaluates both, so remove kube-proxy's chains from {}.",
                s.backend, s.family, s.kube_rule_count, active, s.backend
            )
        } else {
            const LISTED: usize = 10;
            let listed: Vec<String> = ports
                .iter()
                .take(LISTED)
                .map(|(p, n)| format!("{p}/{n}"))
                .collect();
            format!(
                "{} {} also holds {} kube-proxy NodePort rules, for {} ports ({}{}), while kube-proxy writes {}; the kernel evaluates both and nothing keeps the {} copy current: remove kube-proxy's chains from {}. What each stale copy does to its port is in the stale-* findings.",
                s.backend,
                s.family,
                forwarding.len(),
                ports.len(),
                listed.join(", "),
                if ports.len() > LISTED { ", …" } else { "" },
                active,
                s.backend,
                s.backend
            )
        };
        let mut f = Finding::new(Kind::BackendSplit, Severity::Warning, message);
        f.family = Some(s.family);
        f.backend = Some(s.backend);
        f.rule_source = Some(s.cite_whole());
        // The port numbers, each once (one may serve tcp and udp).
        f.ports = ports.iter().map(|&(_, n)| n).collect();
        f.ports.sort_unstable();
        f.ports.dedup();
        f.evidence.extend(
            forwarding
                .iter()
                .take(5)
                .map(|r| format!("{} ({})", r.rule.text, s.cite_rule(&r.rule, &r.identity))),
        );
        if forwarding.len() > 5 {
            f.evidence
                .push(format!("… and {} more NodePort rules", forwarding.len() - 5));
        }
        out.push(f);
    }
}
