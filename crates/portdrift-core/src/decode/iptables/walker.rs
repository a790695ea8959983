//! The NodePort walker: each dispatch rule followed through its chains to its DNATs, and hostPorts to theirs.

use std::net::SocketAddr;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::heart::kube_proxy;
use crate::heart::model::{Backend, DnatTarget, Family, HostPortRule, NodePortRule, RuleIdentity, Verdict};

use super::TableKind;
use super::graph::{Dispatch, DispatchTarget, Dnat, Graph};

/// Each hostPort rule with the DNATs of its `CNI-DN-*` chain that match its port.
pub(super) fn resolve_hostports(p: &Graph) -> Vec<HostPortRule> {
    let mut out = Vec::new();
    for entry in &p.hostports {
        for &port in &entry.ports {
            let targets = p
                .dnats
                .iter()
                .filter(|d| d.chain == entry.chain && d.dport.is_none_or(|dp| dp == port))
                .map(|d| SocketAddr::new(d.ip, d.port.unwrap_or(port)))
                .collect();
            out.push(HostPortRule {
                protocol: entry.protocol,
                port,
                targets,
                rule: entry.rule.clone(),
            });
        }
    }
    out
}

/// Where one chain leads: computed once per chain that dispatch rules enter, since
/// kube-proxy's localhost twin and the main rule share their `KUBE-EXT-*` chain.
#[derive(Clone)]
pub(super) struct Reach {
    pub(super) path: Arc<[Arc<str>]>,
    pub(super) targets: Arc<[DnatTarget]>,
    pub(super) external: Arc<[SocketAddr]>,
    pub(super) dangling: Option<String>,
    pub(super) hash: Option<Arc<str>>,
}

/// Items grouped by chain, in dump order within each chain (compressed sparse rows).
pub(super) struct ByChain {
    pub(super) start: Vec<u32>,
    pub(super) items: Vec<u32>,
}

impl ByChain {
    pub(super) fn build(chains: usize, pairs: impl Iterator<Item = (u32, u32)> + Clone) -> ByChain {
        let mut start = vec![0u32; chains + 1];
        for (chain, _) in pairs.clone() {
            start[chain as usize + 1] += 1;
        }
        for i in 0..chains {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut items = vec![0u32; start[chains] as usize];
        for (chain, item) in pairs {
            items[fill[chain as usize] as usize] = item;
            fill[chain as usize] += 1;
        }
        ByChain { start, items }
    }

    pub(super) fn of(&self, chain: u32) -> &[u32] {
        &self.items[self.start[chain as usize] as usize..self.start[chain as usize + 1] as usize]
    }
}

/// Follows every dispatch rule to the DNATs it reaches.
pub(super) fn resolve_dispatch(p: &mut Graph, backend: Backend, family: Family) -> Vec<NodePortRule> {
    let mut dispatch = std::mem::take(&mut p.dispatch);
    let p = &*p;
    let chains = p.nat.chains.len();
    let mut resolver = Resolver {
        p,
        backend,
        family,
        nat: Arc::from("nat"),
        filter: Arc::from("filter"),
        dispatch_chains: [
            Arc::from("KUBE-NODEPORTS"),
            Arc::from("KUBE-EXTERNAL-SERVICES"),
            Arc::from("KUBE-SERVICES"),
        ],
        // Most rules reach no target bypassing the cluster chain (externalTrafficPolicy
        // Cluster): they share one empty list.
        no_targets: Arc::new([]),
        // Keyed by the chains dispatch rules start at (one per Service port), not a slot
        // for each of a large node's tens of thousands of chains.
        memo: FxHashMap::default(),
        walker: Walker {
            path: Vec::new(),
            targets: Vec::new(),
            seen: vec![0; chains],
            generation: 0,
            stack: Vec::new(),
            jumps: ByChain::build(chains, p.nat.jumps.iter().map(|j| (j.from, j.to))),
            dnats: ByChain::build(
                chains,
                p.dnats.iter().enumerate().map(|(i, d)| (d.chain, i as u32)),
            ),
        },
    };
    let mut out = Vec::with_capacity(dispatch.len());
    // Taken a chunk at a time, the list shrinking as the output grows: whole, it would
    // stay allocated next to the whole output, at the read's peak.
    while !dispatch.is_empty() {
        let chunk = dispatch.len().min(DISPATCH_CHUNK);
        out.extend(dispatch.drain(..chunk).map(|d| resolver.resolve(d)));
        dispatch.shrink_to_fit();
    }
    out
}

/// Dispatch rules resolved between two shrinks of their list.
const DISPATCH_CHUNK: usize = 2048;

/// What resolving dispatch rules shares: the dump, names, and the walks made so far.
struct Resolver<'p> {
    p: &'p Graph,
    backend: Backend,
    family: Family,
    nat: Arc<str>,
    filter: Arc<str>,
    dispatch_chains: [Arc<str>; 3],
    no_targets: Arc<[SocketAddr]>,
    memo: FxHashMap<u32, Reach>,
    walker: Walker,
}

impl Resolver<'_> {
    /// One dispatch rule as the NodePort rule it is, with where it leads.
    fn resolve(&mut self, d: Dispatch) -> NodePortRule {
        let table = if d.at.table == TableKind::Nat {
            self.nat.clone()
        } else {
            self.filter.clone()
        };
        let chain = self
            .dispatch_chains
            .iter()
            .find(|c| ***c == *d.at.name)
            .cloned()
            .unwrap_or_else(|| Arc::from(d.at.name));
        let mut rule = NodePortRule {
            backend: self.backend,
            family: self.family,
            protocol: d.protocol,
            port: d.port,
            dest: d.dest,
            verdict: Verdict::Forward,
            path: Arc::new([]),
            targets: Arc::new([]),
            external_targets: self.no_targets.clone(),
            comment_service: d.comment,
            undecoded_comment: d.undecoded_comment,
            chain_hash: None,
            dangling: None,
            identity: RuleIdentity::Iptables {
                table,
                chain,
                rule: d.rule.text.clone(),
            },
            rule: d.rule,
        };
        match d.target {
            DispatchTarget::Verdict(v) => rule.verdict = v,
            DispatchTarget::Dnat(id) => {
                let target = dnat_target(self.p, &self.nat, &self.p.dnats[id as usize], d.port);
                rule.external_targets = Arc::new([target.addr]);
                rule.targets = Arc::new([target]);
            }
            DispatchTarget::Chain(start) => {
                let (p, nat, no_targets, walker) = (self.p, &self.nat, &self.no_targets, &mut self.walker);
                let reach = self
                    .memo
                    .entry(start)
                    .or_insert_with(|| walker.reach(p, nat, start, d.port, no_targets))
                    .clone();
                rule.path = reach.path;
                rule.targets = reach.targets;
                rule.external_targets = reach.external;
                rule.dangling = reach.dangling;
                rule.chain_hash = reach.hash;
            }
        }
        rule
    }
}

/// Depth-first walk over nat chains with a generation-stamped visited set, so no set
/// is allocated per walk.
pub(super) struct Walker {
    pub(super) path: Vec<Arc<str>>,
    pub(super) targets: Vec<DnatTarget>,
    pub(super) seen: Vec<u32>,
    pub(super) generation: u32,
    pub(super) stack: Vec<u32>,
    pub(super) jumps: ByChain,
    pub(super) dnats: ByChain,
}

impl Walker {
    pub(super) fn reach(
        &mut self,
        p: &Graph,
        nat: &Arc<str>,
        start: u32,
        node_port: u16,
        no_targets: &Arc<[SocketAddr]>,
    ) -> Reach {
        let external = self.external(p, start, node_port);
        let external = if external.is_empty() {
            no_targets.clone()
        } else {
            external.into()
        };
        self.generation += 1;
        self.stack.clear();
        self.stack.push(start);
        self.seen[start as usize] = self.generation;
        // Scratch buffers reused across walks: each Reach then costs one allocation
        // per shared slice.
        let mut path = std::mem::take(&mut self.path);
        let mut targets = std::mem::take(&mut self.targets);
        let mut dangling = None;
        while let Some(id) = self.stack.pop() {
            let chain = &p.nat.chains[id as usize];
            if chain.declared == 0 && dangling.is_none() {
                dangling = Some(chain.name.to_string());
            }
            if &*chain.name != "KUBE-MARK-MASQ" {
                path.push(chain.name.clone());
            }
            for &dnat in self.dnats.of(id) {
                targets.push(dnat_target(p, nat, &p.dnats[dnat as usize], node_port));
            }
            // Reverse so the first jump in the chain is walked first.
            for &next in self.jumps.of(id).iter().rev() {
                if self.seen[next as usize] != self.generation {
                    self.seen[next as usize] = self.generation;
                    self.stack.push(next);
                }
            }
        }
        let first = &p.nat.chains[start as usize].name;
        let reach = Reach {
            path: path.drain(..).collect(),
            targets: targets.drain(..).collect(),
            external,
            dangling,
            hash: kube_proxy::chain_hash(first).map(Arc::from),
        };
        self.path = path;
        self.targets = targets;
        reach
    }
}

impl Walker {
    /// The DNAT addresses reachable from `start` without entering a `KUBE-SVC-*` chain:
    /// what a client outside the node reaches when kube-proxy's externalTrafficPolicy
    /// Local layout sends only pod and host traffic to the cluster chain.
    pub(super) fn external(&mut self, p: &Graph, start: u32, node_port: u16) -> Vec<SocketAddr> {
        self.generation += 1;
        self.stack.clear();
        self.stack.push(start);
        self.seen[start as usize] = self.generation;
        let mut out = Vec::new();
        while let Some(id) = self.stack.pop() {
            for &dnat in self.dnats.of(id) {
                let d = &p.dnats[dnat as usize];
                out.push(SocketAddr::new(d.ip, d.port.unwrap_or(node_port)));
            }
            for &next in self.jumps.of(id).iter().rev() {
                if self.seen[next as usize] != self.generation
                    && !p.nat.chains[next as usize].name.starts_with("KUBE-SVC-")
                {
                    self.seen[next as usize] = self.generation;
                    self.stack.push(next);
                }
            }
        }
        out
    }
}

pub(super) fn dnat_target(p: &Graph, nat: &Arc<str>, d: &Dnat, node_port: u16) -> DnatTarget {
    let chain = &p.nat.chains[d.chain as usize].name;
    DnatTarget {
        addr: SocketAddr::new(d.ip, d.port.unwrap_or(node_port)),
        chain: chain.clone(),
        rule: d.rule.clone(),
        identity: RuleIdentity::Iptables {
            table: nat.clone(),
            chain: chain.clone(),
            rule: d.rule.text.clone(),
        },
    }
}
