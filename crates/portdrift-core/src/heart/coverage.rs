//! What a scan could check: the proxy mode it judged the node by, whether the cluster
//! state was read in full, and a sentence for everything it could not check. Pure.
//!
//! "No drift" is a promise, given only when every comparison was made on complete
//! inputs: the rules from every backend and family in play, the cluster state in full
//! and current, the listening sockets. Extra checks (port-range sysctls, kube-proxy's
//! health) never make a check incomplete.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::heart::desired::DesiredState;
use crate::heart::input::Input;
use crate::heart::input_status::{InputState, InputStatus};
use crate::heart::model::{Backend, Family, ProxyMode};
use crate::heart::observed::Observed;
use crate::heart::proxy_mode::{Datapath, ProxyDecision};
use crate::heart::words::count_of;

/// The `coverage` object of the JSON report (a contract: fields may be added, never
/// renamed or removed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Coverage {
    pub proxy_mode: ProxyMode,
    /// What the mode was decided from.
    pub proxy_mode_evidence: String,
    /// The Services and EndpointSlices were read in full, and are current.
    pub cluster_state: bool,
    /// Every check ran on complete inputs: only then is "no drift" said.
    pub complete: bool,
    /// What was not checked and why, one plain sentence each.
    pub not_checked: Vec<String>,
}

impl Coverage {
    /// A coverage with nothing left unchecked, for reports built by hand.
    pub fn full(mode: ProxyMode) -> Coverage {
        Coverage {
            proxy_mode: mode,
            proxy_mode_evidence: String::new(),
            cluster_state: true,
            complete: true,
            not_checked: Vec::new(),
        }
    }
}

/// Everything a coverage is judged from.
pub struct CoverageInput<'a> {
    pub sources: &'a [InputStatus],
    pub observed: &'a Observed,
    pub desired: Option<&'a DesiredState>,
    pub proxy: &'a ProxyDecision,
    /// The cluster state is the last good one but no longer current.
    pub cluster_state_stale: bool,
}

/// The backends a check of `mode` must read: in iptables mode both, since kube-proxy
/// never cleans the one it does not write (kubernetes#109811) and the kernel runs both.
fn required_backends(mode: ProxyMode) -> &'static [Backend] {
    match mode {
        ProxyMode::Iptables => &[Backend::IptablesNft, Backend::IptablesLegacy],
        ProxyMode::Nftables => &[Backend::Nftables],
        _ => &[],
    }
}

pub fn assess(input: &CoverageInput<'_>) -> Coverage {
    let mut not_checked = Vec::new();
    let proxy = input.proxy;
    let mode = proxy.mode;
    match mode {
        ProxyMode::Iptables | ProxyMode::Nftables => {}
        // The virtual servers were compared: what they lacked is in the proxy's unjudged.
        ProxyMode::Ipvs if proxy.datapath == Some(Datapath::IpvsServers) => {}
        ProxyMode::Ipvs => not_checked.push(format!(
            "kube-proxy runs in IPVS mode ({}), but the IPVS virtual servers were not read (no /proc/net/ip_vs, nor a bundle's ipvsadm.txt), so NodePort forwarding (stale and missing virtual servers, endpoints) was not checked; squatters, the port-range overlap and nodePort collisions in the API were.",
            proxy.evidence
        )),
        // Cilium's maps were compared: what they lacked is in the proxy's unjudged.
        ProxyMode::Replaced if proxy.datapath == Some(Datapath::CiliumMaps) => {}
        ProxyMode::Replaced => not_checked.push(format!(
            "Services on this node are handled by a kube-proxy replacement ({}), not kube-proxy, and its maps were not read (portdrift reads Cilium's service maps under --bpf-root; other replacements' are not read), so NodePort forwarding was not checked; squatters, the port-range overlap and nodePort collisions in the API were.",
            proxy.evidence
        )),
        ProxyMode::None => {
            // A dump that could not be read may be where the proxy's rules are: then the
            // node is not said to hold none.
            let unread = input
                .sources
                .iter()
                .filter(|s| s.is_rule_dump() && s.status.is_failure())
                .count();
            not_checked.push(if unread == 0 {
                format!(
                    "No Service proxy's NodePort rules were found ({}), so NodePort forwarding was not checked: if kube-proxy should run on this node, it has programmed nothing the dumps show.",
                    proxy.evidence
                )
            } else {
                format!(
                    "No Service proxy's NodePort rules were found in the rule dumps that could be read ({}), so NodePort forwarding was not checked: the {} that could not be read (below) may hold them.",
                    proxy.evidence,
                    count_of(unread, "dump")
                )
            });
        }
    }
    not_checked.extend(proxy.unjudged.iter().cloned());

    let cluster_state = cluster_state(input, &mut not_checked);
    rule_sources(input, &mut not_checked);
    sockets(input.sources, &mut not_checked);

    Coverage {
        proxy_mode: mode,
        proxy_mode_evidence: proxy.evidence.clone(),
        cluster_state,
        complete: not_checked.is_empty(),
        not_checked,
    }
}

/// Whether the cluster state was read in full and is current; says why not.
fn cluster_state(input: &CoverageInput<'_>, out: &mut Vec<String>) -> bool {
    const NEEDS: &str = "stale and missing rules and endpoints, squatters on Services' ports and nodePort collisions were not checked";
    // A live scan tries a file, then the API: the last attempt says why.
    let status = input.sources.iter().rev().find(|s| s.source.is_cluster_state());
    let Some(desired) = input.desired else {
        let why = status
            .and_then(|s| s.notes.first())
            .map(|n| {
                let n = n.split(';').next().unwrap_or(n).trim();
                n.strip_prefix("no cluster state: ").unwrap_or(n).to_string()
            })
            .unwrap_or_else(|| format!("no {}, --cluster-state or API server", Input::ClusterState));
        out.push(format!("The cluster state was not read ({why}): {NEEDS}."));
        return false;
    };
    let mut full = true;
    if !desired.problems.is_empty() {
        full = false;
        let first = &desired.problems[0];
        out.push(format!(
            "{} of the cluster state could not be read (first: {}: {}): the rules of the Services they belong to were not judged.",
            count_of(desired.problems.len(), "object"),
            first.object,
            first.problem
        ));
    }
    if input.cluster_state_stale {
        out.push(
            "The cluster state is not current (the API watch is failing): findings drawn from it are marked on_stale_cluster_state, and nothing was concluded as fresh.".to_string(),
        );
    }
    let uncertain: Vec<String> = desired
        .ports
        .iter()
        .filter(|p| desired.uncertain || p.uncertain || p.endpoints.iter().any(|(_, e)| e.cluster_uncertain))
        .map(|p| p.service.kube_proxy_name())
        .collect();
    if !uncertain.is_empty() {
        out.push(format!(
            "The endpoints kube-proxy uses for {} Service ports cannot be known exactly (an unreadable or conflicting EndpointSlice, a Local traffic policy without the node's name, or topology hints without its zone), so their endpoints were not compared: {}{}.",
            uncertain.len(),
            uncertain.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
            if uncertain.len() > 5 { ", …" } else { "" }
        ));
    }
    full && !input.cluster_state_stale
}

/// The families whose rules a complete check must read: those the cluster's Services
/// use, or without a cluster state those the node's dumps show (IPv4 at least).
fn families(input: &CoverageInput<'_>) -> BTreeSet<Family> {
    match input.desired {
        Some(d) => d.ports.iter().flat_map(|p| p.families.iter().copied()).collect(),
        None => input
            .observed
            .dumps
            .iter()
            .map(|s| s.family)
            .chain([Family::Ipv4])
            .collect(),
    }
}

/// Every rule source that could not be read whole, and, in a mode portdrift reads,
/// every backend and family that was not read at all.
fn rule_sources(input: &CoverageInput<'_>, out: &mut Vec<String>) {
    let rule_statuses: Vec<&InputStatus> = input.sources.iter().filter(|s| s.is_rule_dump()).collect();
    for s in &rule_statuses {
        let name = s.origin.as_deref().unwrap_or(s.source.name());
        let why = s.notes.first().map(|n| format!(": {n}")).unwrap_or_default();
        match s.status {
            state if state.is_failure() => out.push(format!(
                "{name} could not be read ({state}{why}): the rules it holds were not checked."
            )),
            InputState::Partial => out.push(format!(
                "{name} was read only in part ({}): stale and duplicate rules were still reported from what it holds, but no rule was concluded missing from it and no chain orphaned.",
                if s.unparsed > 0 {
                    format!("{} lines not understood", s.unparsed)
                } else {
                    // The note that says why (not how or where it was read).
                    s.notes
                        .iter()
                        .find(|n| !n.starts_with("read from") && !n.starts_with("backend "))
                        .cloned()
                        .unwrap_or_else(|| "cut short".to_string())
                }
            )),
            _ => {}
        }
    }
    for source in &input.observed.dumps {
        out.extend(source.gaps.iter().map(|g| format!("{g}.")));
    }
    let read = |backend: Backend, family: Family| {
        rule_statuses.iter().any(|s| {
            s.backend == Some(backend)
                // One nft dump holds both families' tables.
                && (s.family == Some(family) || backend == Backend::Nftables)
                && matches!(s.status, InputState::Ok | InputState::Empty | InputState::Partial)
        })
    };
    let mut unread = Vec::new();
    for family in families(input) {
        for &backend in required_backends(input.proxy.mode) {
            // A failed read is said above already.
            let failed = rule_statuses
                .iter()
                .any(|s| s.backend == Some(backend) && s.family == Some(family) && s.status.is_failure());
            if !read(backend, family) && !failed {
                unread.push(match backend {
                    Backend::Nftables => format!("{backend} ({} or {})", Input::NftJson, Input::NftText),
                    _ => format!("{backend} {family}"),
                });
            }
        }
    }
    unread.dedup();
    if !unread.is_empty() {
        out.push(format!(
            "These rule backends were not read: {} (no dump of them was given): kube-proxy rules left there, which the kernel still evaluates, would not be seen.",
            unread.join(", ")
        ));
    }
}

/// The listening sockets: all four tables read.
fn sockets(sources: &[InputStatus], out: &mut Vec<String>) {
    let mut unread = Vec::new();
    let mut partial = Vec::new();
    for input in Input::SOCKETS {
        let name = input.name();
        match sources.iter().find(|s| s.source == input).map(|s| s.status) {
            Some(InputState::Ok | InputState::Empty) => {}
            Some(InputState::Partial) => partial.push(name),
            _ => unread.push(name),
        }
    }
    if !unread.is_empty() {
        out.push(format!(
            "The listening sockets were not read ({}): squatters on NodePorts were not checked.",
            unread.join(", ")
        ));
    }
    if !partial.is_empty() {
        out.push(format!(
            "Some lines of {} could not be read: a squatter among them would be missed.",
            partial.join(", ")
        ));
    }
}
