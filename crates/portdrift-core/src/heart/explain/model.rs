//! What explain evaluates: every backend's tables as rules the kernel runs in order
//! (conditions and an action), and the one new connection it follows through them.
//!
//! Both iptables dumps and nftables rulesets lower into this form (`decode::explain`),
//! so one evaluator serves iptables-nft, iptables-legacy and nftables alike. What a
//! decoder cannot express is kept as [`Cond::Unknown`] or [`Action::Unknown`] with the
//! rule's text: the evaluator stops there and says so rather than guessing.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use crate::heart::model::{Backend, Family, Protocol};

/// An address prefix (`10.244.0.0/16`); a bare address is a full-length prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Net {
    pub fn host(addr: IpAddr) -> Net {
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        Net { addr, prefix }
    }

    /// `10.0.0.0/8`, `10.0.0.1`, `fd00::/64`; None when it is neither.
    pub fn parse(s: &str) -> Option<Net> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(p) if p <= max => p,
                // iptables prints a non-contiguous mask as an address; rare enough to refuse.
                _ => return None,
            },
        };
        Some(Net { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let max = if self.addr.is_ipv4() { 32 } else { 128 };
        if self.prefix == max {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.prefix)
        }
    }
}

/// The netfilter hooks a new connection to a NodePort passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hook {
    Prerouting,
    Input,
    Forward,
    Output,
    Postrouting,
}

impl Hook {
    pub fn parse(s: &str) -> Option<Hook> {
        Some(match s.to_ascii_lowercase().as_str() {
            "prerouting" => Hook::Prerouting,
            "input" => Hook::Input,
            "forward" => Hook::Forward,
            "output" => Hook::Output,
            "postrouting" => Hook::Postrouting,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Prerouting => "prerouting",
            Hook::Input => "input",
            Hook::Forward => "forward",
            Hook::Output => "output",
            Hook::Postrouting => "postrouting",
        }
    }
}

/// What a base chain may do: nat chains see only a connection's first packet and bind
/// its address translation; filter (and route) chains see every packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainType {
    Filter,
    Nat,
    Route,
}

/// A chain the kernel calls from a hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseChain {
    pub hook: Hook,
    pub priority: i32,
    pub kind: ChainType,
    /// The policy: true accepts, false drops.
    pub accepts: bool,
}

/// Which side of a connection a condition reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Source,
    Destination,
}

/// Connection-tracking states a rule may test (a new connection is `New`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtState {
    New,
    Established,
    Related,
    Invalid,
    Untracked,
    Snat,
    Dnat,
}

impl CtState {
    pub fn parse(s: &str) -> Option<CtState> {
        Some(match s.to_ascii_lowercase().as_str() {
            "new" => CtState::New,
            "established" => CtState::Established,
            "related" => CtState::Related,
            "invalid" => CtState::Invalid,
            "untracked" => CtState::Untracked,
            "snat" => CtState::Snat,
            "dnat" => CtState::Dnat,
            _ => return None,
        })
    }
}

/// One test of a rule. `negated` is iptables' `!` and nftables' `!=`.
#[derive(Debug, Clone, PartialEq)]
pub enum Cond {
    /// `-p tcp`, `meta l4proto tcp`; None: a protocol that is none of tcp/udp/sctp.
    Protocol {
        protocol: Option<Protocol>,
        negated: bool,
    },
    /// `-s`/`-d`, `ip saddr`/`ip daddr`: any of the prefixes.
    Addr {
        side: Side,
        nets: Vec<Net>,
        negated: bool,
    },
    /// `--sport`/`--dport`/`--dports`, `th dport`: any of the inclusive ranges.
    Port {
        side: Side,
        ranges: Vec<(u16, u16)>,
        negated: bool,
    },
    /// `-m addrtype --dst-type LOCAL`, `fib daddr type local`: whether the address is one
    /// of this node's (`local` false: a type this evaluator knows is not the
    /// connection's, such as `broadcast`).
    AddrLocal { side: Side, local: bool, negated: bool },
    /// `-i`/`-o` (a trailing `+` is a wildcard), `iifname`.
    Interface {
        inbound: bool,
        name: String,
        negated: bool,
    },
    /// `-m mark --mark V/M`, `meta mark & M == V`.
    Mark { value: u32, mask: u32, negated: bool },
    /// `-m conntrack --ctstate`, `ct state`.
    CtState { states: Vec<CtState>, negated: bool },
    /// `-m statistic --mode random --probability P`: matches that share of new connections.
    Random { probability: f64 },
    /// `-m statistic --mode nth --every N --packet K`: one connection in N.
    Nth { every: u32 },
    /// `-m recent --rcheck`: session affinity (a client seen within `seconds` keeps its
    /// endpoint). A client's first connection never matches.
    Affinity { name: String, seconds: Option<u32> },
    /// nftables: the connection's `key` (a concatenation) is (not) in a set or map.
    Lookup {
        key: Vec<Field>,
        set: SetRef,
        negated: bool,
    },
    /// A test this evaluator cannot decide (an ipset, a socket match, a module it does
    /// not know): the rule's text says which.
    Unknown(String),
}

/// A field of a connection an nftables key reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Addr(Side),
    Port(Side),
    L4Proto,
    /// `fib daddr type` / `fib saddr type`.
    AddrType(Side),
    /// `iifname`.
    InInterface,
    Mark,
}

/// A set or map: named in the table, or written inline in the rule.
#[derive(Debug, Clone, PartialEq)]
pub enum SetRef {
    Named(String),
    Inline(Vec<Element>),
}

/// One value of an nftables key component.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyPart {
    Addr(Net),
    Port(u16, u16),
    Protocol(Option<Protocol>),
    /// `local`, `unicast`, …
    AddrType(String),
    Int(u64, u64),
    Text(String),
    /// What the decoder could not read: never matches, and the lookup is undecided.
    Unknown(String),
}

/// An element of a set or map: its key's components and, in a verdict map, what
/// it does.
#[derive(Debug, Clone, PartialEq)]
pub struct Element {
    pub key: Vec<KeyPart>,
    pub action: Option<Action>,
    pub text: String,
}

/// A named set or map of an nftables table.
#[derive(Debug, Clone, PartialEq)]
pub struct Set {
    pub name: String,
    pub elements: Vec<Element>,
}

/// Where a DNAT sends a connection: an address and, when the rule gives one, a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DnatTo {
    pub addr: IpAddr,
    pub port: Option<u16>,
}

/// What a matching rule does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing that changes the path: a counter, a log, an accounting object.
    Continue,
    /// `-j MARK --set-xmark V/M`, `meta mark set …`: mark = (mark & !mask) ^ value.
    SetMark {
        value: u32,
        mask: u32,
    },
    Jump(String),
    Goto(String),
    Return,
    Accept,
    Drop,
    Reject,
    /// `-j DNAT --to-destination`, `dnat to`: one target (a range is kept as its first
    /// address and noted by the decoder).
    Dnat(DnatTo),
    /// `-j REDIRECT --to-ports`: to this node, on that port.
    Redirect(Option<u16>),
    /// `-j MASQUERADE`, `-j SNAT`: the source changes, not where the connection goes.
    SourceNat,
    /// `… vmap @map` / `vmap { … }`: the action of the element the key finds.
    Vmap {
        key: Vec<Field>,
        map: SetRef,
    },
    /// `numgen random mod N vmap { 0 : goto a, 1 : goto b }`.
    Numgen {
        modulus: u32,
        map: SetRef,
    },
    /// An action this evaluator does not model (a queue, a user-space target).
    Unknown(String),
}

/// Where a rule is written: the dump's line, or the nftables handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RulePlace {
    Line(u32),
    Handle(u64),
    Unknown,
}

/// One rule as the kernel runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub place: RulePlace,
    /// The rule as the dump printed it.
    pub text: String,
    pub conds: Vec<Cond>,
    pub action: Action,
    /// The rule's comment (kube-proxy's name for the Service port), if any.
    pub comment: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    pub name: String,
    pub base: Option<BaseChain>,
    pub rules: Vec<Rule>,
}

/// One table of one backend and family (`nat` of iptables-nft IPv4, `ip kube-proxy`).
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub backend: Backend,
    pub family: Family,
    /// `nat`, `filter`, … for iptables; `ip kube-proxy`, `inet firewalld` for nftables.
    pub name: String,
    /// Where the rules were read (`iptables-nft-save.txt`, `nft.json`).
    pub origin: String,
    pub chains: Vec<Chain>,
    pub sets: Vec<Set>,
}

impl Table {
    pub fn chain(&self, name: &str) -> Option<usize> {
        self.chains.iter().position(|c| c.name == name)
    }

    pub fn set(&self, name: &str) -> Option<&Set> {
        self.sets.iter().find(|s| s.name == name)
    }

    /// The elements a set reference names: written in the rule, or the table's set of
    /// that name; None when the table has no such set.
    pub fn elements<'a>(&'a self, set: &'a SetRef) -> Option<&'a [Element]> {
        match set {
            SetRef::Inline(elements) => Some(elements),
            SetRef::Named(name) => self.set(name).map(|s| s.elements.as_slice()),
        }
    }
}

/// Every table explain read, and what it could not read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rulesets {
    pub tables: Vec<Table>,
    /// Each gap as a sentence (an unreadable dump, a line that was not a rule): a
    /// path through a part of a dump that was not read cannot be promised.
    pub gaps: Vec<String>,
}

/// The address a connection is made to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// A given address of this node.
    Addr(IpAddr),
    /// "Any address of this node" (`tcp/30080` without an address): local, not a
    /// loopback address, and none of the addresses a rule names.
    AnyNodeAddress(Family),
}

impl Destination {
    pub fn family(self) -> Family {
        match self {
            Destination::Addr(ip) => Family::of(&ip),
            Destination::AnyNodeAddress(f) => f,
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Destination::Addr(ip) => write!(f, "{ip}"),
            Destination::AnyNodeAddress(_) => f.write_str("this node"),
        }
    }
}

/// The connection explain follows: a new one, from `source`, to `destination:port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub protocol: Protocol,
    pub destination: Destination,
    pub port: u16,
    pub source: IpAddr,
}

impl Probe {
    /// The source explain assumes when none is given: a documentation address
    /// (RFC 5737, RFC 3849), outside every cluster and node network.
    pub fn outside_client(family: Family) -> IpAddr {
        match family {
            Family::Ipv4 => IpAddr::from([203, 0, 113, 10]),
            Family::Ipv6 => "2001:db8::10".parse().expect("a valid address"),
        }
    }

    pub fn family(&self) -> Family {
        self.destination.family()
    }
}

/// A DNAT's target with the probe's port filled in when the rule names none.
pub fn target_of(to: DnatTo, port: u16) -> SocketAddr {
    SocketAddr::new(to.addr, to.port.unwrap_or(port))
}

/// What `portdrift explain` is asked about: `tcp/30080`, `tcp/10.0.0.5:30080`,
/// `udp/[fd00::5]:30514`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortQuery {
    pub protocol: Protocol,
    pub address: Option<IpAddr>,
    pub port: u16,
}

/// Why a port query could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not PROTO/PORT or PROTO/ADDRESS:PORT (tcp/30080, udp/10.0.0.5:30514, tcp/[fd00::5]:30080)")]
pub struct PortQueryError(pub String);

impl std::str::FromStr for PortQuery {
    type Err = PortQueryError;

    fn from_str(s: &str) -> Result<PortQuery, PortQueryError> {
        let bad = || PortQueryError(s.to_string());
        let (protocol, rest) = s.split_once('/').ok_or_else(bad)?;
        let protocol = Protocol::parse(protocol).ok_or_else(bad)?;
        let (address, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (addr, port) = v6.split_once("]:").ok_or_else(bad)?;
            (
                Some(addr.parse::<std::net::Ipv6Addr>().map_err(|_| bad())?.into()),
                port,
            )
        } else {
            match rest.rsplit_once(':') {
                Some((addr, port)) => (
                    Some(addr.parse::<std::net::Ipv4Addr>().map_err(|_| bad())?.into()),
                    port,
                ),
                None => (None, rest),
            }
        };
        let port: u16 = port.parse().map_err(|_| bad())?;
        if port == 0 {
            return Err(bad());
        }
        Ok(PortQuery {
            protocol,
            address,
            port,
        })
    }
}

impl fmt::Display for PortQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.address {
            Some(ip) => write!(f, "{}/{}", self.protocol, SocketAddr::new(ip, self.port)),
            None => write!(f, "{}/{}", self.protocol, self.port),
        }
    }
}

impl PortQuery {
    /// The connection to follow: from `source` (default: a client outside the
    /// cluster) in the family of the address or source given, else `family`.
    pub fn probe(&self, source: Option<IpAddr>, family: Family) -> Result<Probe, String> {
        let family = self.address.or(source).map_or(family, |ip| Family::of(&ip));
        let source = source.unwrap_or_else(|| Probe::outside_client(family));
        if Family::of(&source) != family {
            return Err(format!(
                "the source {source} and the address {} are of different families",
                self.address.map(|a| a.to_string()).unwrap_or_default()
            ));
        }
        Ok(Probe {
            protocol: self.protocol,
            destination: match self.address {
                Some(ip) => Destination::Addr(ip),
                None => Destination::AnyNodeAddress(family),
            },
            port: self.port,
            source,
        })
    }
}
