//! Which Service proxy programs the node: kube-proxy in iptables, nftables or IPVS
//! mode, a kube-proxy replacement, or nothing. Pure: decided from what was read.
//!
//! kube-proxy's own answer (`/proxyMode` on its metrics server) wins when it gave one.
//! Otherwise the rules say it: both the iptables and the IPVS proxier rewrite nat
//! `KUBE-SERVICES` on every sync, so its dispatch names the one that synced last; then
//! the backend that holds kube-proxy's NodePort rules best; then IPVS's traces; then a
//! replacement's own chains where kube-proxy's dispatch is absent.

use std::collections::BTreeMap;

use crate::heart::model::{Backend, Family, ProxyMode, RuleSource};
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
pub fn holds_live_dispatch(source: &RuleSource) -> bool {
    source.backend == Backend::Nftables
        || (source.signals.iptables_mode && source.signals.services_dispatch != Some(ProxyMode::Ipvs))
}

/// Decides the node's mode. `primaries` are, per family, the sources judged to be what
/// kube-proxy writes now (among those [`holds_live_dispatch`] admits).
pub fn decide(observed: &Observed, primaries: &BTreeMap<Family, usize>) -> ProxyDecision {
    let sources = &observed.sources;
    let reported = observed.kube_proxy_mode.as_deref().and_then(parse_reported);
    let ipvs_dispatch = sources
        .iter()
        .find(|s| s.signals.services_dispatch == Some(ProxyMode::Ipvs));
    let primary = primaries
        .get(&Family::Ipv4)
        .or_else(|| primaries.values().next())
        .map(|&i| &sources[i]);
    let from_rules = if let Some(s) = ipvs_dispatch {
        Some((
            ProxyMode::Ipvs,
            format!(
                "nat KUBE-SERVICES in {} {} dispatches to IPVS ({})",
                s.backend,
                s.family,
                s.signals.ipvs.join(", ")
            ),
        ))
    } else if let Some(s) = primary {
        let mode = if s.backend == Backend::Nftables {
            ProxyMode::Nftables
        } else {
            ProxyMode::Iptables
        };
        Some((
            mode,
            format!("kube-proxy's {mode}-mode rules in {} {}", s.backend, s.family),
        ))
    } else if let Some(s) = sources.iter().find(|s| s.signals.iptables_mode) {
        // kube-proxy's chains without their dispatch: a fragment, or one table alone.
        Some((
            ProxyMode::Iptables,
            format!(
                "kube-proxy's iptables-mode chains in {} {} (without their dispatch)",
                s.backend, s.family
            ),
        ))
    } else {
        let mut traces: Vec<String> = sources
            .iter()
            .flat_map(|s| s.signals.ipvs.iter().cloned())
            .collect();
        if let Some(node) = &observed.ipvs {
            traces.extend(node.describe());
        }
        traces.dedup();
        if !traces.is_empty() {
            Some((ProxyMode::Ipvs, traces.join(", ")))
        } else {
            sources
                .iter()
                .find_map(replacement_shown)
                .map(|evidence| (ProxyMode::Replaced, evidence))
        }
    };
    let cilium = cilium_maps_shown(observed);
    let from_rules = match (from_rules, &cilium) {
        // Cilium's maps rather than a replacement's chains: they are what it forwards by.
        (None | Some((ProxyMode::Replaced, _)), Some(maps)) => Some((ProxyMode::Replaced, maps.clone())),
        (found, _) => found,
    };
    let mut unjudged = Vec::new();
    let (mode, evidence) = match (reported, from_rules) {
        (Some(mode), rules) => {
            let evidence = format!("kube-proxy's /proxyMode answered {mode}");
            match rules {
                Some((seen, why)) if seen != mode => unjudged.push(format!(
                    "kube-proxy says it runs in {mode} mode, but the rules show {seen} ({why}): the node's rules do not match its kube-proxy"
                )),
                None if mode.is_read() => unjudged.push(format!(
                    "kube-proxy says it runs in {mode} mode, but none of its {mode}-mode NodePort rules were found: nothing could be compared with the cluster state, and if Services have endpoints, their NodePorts reach nothing on this node"
                )),
                _ => {}
            }
            (mode, evidence)
        }
        (None, Some(found)) => found,
        (None, None) => (ProxyMode::None, nothing_found(sources)),
    };
    if mode == ProxyMode::Ipvs {
        for s in sources.iter().filter(|s| {
            s.signals.iptables_mode
                && s.signals.services_dispatch == Some(ProxyMode::Ipvs)
                && !s.nodeports.is_empty()
        }) {
            unjudged.push(format!(
                "{} also holds {} of kube-proxy's iptables-mode NodePort rules, which IPVS mode's KUBE-SERVICES no longer leads to: leftovers of an earlier mode, not judged",
                s.origin,
                s.nodeports.len()
            ));
        }
    }
    let datapath = match mode {
        ProxyMode::Replaced if cilium.is_some() => Some(Datapath::CiliumMaps),
        ProxyMode::Ipvs if observed.ipvs_table.is_some() => Some(Datapath::IpvsServers),
        _ => None,
    };
    if datapath != Some(Datapath::CiliumMaps)
        && let Some(maps) = &observed.cilium
    {
        let nodeports = maps
            .families
            .values()
            .flat_map(|f| &f.frontends)
            .filter(|f| f.flags.nodeport())
            .count();
        if nodeports > 0 {
            unjudged.push(format!(
                "Cilium's service maps also hold {nodeports} NodePort frontends, but the node was judged to run kube-proxy in {mode} mode: the maps' NodePorts were not compared with the cluster (their own consistency was checked)"
            ));
        }
    }
    ProxyDecision {
        mode,
        datapath,
        evidence,
        unjudged,
    }
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
fn replacement_shown(s: &RuleSource) -> Option<String> {
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
fn nothing_found(sources: &[RuleSource]) -> String {
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

/// kube-proxy's `/proxyMode` answer (`iptables`, `ipvs`, `nftables`; `kernelspace` on
/// Windows); None for anything else.
pub fn parse_reported(answer: &str) -> Option<ProxyMode> {
    match answer.trim() {
        "iptables" => Some(ProxyMode::Iptables),
        "nftables" => Some(ProxyMode::Nftables),
        "ipvs" => Some(ProxyMode::Ipvs),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
