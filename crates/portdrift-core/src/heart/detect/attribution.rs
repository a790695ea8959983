//! Attributing each rule to a Service port, and the desired state indexed for it.

use std::collections::{HashMap, HashSet};

use rustc_hash::FxHashMap;

use crate::heart::desired::{DesiredPort, DesiredState};
use crate::heart::kube_proxy::{self, Naming};
use crate::heart::model::{Family, NodePortRule, Protocol, RuleDump, ServicePortRef};

/// Lookup tables over the desired state, built once per scan.
pub(super) struct DesiredIndex<'a> {
    pub(super) state: &'a DesiredState,
    pub(super) by_port: PortIndex<usize>,
    /// Each Service port's chain hash in every release's naming ([`Naming`]).
    pub(super) by_hash: FxHashMap<[u8; 16], usize>,
    pub(super) by_name: FxHashMap<(&'a ServicePortRef, Protocol), usize>,
    pub(super) health_check: HashMap<u16, usize>,
    /// Every port allocated to any Service, whatever its protocol or whether kube-proxy
    /// programs it.
    pub(super) allocated: HashSet<u16>,
}

impl<'a> DesiredIndex<'a> {
    pub(super) fn new(state: &'a DesiredState) -> Self {
        let mut by_hash = FxHashMap::default();
        let mut by_name = FxHashMap::default();
        let mut health_check = HashMap::new();
        for (i, p) in state.ports.iter().enumerate() {
            for naming in Naming::ALL.into_iter().filter(|n| n.applies_to(&p.service)) {
                by_hash.insert(
                    kube_proxy::service_chain_hash_as(&p.service, p.protocol, naming),
                    i,
                );
            }
            by_name.insert((&p.service, p.protocol), i);
            if let Some(hc) = p.health_check_node_port {
                health_check.insert(hc, i);
            }
        }
        let by_port = PortIndex::new(
            state
                .ports
                .iter()
                .enumerate()
                .map(|(i, p)| ((p.protocol, p.node_port), i)),
        );
        let allocated = by_port
            .keys()
            .map(|(_, port)| port)
            .chain(health_check.keys().copied())
            .chain(state.other_allocated.iter().map(|&(_, port)| port))
            .collect();
        DesiredIndex {
            state,
            by_port,
            by_hash,
            by_name,
            health_check,
            allocated,
        }
    }

    pub(super) fn port(&self, i: usize) -> &'a DesiredPort {
        &self.state.ports[i]
    }

    /// Desired ports owning `protocol`/`port` in `family`.
    pub(super) fn owners(
        &self,
        protocol: Protocol,
        port: u16,
        family: Family,
    ) -> impl Iterator<Item = usize> + '_ {
        self.by_port
            .get((protocol, port))
            .iter()
            .copied()
            .filter(move |&i| self.port(i).in_family(family))
    }

    /// Which Service port a rule is for. A chain name is a Service port's when it is
    /// the hash any kube-proxy release gives it; one that matches none, under a comment
    /// naming the port's owner, is weighed by where it leads ([`Self::weigh_unmatched`]):
    /// a hash that no release gives proves only that the naming is not one known here.
    pub(super) fn attribute<'r>(&self, rule: &'r NodePortRule, family: Family) -> Attribution<'r> {
        if let Some(hash) = &rule.chain_hash {
            if let Some(&i) = hash_key(hash).and_then(|k| self.by_hash.get(&k)) {
                return Attribution::Known(i);
            }
            return match self
                .owners(rule.protocol, rule.port, family)
                .find(|&o| comment_names(rule, &self.port(o).service))
            {
                Some(owner) => self.weigh_unmatched(rule, hash, owner, family),
                None => Attribution::Foreign(rule.comment_service.as_ref()),
            };
        }
        if let Some(svc) = &rule.comment_service {
            return match self.by_name.get(&(svc, rule.protocol)) {
                Some(&i) => Attribution::Known(i),
                None => Attribution::Foreign(Some(svc)),
            };
        }
        Attribution::Unknown
    }

    /// A rule whose comment names `owner`, the Service port owning its port now, and whose
    /// chain hash no release gives it. It is the owner's when it leads to one of the
    /// owner's endpoints; an earlier incarnation's only on positive evidence: its chain
    /// is the owner's name hashed with another protocol, or its DNATs reach none of the
    /// owner's endpoints (as far as the cluster state lists them all). Otherwise nothing
    /// tells, and the rule is the owner's unconfirmed.
    fn weigh_unmatched<'r>(
        &self,
        rule: &NodePortRule,
        hash: &str,
        owner: usize,
        family: Family,
    ) -> Attribution<'r> {
        let desired = self.port(owner);
        let other_protocol = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp]
            .into_iter()
            .filter(|&p| p != rule.protocol)
            .any(|p| {
                Naming::ALL
                    .into_iter()
                    .any(|n| hash.as_bytes() == kube_proxy::service_chain_hash_as(&desired.service, p, n))
            });
        if other_protocol {
            return Attribution::Superseded(owner, Evidence::OtherProtocol);
        }
        let listed = desired.endpoints(family).map(|e| &e.listed);
        if rule
            .targets
            .iter()
            .any(|t| listed.is_some_and(|l| l.contains(&t.addr)))
        {
            return Attribution::Known(owner);
        }
        if !rule.targets.is_empty() && listed.is_some() && self.endpoints_certain(owner) {
            return Attribution::Superseded(owner, Evidence::NoCurrentEndpoint);
        }
        Attribution::Unconfirmed(owner)
    }

    /// Attributes a rule and names the Service port it serves now, if any: the one it
    /// names when that one owns its port, or the port's owner when it names none.
    pub(super) fn judge<'r>(&self, rule: &'r NodePortRule, family: Family) -> Judged<'r> {
        let attribution = self.attribute(rule, family);
        let owner = match attribution {
            Attribution::Known(i) => self.owners(rule.protocol, rule.port, family).find(|&o| o == i),
            Attribution::Unconfirmed(i) => Some(i),
            Attribution::Unknown => self.owners(rule.protocol, rule.port, family).next(),
            Attribution::Foreign(_) | Attribution::Superseded(..) => None,
        };
        Judged { attribution, owner }
    }

    /// Whether endpoint checks can be trusted for this desired port.
    pub(super) fn endpoints_certain(&self, i: usize) -> bool {
        !self.state.uncertain && !self.port(i).uncertain
    }

    pub(super) fn allocated(&self, port: u16) -> bool {
        self.allocated.contains(&port)
    }
}

/// Values grouped by protocol and port: one sorted vector, looked up by binary search,
/// so a 10,000-Service cluster costs no allocation per port.
pub(super) struct PortIndex<T> {
    pub(super) keys: Vec<(Protocol, u16)>,
    pub(super) values: Vec<T>,
}

impl<T> PortIndex<T> {
    pub(super) fn new(items: impl Iterator<Item = ((Protocol, u16), T)>) -> Self {
        let mut items: Vec<_> = items.collect();
        // Stable: values of one key keep their order (rules stay in dump order).
        items.sort_by_key(|(k, _)| *k);
        let (keys, values) = items.into_iter().unzip();
        PortIndex { keys, values }
    }

    pub(super) fn get(&self, key: (Protocol, u16)) -> &[T] {
        let from = self.keys.partition_point(|k| *k < key);
        let to = from + self.keys[from..].partition_point(|k| *k == key);
        &self.values[from..to]
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = (Protocol, u16)> + '_ {
        self.keys.iter().copied()
    }

    /// Each key with its values, in key order.
    pub(super) fn groups(&self) -> impl Iterator<Item = ((Protocol, u16), &[T])> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            let key = *self.keys.get(at)?;
            let len = self.keys[at..].partition_point(|k| *k == key);
            let group = &self.values[at..at + len];
            at += len;
            Some((key, group))
        })
    }
}

/// Whether the rule's kube-proxy comment names `svc` (in any release's spelling: an
/// unnamed port was `ns/name:` in older ones, which parses to the same port).
fn comment_names(rule: &NodePortRule, svc: &ServicePortRef) -> bool {
    match &rule.comment_service {
        Some(named) => named == svc,
        None => rule
            .undecoded_comment_service()
            .is_some_and(|named| &named == svc),
    }
}

/// A chain-name hash as an index key.
pub(super) fn hash_key(hash: &str) -> Option<[u8; 16]> {
    hash.as_bytes().try_into().ok()
}

/// Which Service port a rule belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Attribution<'r> {
    /// A Service port in the desired state.
    Known(usize),
    /// A Service port the cluster no longer has (named when the rule says which).
    Foreign(Option<&'r ServicePortRef>),
    /// The comment names the port's owner, but the rule is an earlier incarnation's:
    /// its chain name is no release's for the owner and the evidence says so.
    Superseded(usize, Evidence),
    /// The comment names the port's owner and the chain name is no release's for it;
    /// nothing else tells whether the rule is the owner's (it leads to no DNAT the dump
    /// shows, or the owner's endpoints are not known in full). Taken as the owner's.
    Unconfirmed(usize),
    /// The rule names no Service (a hand-written DNAT without a comment).
    Unknown,
}

/// What shows a rule naming the port's owner to be an earlier incarnation's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Evidence {
    /// Its chain is the owner's name hashed with another protocol.
    OtherProtocol,
    /// Its DNATs reach none of the endpoints the owner's EndpointSlices list.
    NoCurrentEndpoint,
}

/// A rule's attribution and the Service port it serves now.
#[derive(Debug, Clone, Copy)]
pub(super) struct Judged<'r> {
    pub(super) attribution: Attribution<'r>,
    pub(super) owner: Option<usize>,
}

/// A rule beside its judgment.
pub(super) type JudgedRule<'s, 'r> = (&'s NodePortRule, &'s Judged<'r>);

/// Judges every rule of a source, in the source's order.
pub(super) fn judge_source<'r>(source: &'r RuleDump, index: &DesiredIndex<'_>) -> Vec<Judged<'r>> {
    source
        .nodeports
        .iter()
        .map(|r| index.judge(r, source.family))
        .collect()
}
