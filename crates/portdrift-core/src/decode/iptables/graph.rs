//! The chain graph NodePort analysis keeps of nat and filter: chains, jumps, DNATs, and
//! the dispatch and hostPort rules the walker starts from.

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::decode::name_index::NameIndex;
use crate::heart::kube_proxy;
use crate::heart::model::{
    Backend, DestMatch, Family, OrphanChain, Protocol, RuleText, ServicePortRef, Verdict,
};

use super::args::RuleArgs;
use super::listing::guess_table;
use super::values::{
    comment_service_span, is_loopback_net, parse_dnat_destination, parse_port_list, service_of_comment,
};
use super::{RuleLine, TableKind};

#[derive(Debug)]
pub(super) struct Chain {
    pub(super) name: Arc<str>,
    /// Line of the `:CHAIN` declaration; 0 when a rule jumps to a chain never declared.
    pub(super) declared: u32,
    pub(super) referenced: bool,
}

/// A rule of one chain jumping (or going) to another.
#[derive(Debug, Clone, Copy)]
pub(super) struct Jump {
    pub(super) from: u32,
    pub(super) to: u32,
}

#[derive(Debug, Default)]
pub(super) struct Table {
    pub(super) chains: Vec<Chain>,
    /// Positions in `chains`, found by the chain's own name.
    index: NameIndex,
    /// Every jump in dump order. Kept flat rather than a Vec per chain: a
    /// 10,000-Service node has tens of thousands of chains (66,529:
    /// docs/performance.md#at-30000-services), and a small allocation each cost more
    /// than the whole parse of their rules.
    pub(super) jumps: Vec<Jump>,
}

impl Table {
    /// Whether the dump declares `name` in this table (a jump alone does not).
    pub(super) fn declares(&self, name: &str) -> bool {
        self.find(name)
            .is_some_and(|id| self.chains[id as usize].declared != 0)
    }

    /// The chain called `name`, if the dump named it.
    pub(super) fn find(&self, name: &str) -> Option<u32> {
        self.index.find(name, |id| &self.chains[id as usize].name)
    }

    pub(super) fn chain_id(&mut self, name: &str, declared: u32) -> u32 {
        if let Some(id) = self.find(name) {
            if declared != 0 && self.chains[id as usize].declared == 0 {
                self.chains[id as usize].declared = declared;
            }
            return id;
        }
        let id = self.chains.len() as u32;
        self.chains.push(Chain {
            name: name.into(),
            declared,
            referenced: false,
        });
        let chains = &self.chains;
        self.index.insert(name, id, |other| &chains[other as usize].name);
        id
    }

    /// Keeps a jump, and that its target is referenced.
    pub(super) fn jump(&mut self, from: u32, to: u32) {
        self.jumps.push(Jump { from, to });
        self.chains[to as usize].referenced = true;
    }
}

#[derive(Debug)]
pub(super) struct Dnat {
    pub(super) ip: IpAddr,
    pub(super) port: Option<u16>,
    pub(super) chain: u32,
    pub(super) rule: RuleText,
    /// The destination port the DNAT rule matches (read in CNI hostPort chains only).
    pub(super) dport: Option<u16>,
}

/// A `CNI-HOSTPORT-DNAT` rule: the ports it matches and the chain it jumps to.
#[derive(Debug)]
pub(super) struct HostPortEntry {
    pub(super) protocol: Protocol,
    pub(super) ports: Vec<u16>,
    pub(super) chain: u32,
    pub(super) rule: RuleText,
}

#[derive(Debug)]
pub(super) enum DispatchTarget {
    Chain(u32),
    Dnat(u32),
    Verdict(Verdict),
}

/// The chain a dispatch rule is in, by the name the report gives it.
#[derive(Debug, Clone, Copy)]
pub(super) struct DispatchChain {
    pub(super) table: TableKind,
    pub(super) name: &'static str,
}

impl DispatchChain {
    pub(super) const NAT_NODEPORTS: DispatchChain = DispatchChain {
        table: TableKind::Nat,
        name: "KUBE-NODEPORTS",
    };

    pub(super) const fn filter(name: &'static str) -> DispatchChain {
        DispatchChain {
            table: TableKind::Filter,
            name,
        }
    }
}

#[derive(Debug)]
pub(super) struct Dispatch {
    pub(super) at: DispatchChain,
    pub(super) protocol: Protocol,
    pub(super) port: u16,
    pub(super) dest: DestMatch,
    pub(super) target: DispatchTarget,
    pub(super) comment: Option<ServicePortRef>,
    pub(super) undecoded_comment: Option<Range<u32>>,
    pub(super) rule: RuleText,
}

/// Why a rule NodePort analysis needs is not kept.
#[derive(Debug)]
pub(super) enum Refused {
    /// The line cannot be read as kube-proxy's: it is kept as unparsed, for this reason.
    Unreadable(String),
    /// A rule in kube-proxy's chains that kube-proxy never writes, and what it does.
    Malformed(String),
}

/// The nat chain a rule was last kept in, by name: iptables-save prints a chain's
/// rules together, so most rules find their chain here without hashing its name.
#[derive(Debug)]
struct LastChain {
    name: Arc<str>,
    id: u32,
}

#[derive(Debug, Default)]
pub(super) struct Graph {
    pub(super) nat: Table,
    pub(super) filter: Table,
    /// `KUBE-*` chains declared in the other tables (mangle, raw, security).
    pub(super) other_chains: Vec<Box<str>>,
    pub(super) dnats: Vec<Dnat>,
    pub(super) dispatch: Vec<Dispatch>,
    pub(super) hostports: Vec<HostPortEntry>,
    last_nat_chain: Option<LastChain>,
}

impl Graph {
    /// The table of `kind`, None for the tables not kept.
    pub(super) fn table(&self, kind: TableKind) -> Option<&Table> {
        match kind {
            TableKind::Nat => Some(&self.nat),
            TableKind::Filter => Some(&self.filter),
            TableKind::Other => None,
        }
    }

    /// A chain declared in a table of `kind`.
    pub(super) fn declare(&mut self, kind: TableKind, name: &str, number: u32) {
        match kind {
            TableKind::Other if name.starts_with("KUBE-") => self.other_chains.push(name.into()),
            TableKind::Nat => {
                self.nat.chain_id(name, number);
            }
            TableKind::Filter => {
                self.filter.chain_id(name, number);
            }
            TableKind::Other => {}
        }
    }

    /// A chain declared outside any table: declared where its name says, in both for
    /// the names nat and filter share. Returns the table it was declared in, None for
    /// both.
    pub(super) fn declare_guessed(&mut self, name: &str, number: u32) -> Option<TableKind> {
        match guess_table(name, "") {
            TableKind::Filter => {
                self.filter.chain_id(name, number);
                Some(TableKind::Filter)
            }
            _ if matches!(name, "KUBE-SERVICES" | "KUBE-NODEPORTS" | "OUTPUT") => {
                self.nat.chain_id(name, number);
                self.filter.chain_id(name, number);
                None
            }
            _ => {
                self.nat.chain_id(name, number);
                Some(TableKind::Nat)
            }
        }
    }

    /// The nat chain a rule is in, declared or not.
    pub(super) fn nat_chain(&mut self, chain: &str) -> u32 {
        match &self.last_nat_chain {
            Some(last) if *last.name == *chain => last.id,
            _ => {
                let id = self.nat.chain_id(chain, 0);
                self.last_nat_chain = Some(LastChain {
                    name: self.nat.chains[id as usize].name.clone(),
                    id,
                });
                id
            }
        }
    }

    /// Keeps a nat rule's DNAT (in nat chain `chain`) and returns its id.
    pub(super) fn dnat(
        &mut self,
        chain: u32,
        rule: &RuleLine<'_>,
        args: &RuleArgs<'_>,
    ) -> Result<u32, Refused> {
        let kube_chain = rule.chain.starts_with("KUBE-");
        let destination = args.to_destination.as_deref();
        match destination.map(parse_dnat_destination) {
            Some(Ok((ip, port))) if kube_chain && (ip.is_unspecified() || port == Some(0)) => {
                Err(Refused::Malformed(format!(
                    "DNATs to {}, an address no packet can be sent to",
                    destination.unwrap_or("")
                )))
            }
            Some(Ok((ip, port))) => {
                let id = self.dnats.len() as u32;
                self.dnats.push(Dnat {
                    ip,
                    port,
                    chain,
                    rule: rule.rule_text(),
                    dport: args.dport.as_deref().and_then(|p| p.parse().ok()),
                });
                Ok(id)
            }
            Some(Err(reason)) => Err(Refused::Unreadable(reason)),
            None if kube_chain => Err(Refused::Malformed(
                "is a DNAT without a destination (--to-destination)".into(),
            )),
            None => Err(Refused::Unreadable("DNAT without --to-destination".into())),
        }
    }

    /// Keeps a `CNI-HOSTPORT-DNAT` rule jumping to nat chain `chain`. A rule without a
    /// protocol match is not a hostPort's, and is passed over.
    pub(super) fn hostport(
        &mut self,
        rule: &RuleLine<'_>,
        args: &RuleArgs<'_>,
        chain: u32,
    ) -> Result<(), Refused> {
        let Some(protocol) = args.protocol.as_deref().and_then(Protocol::parse) else {
            return Ok(());
        };
        let ports = match (args.dports.as_deref(), args.dport.as_deref()) {
            (Some(list), _) => parse_port_list(list),
            (None, Some(p)) => parse_port_list(p),
            (None, None) => None,
        };
        let Some(ports) = ports else {
            return Err(Refused::Unreadable(
                "hostPort rule without a readable destination port".into(),
            ));
        };
        self.hostports.push(HostPortEntry {
            protocol,
            ports,
            chain,
            rule: rule.rule_text(),
        });
        Ok(())
    }

    /// Keeps a NodePort dispatch rule.
    pub(super) fn dispatch(
        &mut self,
        rule: &RuleLine<'_>,
        args: &RuleArgs<'_>,
        at: DispatchChain,
        target: DispatchTarget,
    ) -> Result<(), Refused> {
        let Some(protocol) = args.protocol.as_deref().and_then(Protocol::parse) else {
            return Err(Refused::Unreadable(
                "NodePort rule without a tcp/udp/sctp protocol match".into(),
            ));
        };
        let Some(port) = args.dport.as_deref().and_then(|p| p.parse::<u16>().ok()) else {
            return Err(Refused::Unreadable(
                "NodePort rule without a single destination port".into(),
            ));
        };
        // A jump to one of kube-proxy's hashed chains names its Service by the hash;
        // its comment is decoded only when a report needs it (`undecoded_comment`),
        // which saves three allocations per rule on a healthy node.
        let hashed = match target {
            DispatchTarget::Chain(id) => kube_proxy::chain_hash(&self.nat.chains[id as usize].name).is_some(),
            _ => false,
        };
        let (comment, undecoded_comment) = if hashed {
            (None, comment_service_span(rule.text, args))
        } else {
            (args.comment.as_deref().and_then(service_of_comment), None)
        };
        self.dispatch.push(Dispatch {
            at,
            protocol,
            port,
            dest: dest_match(args),
            target,
            comment,
            undecoded_comment,
            rule: rule.rule_text(),
        });
        Ok(())
    }

    /// kube-proxy's chains are in the dump.
    pub(super) fn has_kube_proxy(&self) -> bool {
        self.nat.find("KUBE-SERVICES").is_some()
            || self.nat.find("KUBE-NODEPORTS").is_some()
            || self.filter.find("KUBE-EXTERNAL-SERVICES").is_some()
    }

    /// kube-proxy's canary chain is in the dump, in whichever table.
    pub(super) fn has_canary(&self) -> bool {
        self.nat.find("KUBE-PROXY-CANARY").is_some()
            || self.filter.find("KUBE-PROXY-CANARY").is_some()
            || self.other_chains.iter().any(|c| &**c == "KUBE-PROXY-CANARY")
    }

    /// Growth by doubling leaves up to half of each list unused, and the resolution
    /// of dispatch rules builds its output next to them, at the read's peak.
    pub(super) fn shrink(&mut self) {
        self.dispatch.shrink_to_fit();
        self.dnats.shrink_to_fit();
        self.nat.jumps.shrink_to_fit();
        self.nat.chains.shrink_to_fit();
    }

    /// kube-proxy's hashed nat chains that the dump declares and no rule jumps to,
    /// each with the first address it DNATs to.
    pub(super) fn orphans(&self, backend: Backend, family: Family) -> Vec<OrphanChain> {
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
        orphans
    }
}

/// The destination a dispatch rule matches.
fn dest_match(args: &RuleArgs<'_>) -> DestMatch {
    match args.dest.as_deref() {
        None => DestMatch::Any,
        Some(d) if !args.dest_negated && args.nfacct && is_loopback_net(d) => DestMatch::Localhost,
        Some(d) if !args.dest_negated && is_loopback_net(d) => DestMatch::Localhost,
        Some(d) if args.dest_negated => DestMatch::Addr(format!("!{d}")),
        Some(d) => DestMatch::Addr(d.to_string()),
    }
}
