//! Which Service proxy programs the node: kube-proxy in iptables, nftables or IPVS
//! mode, a kube-proxy replacement, or nothing. Pure: decided from what was read.
//!
//! kube-proxy's own answer (`/proxyMode` on its metrics server) wins when it gave one.
//! Otherwise the rules say it: both the iptables and the IPVS proxier rewrite nat
//! `KUBE-SERVICES` on every sync, so its dispatch names the one that synced last; then
//! the backend that holds kube-proxy's NodePort rules best; then IPVS's traces; then a
//! replacement's own chains where kube-proxy's dispatch is absent.

use std::collections::BTreeMap;

use crate::heart::model::{Backend, Family, ProxyMode, RuleDump};
use crate::heart::observed::Observed;

/// Where a mode's NodePorts were read from, when not from netfilter rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datapath {
    /// Cilium's service BPF maps.
    CiliumMaps,
    /// The kernel's IPVS virtual servers (kube-proxy's IPVS mode, kube-router).
    IpvsServers,
}

/// The decision, with what it rests on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyDecision {
    pub mode: ProxyMode,
    /// The datapath the mode's NodePorts were compared in, when portdrift reads it.
    pub datapath: Option<Datapath>,
    /// What the decision rests on, a phrase for people (`kube-proxy's /proxyMode`,
    /// `nat KUBE-SERVICES in iptables-nft ipv4 dispatches to IPVS`).
    pub evidence: String,
    /// What the rules show that the decided mode leaves unjudged or contradicts, as
    /// sentences: each makes the check incomplete.
    pub unjudged: Vec<String>,
}

/// Whether a source's NodePort rules are ones kube-proxy's iptables or nftables mode
/// writes now (and so may be compared with the cluster state): nftables tables, and
/// iptables dumps with iptables-mode chains whose `KUBE-SERVICES` IPVS mode has not
/// taken over.
pub fn holds_live_dispatch(source: &RuleDump) -> bool {
    source.backend == Backend::Nftables
        || (source.signals.iptables_mode && source.signals.services_dispatch != Some(ProxyMode::Ipvs))
}

/// Decides the node's mode. `primaries` are, per family, the sources judged to be what
/// kube-proxy writes now (among those [`holds_live_dispatch`] admits).
pub fn decide(observed: &Observed, primaries: &BTreeMap<Family, usize>) -> ProxyDecision {
    let sources = &observed.dumps;
    let cilium = cilium_maps_shown(observed);
    let shown = prefer_cilium_maps(shown_by_rules(observed, primaries), cilium.as_ref());
    let reported = observed.kube_proxy_mode;
    let mut unjudged = Vec::new();
    let Shown { mode, evidence } = match (reported, shown) {
        (Some(mode), shown) => {
            unjudged.extend(disagreement(mode, shown.as_ref()));
            Shown {
                mode,
                evidence: format!("kube-proxy's /proxyMode answered {mode}"),
            }
        }
        (None, Some(shown)) => shown,
        (None, None) => Shown {
            mode: ProxyMode::None,
            evidence: nothing_found(sources),
        },
    };
    if mode == ProxyMode::Ipvs {
        unjudged.extend(iptables_leftovers(sources));
    }
    let datapath = match mode {
        ProxyMode::Replaced if cilium.is_some() => Some(Datapath::CiliumMaps),
        ProxyMode::Ipvs if observed.ipvs_table.is_some() => Some(Datapath::IpvsServers),
        _ => None,
    };
    if datapath != Some(Datapath::CiliumMaps) {
        unjudged.extend(cilium_maps_unjudged(observed, mode));
    }
    ProxyDecision {
        mode,
        datapath,
        evidence,
        unjudged,
    }
}

/// A mode something on the node shows, with the phrase that says what.
#[derive(Debug)]
struct Shown {
    mode: ProxyMode,
    evidence: String,
}

impl Shown {
    fn new(mode: ProxyMode, evidence: String) -> Self {
        Shown { mode, evidence }
    }
}

/// The mode the rules show, the strongest sign first: IPVS's dispatch, the primary
/// source's rules, kube-proxy's iptables-mode chains alone, IPVS's traces, then a
/// replacement's chains.
fn shown_by_rules(observed: &Observed, primaries: &BTreeMap<Family, usize>) -> Option<Shown> {
    let sources = &observed.dumps;
    ipvs_dispatch_shown(sources)
        .or_else(|| primary_shown(sources, primaries))
        .or_else(|| iptables_chains_shown(sources))
        .or_else(|| ipvs_traces_shown(observed))
        .or_else(|| {
            sources
                .iter()
                .find_map(replacement_shown)
                .map(|e| Shown::new(ProxyMode::Replaced, e))
        })
}

/// nat `KUBE-SERVICES` dispatching to IPVS: IPVS mode synced last.
fn ipvs_dispatch_shown(sources: &[RuleDump]) -> Option<Shown> {
    let s = sources
        .iter()
        .find(|s| s.signals.services_dispatch == Some(ProxyMode::Ipvs))?;
    Some(Shown::new(
        ProxyMode::Ipvs,
        format!(
            "nat KUBE-SERVICES in {} {} dispatches to IPVS ({})",
            s.backend,
            s.family,
            s.signals.ipvs.join(", ")
        ),
    ))
}

/// The mode of the backend that holds kube-proxy's live NodePort rules, IPv4's first.
fn primary_shown(sources: &[RuleDump], primaries: &BTreeMap<Family, usize>) -> Option<Shown> {
    let s = primaries
        .get(&Family::Ipv4)
        .or_else(|| primaries.values().next())
        .map(|&i| &sources[i])?;
    let mode = if s.backend == Backend::Nftables {
        ProxyMode::Nftables
    } else {
        ProxyMode::Iptables
    };
    Some(Shown::new(
        mode,
        format!("kube-proxy's {mode}-mode rules in {} {}", s.backend, s.family),
    ))
}

/// kube-proxy's chains without their dispatch: a fragment, or one table alone.
fn iptables_chains_shown(sources: &[RuleDump]) -> Option<Shown> {
    let s = sources.iter().find(|s| s.signals.iptables_mode)?;
    Some(Shown::new(
        ProxyMode::Iptables,
        format!(
            "kube-proxy's iptables-mode chains in {} {} (without their dispatch)",
            s.backend, s.family
        ),
    ))
}

/// IPVS's traces in the rules or on the node.
fn ipvs_traces_shown(observed: &Observed) -> Option<Shown> {
    let mut traces: Vec<String> = observed
        .dumps
        .iter()
        .flat_map(|s| s.signals.ipvs.iter().cloned())
        .collect();
    if let Some(node) = &observed.ipvs {
        traces.extend(node.describe());
    }
    traces.dedup();
    (!traces.is_empty()).then(|| Shown::new(ProxyMode::Ipvs, traces.join(", ")))
}

/// Cilium's maps rather than a replacement's chains: they are what it forwards by.
fn prefer_cilium_maps(shown: Option<Shown>, cilium: Option<&String>) -> Option<Shown> {
    match (shown, cilium) {
        (
            None
            | Some(Shown {
                mode: ProxyMode::Replaced,
                ..
            }),
            Some(maps),
        ) => Some(Shown::new(ProxyMode::Replaced, maps.clone())),
        (shown, _) => shown,
    }
}

/// Where the rules contradict kube-proxy's own answer, or lack what it says it writes.
fn disagreement(mode: ProxyMode, shown: Option<&Shown>) -> Option<String> {
    match shown {
        Some(Shown { mode: seen, evidence }) if *seen != mode => Some(format!(
            "kube-proxy says it runs in {mode} mode, but the rules show {seen} ({evidence}): the node's rules do not match its kube-proxy"
        )),
        None if mode.is_read() => Some(format!(
            "kube-proxy says it runs in {mode} mode, but none of its {mode}-mode NodePort rules were found: nothing could be compared with the cluster state, and if Services have endpoints, their NodePorts reach nothing on this node"
        )),
        _ => None,
    }
}

/// iptables-mode NodePort rules that IPVS mode's dispatch no longer leads to.
fn iptables_leftovers(sources: &[RuleDump]) -> impl Iterator<Item = String> + '_ {
    sources
        .iter()
        .filter(|s| {
            s.signals.iptables_mode
                && s.signals.services_dispatch == Some(ProxyMode::Ipvs)
                && !s.nodeports.is_empty()
        })
        .map(|s| {
            format!(
                "{} also holds {} of kube-proxy's iptables-mode NodePort rules, which IPVS mode's KUBE-SERVICES no longer leads to: leftovers of an earlier mode, not judged",
                s.origin,
                s.nodeports.len()
            )
        })
}

/// Cilium's NodePort frontends on a node judged by something else.
fn cilium_maps_unjudged(observed: &Observed, mode: ProxyMode) -> Option<String> {
    let maps = observed.cilium.as_ref()?;
    let nodeports = maps
        .families
        .values()
        .flat_map(|f| &f.frontends)
        .filter(|f| f.flags.nodeport())
        .count();
    (nodeports > 0).then(|| {
        format!(
            "Cilium's service maps also hold {nodeports} NodePort frontends, but the node was judged to run kube-proxy in {mode} mode: the maps' NodePorts were not compared with the cluster (their own consistency was checked)"
        )
    })
}

/// Cilium's service maps, when the node has them, as the mode's evidence.
fn cilium_maps_shown(observed: &Observed) -> Option<String> {
    let maps = observed.cilium.as_ref().filter(|m| m.present())?;
    let origin = maps
        .reads
        .first()
        .map(|r| r.origin.as_str())
        .unwrap_or("its pinned maps");
    Some(format!(
        "Cilium's service maps: {} frontends ({origin})",
        maps.frontend_count()
    ))
}

/// A replacement's chains where a whole dump shows kube-proxy's absent: the nat table
/// without kube-proxy's dispatch, or the filter table without any chain of kube-proxy's
/// (its iptables and IPVS modes both always create some there). A fragment cannot show
/// an absence, and names no mode.
fn replacement_shown(s: &RuleDump) -> Option<String> {
    let (who, chain) = s.signals.replacement.as_ref()?;
    if !s.complete {
        return None;
    }
    if s.forwarding_shown {
        return Some(format!("{who}: chain {chain}"));
    }
    (s.signals.filter_shown && s.signals.kube_proxy_chain.is_none()).then(|| {
        format!(
            "{who}'s chain {chain} in a whole filter table of {} {} that holds none of the chains kube-proxy's iptables and IPVS modes always create there (KUBE-FORWARD among them)",
            s.backend, s.family
        )
    })
}

/// What a node without a known Service proxy shows: kube-proxy's chains that do not tell
/// its mode, or a replacement's in a dump too partial to show kube-proxy's are absent.
fn nothing_found(sources: &[RuleDump]) -> String {
    if let Some(chain) = sources.iter().find_map(|s| s.signals.kube_proxy_chain.as_ref()) {
        return format!("kube-proxy's chain {chain}, but none that tell how it forwards Services");
    }
    if let Some((who, chain)) = sources.iter().find_map(|s| s.signals.replacement.as_ref()) {
        return format!(
            "{who}'s chain {chain} in a partial dump, which cannot show whether kube-proxy's are there too"
        );
    }
    "no kube-proxy chains or table, no IPVS, no known replacement".to_string()
}

#[cfg(test)]
mod tests;
