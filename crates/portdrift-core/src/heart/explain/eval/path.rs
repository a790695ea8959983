//! What a walk produces: the connection as it stands, the steps of its path, and how
//! each branch of it ended.

use std::net::{IpAddr, SocketAddr};

use crate::heart::explain::model::{Destination, Hook, Probe, RulePlace, Rulesets, SetRef};
use crate::heart::model::Protocol;

/// The connection as it stands at some point of its path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Packet {
    pub protocol: Protocol,
    pub destination: Destination,
    pub port: u16,
    pub source: IpAddr,
    pub mark: u32,
    /// Where a DNAT or REDIRECT sent it, once one did.
    pub translated: Option<Translation>,
}

/// An address translation bound to the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translation {
    pub to: SocketAddr,
    /// The target is this node (a REDIRECT, or a DNAT to the address connected to or a
    /// loopback address): the connection is delivered locally.
    pub local: bool,
    /// A REDIRECT (to this node's own port), not a DNAT to an endpoint.
    pub redirect: bool,
    /// Where the rule that translated it is (a table index, chain index, rule index).
    pub by: RuleRef,
}

impl Packet {
    pub fn new(probe: &Probe) -> Packet {
        Packet {
            protocol: probe.protocol,
            destination: probe.destination,
            port: probe.port,
            source: probe.source,
            mark: 0,
            translated: None,
        }
    }

    /// Whether the destination is one of this node's addresses.
    pub(super) fn destination_local(&self) -> bool {
        self.translated.is_none_or(|t| t.local)
    }

    /// The address the connection is going to now: the translation's, else the one
    /// connected to; None for "any node address", which names none.
    pub(super) fn destination_ip(&self) -> Option<IpAddr> {
        match (self.translated, self.destination) {
            (Some(t), _) => Some(t.to.ip()),
            (None, Destination::Addr(ip)) => Some(ip),
            (None, Destination::AnyNodeAddress(_)) => None,
        }
    }

    /// The port the connection is going to now.
    pub(super) fn destination_port(&self) -> u16 {
        self.translated.map_or(self.port, |t| t.to.port())
    }
}

/// A rule by position: table, chain and rule indices in the [`Rulesets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleRef {
    pub table: usize,
    pub chain: usize,
    /// None: the chain's policy.
    pub rule: Option<usize>,
}

/// What happened at one rule on a path.
#[derive(Debug, Clone, PartialEq)]
pub enum StepKind {
    /// The rule matched (`share`: the part of the connections reaching it that it
    /// takes, below 1 for a `statistic` or `numgen` branch); `does` says what it did.
    Matched { does: String, share: f64 },
    /// The rule did not match, for a reason worth showing (not merely another port).
    Skipped { why: String },
    /// A base chain ended without a verdict: its policy.
    Policy { accepts: bool },
    /// A nat chain the kernel does not run for this connection: an earlier one at the
    /// hook already bound its translation.
    NotRun { why: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub hook: Hook,
    pub at: RuleRef,
    pub kind: StepKind,
}

/// How a branch ended.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    /// Still going: accepted by the chains so far (only while walking).
    Accepted,
    /// Forwarded to the DNAT target.
    Forwarded(SocketAddr),
    /// Delivered to this node (on `port`, translated or not).
    Delivered {
        port: u16,
    },
    Dropped(RuleRef),
    Rejected(RuleRef),
    /// A rule on the path could not be decided: why, and where.
    Undecided {
        at: Option<RuleRef>,
        why: String,
    },
}

/// One way a new connection goes, and the share of new connections that go this way.
#[derive(Debug, Clone, PartialEq)]
pub struct Branch {
    pub share: f64,
    pub packet: Packet,
    pub steps: Vec<Step>,
    pub end: End,
    /// A session-affinity rule on the path pins a returning client to its endpoint.
    pub affinity: Option<u32>,
}

/// What else the walk noticed, for the explanation's notes.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Remarks {
    /// Rules skipped only because they name another address of the node: the port is
    /// handled differently for connections to that address.
    pub address_specific: Vec<(RuleRef, String)>,
    /// Where two nat chains of different backends sit at one hook and priority, so the
    /// kernel's order between them is their registration order, which no dump shows.
    pub nat_order_unknown: Vec<(Hook, usize, usize)>,
    /// Rules skipped without being listed (other ports and addresses), per hook.
    pub quietly_skipped: usize,
}

/// `iptables-nft-save.txt:57`, `nft.json handle 42`, or the chain's policy.
pub fn place_of(rules: &Rulesets, at: RuleRef) -> String {
    let table = &rules.tables[at.table];
    let chain = &table.chains[at.chain];
    match at.rule {
        None => format!("{} {} {} policy", table.origin, table.name, chain.name),
        Some(ri) => match chain.rules[ri].place {
            RulePlace::Line(n) => format!("{}:{n}", table.origin),
            RulePlace::Handle(h) => {
                format!("{} {} {} handle {h}", table.origin, table.name, chain.name)
            }
            RulePlace::Unknown => {
                format!("{} {} {} rule {}", table.origin, table.name, chain.name, ri + 1)
            }
        },
    }
}

pub(crate) fn set_name(map: &SetRef) -> String {
    match map {
        SetRef::Named(n) => format!("@{n}"),
        SetRef::Inline(_) => "the rule's map".to_string(),
    }
}

/// Which backend's base chain the walk runs first where two sit at one hook and
/// priority: the kernel runs the one registered last first, which no dump shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TieOrder {
    /// nftables, then iptables-nft, then iptables-legacy: a node with two backends
    /// usually got the newer one last, when kube-proxy switched to it.
    NewestFirst,
    /// The other way round: what the kernel does when the older backend's tables
    /// were created last (restored after a reboot, say).
    OldestFirst,
}
