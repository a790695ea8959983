//! What the dump says of the proxy mode and of kube-proxy's way in to its rules:
//! counted as the lines come, told at the end.

use crate::heart::kube_proxy;
use crate::heart::model::{EntryJump, ProxyMode, ProxySignals};

use super::graph::Table;
use super::listing::{IPVS_CHAINS, KUBELET_CHAINS, REPLACEMENT_CHAINS};

#[derive(Debug, Default)]
pub(super) struct SignalTally {
    services_dispatch: DispatchVotes,
    entry: EntrySeen,
    /// kube-proxy's filter-table REJECT and DROP rules read.
    filter_verdicts: u32,
    /// Traces of IPVS mode (`chain KUBE-NODE-PORT`, `ipset KUBE-NODE-PORT-TCP`), the
    /// first three.
    ipvs: Vec<String>,
    /// A kube-proxy replacement's name and the first of its chains declared.
    replacement: Option<(&'static str, String)>,
    /// The first of kube-proxy's chains declared (not kubelet's).
    kube_proxy_chain: Option<String>,
    /// Rules in `KUBE-*` chains.
    pub(super) kube_rules: usize,
}

/// How each proxy mode shows in nat `KUBE-SERVICES`: the rules of each one's kind.
#[derive(Debug, Default)]
struct DispatchVotes {
    iptables: u32,
    ipvs: u32,
}

impl DispatchVotes {
    /// The mode most of the rules are of; iptables on a tie.
    fn mode(&self) -> Option<ProxyMode> {
        match (self.iptables, self.ipvs) {
            (0, 0) => None,
            (i, v) if v > i => Some(ProxyMode::Ipvs),
            _ => Some(ProxyMode::Iptables),
        }
    }
}

/// kube-proxy's way in to its NodePort rules, as far as the nat table shows it:
/// `PREROUTING -j KUBE-SERVICES`, `KUBE-SERVICES -j KUBE-NODEPORTS`.
#[derive(Debug, Default)]
struct EntrySeen {
    prerouting_to_services: bool,
    services_to_nodeports: bool,
}

impl SignalTally {
    /// Replacement chains and kube-proxy's own, wherever they are declared.
    pub(super) fn chain_name(&mut self, name: &str) {
        if self.kube_proxy_chain.is_none() && name.starts_with("KUBE-") && !KUBELET_CHAINS.contains(&name) {
            self.kube_proxy_chain = Some(name.to_string());
        }
        if self.replacement.is_none()
            && let Some((_, who)) = REPLACEMENT_CHAINS.iter().find(|(p, _)| name.starts_with(p))
        {
            self.replacement = Some((who, name.to_string()));
        }
    }

    /// A chain declared in the nat table.
    pub(super) fn nat_chain(&mut self, name: &str) {
        if IPVS_CHAINS.contains(&name) {
            self.ipvs_trace(format!("chain {name}"));
        }
    }

    /// A trace of IPVS mode; the first three are kept.
    fn ipvs_trace(&mut self, trace: String) {
        if self.ipvs.len() < 3 && !self.ipvs.contains(&trace) {
            self.ipvs.push(trace);
        }
    }

    /// A nat rule outside the per-service chains, with arguments `spec`.
    pub(super) fn nat_rule(&mut self, chain: &str, target: &str, spec: &str) {
        self.entry_jump(chain, target);
        self.proxy_mode(chain, target, spec);
    }

    /// A nat rule on the way in to kube-proxy's NodePort rules.
    fn entry_jump(&mut self, chain: &str, target: &str) {
        match (chain, target) {
            ("PREROUTING", "KUBE-SERVICES") => self.entry.prerouting_to_services = true,
            ("KUBE-SERVICES", "KUBE-NODEPORTS") => self.entry.services_to_nodeports = true,
            _ => {}
        }
    }

    /// What a nat rule outside the per-service chains says of the proxy mode: nat
    /// `KUBE-SERVICES` holds the dispatch of whichever mode synced last, and IPVS mode
    /// matches Service addresses with ipsets.
    fn proxy_mode(&mut self, chain: &str, target: &str, spec: &str) {
        if IPVS_CHAINS.contains(&chain) {
            self.ipvs_trace(format!("chain {chain}"));
        }
        let ipset = memchr::memmem::find(spec.as_bytes(), b"--match-set KUBE-").map(|at| {
            spec[at + "--match-set ".len()..]
                .split_ascii_whitespace()
                .next()
                .unwrap_or("")
                .to_string()
        });
        if let Some(set) = &ipset {
            self.ipvs_trace(format!("ipset {set}"));
        }
        if chain != "KUBE-SERVICES" {
            return;
        }
        if ipset.is_some() || IPVS_CHAINS.contains(&target) {
            self.services_dispatch.ipvs += 1;
        } else if target == "KUBE-NODEPORTS"
            || target.starts_with("KUBE-XLB-")
            || kube_proxy::chain_hash(target).is_some()
        {
            self.services_dispatch.iptables += 1;
        }
    }

    /// A filter rule: the iptables proxier's per-Service verdicts (a clusterIP's REJECT
    /// for a Service without endpoints, too) show its mode where the nat table is not in
    /// the dump.
    pub(super) fn filter_rule(&mut self, chain: &str, target: &str) {
        if matches!(chain, "KUBE-SERVICES" | "KUBE-EXTERNAL-SERVICES") && matches!(target, "REJECT" | "DROP")
        {
            self.filter_verdicts += 1;
        }
    }

    /// The signals, from the tally and the nat table's chains.
    pub(super) fn signals(&self, nat: &Table, filter_shown: bool) -> ProxySignals {
        ProxySignals {
            iptables_mode: holds_iptables_mode_chains(nat) || self.filter_verdicts > 0,
            services_dispatch: self.services_dispatch.mode(),
            ipvs: self.ipvs.clone(),
            replacement: self.replacement.clone(),
            kube_proxy_chain: self.kube_proxy_chain.clone(),
            filter_shown,
        }
    }

    /// kube-proxy's jumps towards `KUBE-NODEPORTS` that a nat table holding it lacks
    /// (not in IPVS mode, whose `KUBE-SERVICES` leads elsewhere).
    pub(super) fn missing_entry(&self, nat_shown: bool, nat: &Table) -> Vec<EntryJump> {
        if !nat_shown || !nat.declares("KUBE-NODEPORTS") || self.services_dispatch.ipvs > 0 {
            return Vec::new();
        }
        [
            (
                self.entry.prerouting_to_services,
                "nat PREROUTING -j KUBE-SERVICES",
                false,
            ),
            (
                self.entry.services_to_nodeports,
                "nat KUBE-SERVICES -j KUBE-NODEPORTS",
                true,
            ),
        ]
        .into_iter()
        .filter(|(seen, ..)| !seen)
        .map(|(_, rule, every_packet)| EntryJump { rule, every_packet })
        .collect()
    }
}

/// The iptables proxier's NodePort chains (which a dump of the filter table alone
/// lacks; its filter verdicts show it there).
fn holds_iptables_mode_chains(nat: &Table) -> bool {
    nat.chains.iter().map(|c| &c.name).any(|c| {
        &**c == "KUBE-NODEPORTS" || c.starts_with("KUBE-XLB-") || kube_proxy::chain_hash(c).is_some()
    })
}
