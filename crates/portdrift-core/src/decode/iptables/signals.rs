//! The end of a dump: the backend, the proxy-mode signals and what the dump lacks.

use std::net::SocketAddr;

// FxHash: chain names are hashed once per rule line; SipHash's DoS resistance buys
// nothing for a dump read from the local kernel and costs measurably at 240k lines.
use rustc_hash::FxHashMap;

use crate::heart::kube_proxy;
use crate::heart::model::{
    Backend, EntryJump, Family, Lookup, MalformedRule, OrphanChain, ProxyMode, ProxySignals, RuleSource,
};

use super::values::*;
use super::walker::*;
use super::*;

impl Parser {
    pub(super) fn finish(mut self) -> RuleSource {
        self.end_policies();
        self.end_listing();
        self.end_table_block();
        if let Some(_open) = self.table.take() {
            self.notes.push(format!(
                "table {} (line {}) has no COMMIT: the dump looks truncated",
                self.table_name, self.table_open_line
            ));
            self.uncommitted = true;
        }
        if self.guessed_lines > 0 {
            self.notes.push(format!(
                "{} lines stand outside any table (an `iptables -S` listing without its -P lines, or a fragment): their table was told by their chains, and the dump is not trusted to show what is missing",
                self.guessed_lines
            ));
        }
        let backend = self.decide_backend();
        let family = self
            .hint
            .family
            .or(self.header_family)
            .unwrap_or(if self.saw_ipv6_address {
                Family::Ipv6
            } else {
                Family::Ipv4
            });
        let has_kube_proxy = self.nat.find("KUBE-SERVICES").is_some()
            || self.nat.find("KUBE-NODEPORTS").is_some()
            || self.filter.find("KUBE-EXTERNAL-SERVICES").is_some();
        let has_canary = self.nat.find("KUBE-PROXY-CANARY").is_some()
            || self.filter.find("KUBE-PROXY-CANARY").is_some()
            || self.other_chains.iter().any(|c| &**c == "KUBE-PROXY-CANARY");
        // Growth by doubling leaves up to half of each list unused, and the resolution
        // below builds its output next to them, at the read's peak.
        self.dispatch.shrink_to_fit();
        self.dnats.shrink_to_fit();
        self.nat.jumps.shrink_to_fit();
        self.nat.chains.shrink_to_fit();
        let nodeports = resolve_dispatch(&mut self, backend, family);
        let hostports = resolve_hostports(&self);
        let mut orphans: Vec<OrphanChain> = Vec::new();
        let mut orphan_ids = FxHashMap::default();
        for (id, c) in self.nat.chains.iter().enumerate() {
            if c.declared != 0 && !c.referenced && kube_proxy::chain_hash(&c.name).is_some() {
                orphan_ids.insert(id as u32, orphans.len());
                orphans.push(OrphanChain {
                    backend,
                    family,
                    table: "nat".into(),
                    chain: c.name.to_string(),
                    line: c.declared,
                    dnat: None,
                });
            }
        }
        for d in &self.dnats {
            if let (Some(&i), Some(port)) = (orphan_ids.get(&d.chain), d.port) {
                orphans[i].dnat.get_or_insert(SocketAddr::new(d.ip, port));
            }
        }
        let mut complete = !self.uncommitted && self.unparsed.is_empty() && self.guessed_lines == 0;
        let signals = self.signals();
        let gaps = self.gaps(has_kube_proxy || signals.iptables_mode);
        let mut malformed = std::mem::take(&mut self.malformed);
        // A jump to an undeclared chain is proof only where the dump shows every
        // declaration.
        if complete {
            let mut dangling: Option<(String, usize)> = None;
            for (table, target, rule) in std::mem::take(&mut self.undeclared_jumps) {
                let (t, name) = match table {
                    TableKind::Nat => (&self.nat, "nat"),
                    _ => (&self.filter, "filter"),
                };
                if t.declares(&target) {
                    continue;
                }
                dangling.get_or_insert_with(|| (target.clone(), 0)).1 += 1;
                let chain = rule_chain(&rule.text).to_string();
                malformed.push(MalformedRule {
                    table: name.to_string(),
                    chain,
                    problem: format!("jumps to {target}, a chain the {name} table does not declare"),
                    rule,
                });
            }
            // The kernel refuses a jump to a chain that does not exist and keeps a chain
            // while one leads to it: such a dump is not the kernel's whole picture.
            if let Some((first, count)) = dangling {
                complete = false;
                self.notes.push(format!(
                    "{} to chains the dump does not declare (first: {first}), which the kernel never allows: the dump shows part of its tables (a chain cut out of a paste), or was printed by an iptables that does not match the one that wrote the rules (kubernetes#112477)",
                    if count == 1 { "1 rule jumps".to_string() } else { format!("{count} rules jump") }
                ));
            }
        }
        malformed.sort_by_key(|m| m.rule.line);
        let missing_entry = self.missing_entry();
        RuleSource {
            origin: self.origin,
            lookup: Lookup::Lines,
            backend,
            family,
            nodeports,
            hostports,
            orphans,
            unparsed: self.unparsed,
            has_kube_proxy,
            has_canary,
            kube_rule_count: self.kube_rule_count,
            complete,
            notes: self.notes,
            signals,
            gaps,
            malformed,
            forwarding_shown: self.saw_nat || self.hint.whole,
            missing_entry,
            bad_capture: self.list_line.map(|(line, text)| {
                let kind = if self.saw_save_line {
                    ForeignKind::MixedListing
                } else {
                    ForeignKind::IptablesList
                };
                ForeignDump::new(line, &text, kind).to_string()
            }),
        }
    }

    /// kube-proxy's jumps towards `KUBE-NODEPORTS` that a nat table holding it lacks
    /// (not in IPVS mode, whose `KUBE-SERVICES` leads elsewhere).
    fn missing_entry(&self) -> Vec<EntryJump> {
        if !self.saw_nat || !self.nat.declares("KUBE-NODEPORTS") || self.services_dispatch.1 > 0 {
            return Vec::new();
        }
        [
            (
                self.prerouting_to_services,
                "nat PREROUTING -j KUBE-SERVICES",
                false,
            ),
            (
                self.services_to_nodeports,
                "nat KUBE-SERVICES -j KUBE-NODEPORTS",
                true,
            ),
        ]
        .into_iter()
        .filter(|(seen, ..)| !seen)
        .map(|(_, rule, every_packet)| EntryJump { rule, every_packet })
        .collect()
    }

    /// The backend: the caller's, else the header's, and the notes say how it was
    /// decided when the caller did not know.
    pub(super) fn decide_backend(&mut self) -> Backend {
        if let (Some(h), Some(b)) = (self.hint.backend, self.header_backend)
            && h != b
        {
            self.notes
                .push(format!("the file name says {h} but the dump's header says {b}"));
        }
        if let Some(b) = self.hint.backend {
            return b;
        }
        let (backend, how) = match (self.header_backend, &self.header_backend_why) {
            (Some(b), Some(why)) => (b, format!("backend {b}: {why}")),
            (Some(b), None) => (b, format!("backend {b}: from the dump's header")),
            (None, _) => (
                Backend::IptablesNft,
                "the dump does not say which iptables backend wrote it (no `# Generated by` header naming nf_tables or legacy); reported as iptables-nft".to_string(),
            ),
        };
        self.notes.push(how);
        backend
    }

    pub(super) fn signals(&self) -> ProxySignals {
        // The iptables proxier's NodePort chains, or its filter verdicts for NodePorts
        // (which a dump of the filter table alone still shows).
        let iptables_mode = self.nat.chains.iter().map(|c| &c.name).any(|c| {
            &**c == "KUBE-NODEPORTS" || c.starts_with("KUBE-XLB-") || kube_proxy::chain_hash(c).is_some()
        }) || self.filter_verdicts > 0;
        let (iptables, ipvs) = self.services_dispatch;
        let services_dispatch = match (iptables, ipvs) {
            (0, 0) => None,
            (i, v) if v > i => Some(ProxyMode::Ipvs),
            _ => Some(ProxyMode::Iptables),
        };
        ProxySignals {
            iptables_mode,
            services_dispatch,
            ipvs: self.ipvs.clone(),
            replacement: self.replacement.clone(),
            kube_proxy_chain: self.kube_proxy_chain.clone(),
            filter_shown: self.saw_filter || self.hint.whole,
        }
    }

    /// kube-proxy writes to both nat and filter: a dump that holds its chains in one and
    /// leaves the other table out (`iptables-save -t nat`, `iptables -t nat -S`) cannot
    /// show what the other holds. A whole dump lacks only what the node lacks.
    pub(super) fn gaps(&self, has_kube_proxy: bool) -> Vec<String> {
        let mut gaps = Vec::new();
        if !has_kube_proxy || self.hint.whole {
            return gaps;
        }
        if !self.saw_nat {
            gaps.push(format!(
                "{} holds no nat table, where kube-proxy's NodePort forwarding lives: stale, duplicate and missing forwarding rules were not checked in it (`iptables -S` lists the filter table alone: capture the node with iptables-save, or add `iptables -t nat -S`)",
                self.origin
            ));
        }
        if !self.saw_filter {
            gaps.push(format!(
                "{} holds no filter table: kube-proxy's REJECT and DROP rules for NodePorts (Services without endpoints, Local traffic policy without a local endpoint) were not seen",
                self.origin
            ));
        }
        gaps
    }
}
