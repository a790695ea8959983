//! kube-proxy's table in the small form a reader that follows the kernel's notifications
//! keeps between reads, and updates in place when a chain or map changes.
//!
//! Only what building the rule sources needs is kept: each chain name once (interned;
//! rules name the chains they jump to by number), of each chain its rule count, its
//! rules' jumps and its DNATs (each in rule order: the builder takes a chain's DNATs,
//! then its jumps, so how they interleave does not matter), the NodePort maps whole,
//! and of every other map its element count and the chains its verdicts name. Lines are
//! not kept: a netlink read has none.
//!
//! Why not the decoded form itself: at 10,000 Services it is 22.5 MB of small
//! allocations, mostly repeated chain names, where this form takes 14.9 MB
//! (docs/performance.md#what-the-agent-keeps-between-reads). Why not that form packed (as
//! before): every read after a change unpacked all of it, so each one's peak held it
//! twice.

use std::sync::Arc;

use rustc_hash::FxHashSet;

use super::graph::{DnatRule, Jump, RuleGraph, is_nodeport_map, jump_to};
use super::ir::{DnatIr, MapIr, RuleIr, TableIr};
use crate::decode::name_index::NameIndex;
use crate::heart::model::{Family, Unparsed};

/// A kept chain that left the kernel's chain list while no notification named it: it
/// was renamed, and the kept rules that jump to it would still name the old one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("chain {0} left the list unannounced (renamed)")]
pub struct Unlisted(pub String);

/// Why a kept table cannot be updated in place (the reader reads it whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    /// A chain whose rules changed, which the table does not hold.
    #[error("the rules of chain {0} changed, which the last read did not list")]
    NotKept(String),
    #[error(transparent)]
    Unlisted(#[from] Unlisted),
}

/// A name's number in [`Names`].
type NameId = u32;
/// In [`KeptTable::at`]: no chain has that name.
const NO_CHAIN: u32 = u32::MAX;

/// Interned names, each one `Arc<str>`: the rule sources built from the table take
/// their chains' names from here, and the verdict maps kept beside it their targets', so
/// each of a large node's tens of thousands of endpoint chain names is held once.
#[derive(Debug, Default)]
struct Names {
    names: Vec<Arc<str>>,
    index: NameIndex,
}

impl Names {
    fn len(&self) -> usize {
        self.names.len()
    }

    fn get(&self, id: NameId) -> &str {
        &self.names[id as usize]
    }

    fn shared(&self, id: NameId) -> &Arc<str> {
        &self.names[id as usize]
    }

    fn find(&self, name: &str) -> Option<NameId> {
        self.index.find(name, |id| self.get(id))
    }

    /// Room for `more` names, made once rather than by doubling.
    fn reserve(&mut self, more: usize) {
        self.names.reserve_exact(more);
        let names = &self.names;
        self.index.reserve(more, |id| &names[id as usize]);
    }

    fn intern(&mut self, name: &str) -> NameId {
        self.intern_with(name, || Arc::from(name))
    }

    /// Interns `name` as it is, without copying its text.
    fn intern_shared(&mut self, name: &Arc<str>) -> NameId {
        self.intern_with(name, || name.clone())
    }

    fn intern_with(&mut self, name: &str, make: impl FnOnce() -> Arc<str>) -> NameId {
        if let Some(id) = self.find(name) {
            return id;
        }
        let id = self.names.len() as NameId;
        let names = &self.names;
        self.index.insert(name, id, |other| &names[other as usize]);
        self.names.push(make());
        id
    }

    fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        // Each name's text with the Arc's two counts.
        let texts: usize = self.names.iter().map(|n| n.len() + 2 * size_of::<usize>()).sum();
        self.names.capacity() * size_of::<Arc<str>>() + texts + self.index.heap_bytes()
    }
}

#[derive(Debug)]
struct KeptChain {
    name: NameId,
    /// All its rules.
    rules: u32,
    /// The chains its rules jump to, in rule order.
    jumps: Box<[NameId]>,
    dnats: Box<[KeptDnat]>,
}

#[derive(Debug)]
struct KeptDnat {
    /// The rule's.
    handle: Option<u64>,
    dnat: DnatIr,
}

/// The rules of one chain as they are read, until [`KeptTable::settle`] (or the next
/// chain's rules) puts them in their chain: boxed slices, not vectors, since a table
/// holds tens of thousands of chains.
#[derive(Debug)]
struct Staged {
    chain: usize,
    jumps: Vec<NameId>,
    dnats: Vec<KeptDnat>,
}

#[derive(Debug)]
pub enum KeptMap {
    /// `service-nodeports` and `no-endpoint-nodeports`: their elements are NodePorts.
    NodePorts(MapIr<'static>),
    Other {
        name: Box<str>,
        elements: usize,
        /// The chains its elements' verdicts name.
        jumps: Vec<NameId>,
    },
}

impl KeptMap {
    pub fn name(&self) -> &str {
        match self {
            KeptMap::NodePorts(map) => &map.name,
            KeptMap::Other { name, .. } => name,
        }
    }
}

/// One kube-proxy table, kept between reads.
#[derive(Debug)]
pub struct KeptTable {
    family: Family,
    names: Names,
    /// By name: the chain's position in `chains`, or [`NO_CHAIN`].
    at: Vec<u32>,
    /// In the kernel's order.
    chains: Vec<KeptChain>,
    maps: Vec<KeptMap>,
    notes: Vec<String>,
    staged: Option<Staged>,
    /// The chains holding a rule that dispatches NodePorts, by name (kube-proxy has
    /// one, `services`): names stay right when chains are renumbered or relisted.
    dispatch: Vec<Box<str>>,
}

impl KeptTable {
    /// The table a whole read decoded, reduced (`table` goes as it is reduced).
    pub fn from_ir(table: TableIr<'_>) -> KeptTable {
        let mut kept = KeptTable {
            family: table.family,
            names: Names::default(),
            at: Vec::new(),
            chains: Vec::with_capacity(table.chains.len()),
            maps: Vec::with_capacity(table.maps.len()),
            notes: table.notes,
            staged: None,
            dispatch: Vec::new(),
        };
        kept.names.reserve(table.chains.len());
        kept.at.reserve_exact(table.chains.len());
        for chain in table.chains {
            let position = kept.chains.len();
            kept.push_chain(&chain.name);
            for rule in chain.rules {
                kept.push_rule(position, rule);
            }
        }
        for map in table.maps {
            kept.push_map_ir(map);
        }
        kept.settle();
        kept
    }

    /// Appends a chain without rules, named as no chain of the table is.
    fn push_chain(&mut self, name: &str) {
        let id = self.names.intern(name);
        self.mark(id, self.chains.len() as u32);
        self.chains.push(KeptChain {
            name: id,
            rules: 0,
            jumps: Box::default(),
            dnats: Box::default(),
        });
    }

    fn mark(&mut self, id: NameId, position: u32) {
        let id = id as usize;
        if self.at.len() <= id {
            self.at.resize(id + 1, NO_CHAIN);
        }
        self.at[id] = position;
    }

    /// Appends `rule` to the chain at `chain` (in place once [`Self::settle`] runs).
    pub fn push_rule(&mut self, chain: usize, rule: RuleIr<'_>) {
        self.chains[chain].rules += 1;
        if rule.nodeport_dispatch {
            let name = self.names.get(self.chains[chain].name);
            if !self.dispatch.iter().any(|d| **d == *name) {
                self.dispatch.push(name.into());
            }
        }
        if rule.jumps.is_empty() && rule.dnat.is_none() {
            return;
        }
        if self.staged.as_ref().is_some_and(|s| s.chain != chain) {
            self.unstage();
        }
        let staged = self.staged.get_or_insert_with(|| Staged {
            chain,
            jumps: Vec::new(),
            dnats: Vec::new(),
        });
        staged
            .jumps
            .extend(rule.jumps.iter().map(|j| self.names.intern(j)));
        if let Some(dnat) = rule.dnat {
            staged.dnats.push(KeptDnat {
                handle: rule.handle,
                dnat: *dnat,
            });
        }
    }

    /// Puts the staged rules in their chain, after those it holds.
    fn unstage(&mut self) {
        let Some(staged) = self.staged.take() else {
            return;
        };
        let chain = &mut self.chains[staged.chain];
        fn append<T>(held: &mut Box<[T]>, more: Vec<T>) {
            if more.is_empty() {
                return;
            }
            let mut all = std::mem::take(held).into_vec();
            all.extend(more);
            *held = all.into_boxed_slice();
        }
        append(&mut chain.jumps, staged.jumps);
        append(&mut chain.dnats, staged.dnats);
    }

    /// Begins an update after a change that named the chains `changed` (their rules
    /// changed, or they are new or gone) and, when the chain list changed, gave the
    /// kernel's new `list`: the chains whose rules are to be read again are emptied and
    /// their positions returned, in the table's order. Their rules then go in by
    /// [`Self::push_rule`], and [`Self::settle`] ends the update.
    pub fn begin_update(
        &mut self,
        changed: &FxHashSet<Box<str>>,
        list: Option<Vec<String>>,
    ) -> Result<Vec<usize>, UpdateError> {
        if let Some(names) = list {
            // A renamed chain is notified under its new name only; the rules that jump
            // to it, kept, would still name the old one.
            return Ok(self.relist(names, |name| changed.contains(name))?);
        }
        let mut reread = Vec::with_capacity(changed.len());
        for name in changed {
            let Some(at) = self.find_chain(name) else {
                return Err(UpdateError::NotKept(name.to_string()));
            };
            self.clear_rules(at);
            reread.push(at);
        }
        reread.sort_unstable();
        Ok(reread)
    }

    /// Forgets the rules of the chain at `chain`, which are read again.
    pub(crate) fn clear_rules(&mut self, chain: usize) {
        if self.staged.as_ref().is_some_and(|s| s.chain == chain) {
            self.staged = None;
        }
        let name = self.names.get(self.chains[chain].name);
        self.dispatch.retain(|d| **d != *name);
        let chain = &mut self.chains[chain];
        chain.rules = 0;
        chain.jumps = Box::default();
        chain.dnats = Box::default();
    }

    /// Appends a map read from the kernel.
    pub fn push_map_ir(&mut self, map: MapIr<'_>) {
        if is_nodeport_map(&map.name) {
            self.maps.push(KeptMap::NodePorts(map.into_owned()));
            return;
        }
        let jumps = map
            .elements
            .iter()
            .filter_map(|e| e.verdict.chain())
            .map(|c| self.names.intern(c))
            .collect();
        self.maps.push(KeptMap::Other {
            name: map.name.as_ref().into(),
            elements: map.elements.len(),
            jumps,
        });
    }

    /// Appends a map kept from before.
    pub fn push_map(&mut self, map: KeptMap) {
        self.maps.push(map);
    }

    /// The maps, taken to be put back (kept or read again) in the kernel's new order.
    pub fn take_maps(&mut self) -> Vec<KeptMap> {
        std::mem::take(&mut self.maps)
    }

    /// The kernel's chain list `names`, in its order: chains kept stay (with their
    /// rules), unless `changed` names them; the others are new and empty. Returns the
    /// positions of the chains whose rules are to be read, or the kept chain that left
    /// the list without `changed` naming it (renamed: the rules that jump to it would
    /// still name the old one).
    pub(crate) fn relist(
        &mut self,
        names: Vec<String>,
        changed: impl Fn(&str) -> bool,
    ) -> Result<Vec<usize>, Unlisted> {
        self.unstage();
        let positions: Vec<Option<usize>> = names.iter().map(|n| self.find_chain(n)).collect();
        let mut listed = vec![false; self.chains.len()];
        for &at in positions.iter().flatten() {
            listed[at] = true;
        }
        if let Some((gone, _)) = self
            .chains
            .iter()
            .zip(&listed)
            .find(|(c, listed)| !**listed && !changed(self.names.get(c.name)))
        {
            return Err(Unlisted(self.names.get(gone.name).to_string()));
        }
        let mut old: Vec<Option<KeptChain>> =
            std::mem::take(&mut self.chains).into_iter().map(Some).collect();
        for c in old.iter().flatten() {
            self.at[c.name as usize] = NO_CHAIN;
        }
        self.chains.reserve_exact(names.len());
        let mut reread = Vec::new();
        for (name, at) in names.iter().zip(positions) {
            match at.and_then(|at| old[at].take()) {
                Some(chain) if !changed(name) => {
                    self.mark(chain.name, self.chains.len() as u32);
                    self.chains.push(chain);
                }
                _ => {
                    reread.push(self.chains.len());
                    // Its rules are read again, the NodePort dispatch among them or not.
                    self.dispatch.retain(|d| **d != **name);
                    self.push_chain(name);
                }
            }
        }
        Ok(reread)
    }

    /// Ends an update: the rules read are put in their chains, and the names nothing
    /// uses any more are dropped once they are most of those held (new endpoint chains
    /// bring new names). The builder reads the table only after this.
    pub fn settle(&mut self) {
        self.unstage();
        if self.names.len() > 2 * self.chains.len() + 1024 {
            self.renumber();
        }
    }

    /// Interns again only the names in use.
    fn renumber(&mut self) {
        let old = std::mem::take(&mut self.names);
        self.at.clear();
        let new_id = |id: NameId, names: &mut Names| names.intern_shared(old.shared(id));
        for position in 0..self.chains.len() {
            let id = new_id(self.chains[position].name, &mut self.names);
            self.chains[position].name = id;
            self.mark(id, position as u32);
            for jump in self.chains[position].jumps.iter_mut() {
                *jump = new_id(*jump, &mut self.names);
            }
        }
        for map in &mut self.maps {
            if let KeptMap::Other { jumps, .. } = map {
                for jump in jumps.iter_mut() {
                    *jump = new_id(*jump, &mut self.names);
                }
            }
        }
    }

    /// The heap it holds, about.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        // An Arc's text with its two counts, once per DNAT (findings share it).
        let dnat = |d: &KeptDnat| size_of::<KeptDnat>() + d.dnat.text.len() + 2 * size_of::<usize>();
        let chains = self.chains.capacity() * size_of::<KeptChain>()
            + self
                .chains
                .iter()
                .map(|c| c.jumps.len() * size_of::<NameId>() + c.dnats.iter().map(dnat).sum::<usize>())
                .sum::<usize>();
        let maps = self
            .maps
            .iter()
            .map(|m| match m {
                KeptMap::NodePorts(map) => map
                    .elements
                    .iter()
                    .map(|e| {
                        size_of::<super::ir::ElementIr<'_>>()
                            + e.key.capacity()
                            + e.comment.as_ref().map_or(0, |c| c.len())
                            + e.verdict.chain().map_or(0, str::len)
                    })
                    .sum::<usize>(),
                KeptMap::Other { name, jumps, .. } => name.len() + jumps.capacity() * 4,
            })
            .sum::<usize>();
        self.names.heap_bytes() + self.at.capacity() * 4 + chains + maps
    }

    /// The table's own `Arc` of the name `name`, when a chain or a jump has it, for
    /// what is kept beside the table to share.
    pub fn shared_name(&self, name: &str) -> Option<Arc<str>> {
        self.names.find(name).map(|id| self.names.shared(id).clone())
    }

    fn jump(&self, id: NameId) -> Jump<'_> {
        match self.at.get(id as usize) {
            Some(&at) if at != NO_CHAIN => Ok(at as usize),
            _ => Err(self.names.get(id)),
        }
    }
}

impl RuleGraph for KeptTable {
    fn family(&self) -> Family {
        self.family
    }

    fn chain_count(&self) -> usize {
        self.chains.len()
    }

    fn chain_name(&self, chain: usize) -> &str {
        self.names.get(self.chains[chain].name)
    }

    fn chain_line(&self, _chain: usize) -> u32 {
        0
    }

    fn shared_chain_name(&self, chain: usize) -> Arc<str> {
        self.names.shared(self.chains[chain].name).clone()
    }

    fn find_chain(&self, name: &str) -> Option<usize> {
        self.jump(self.names.find(name)?).ok()
    }

    fn dnats(&self, chain: usize) -> impl Iterator<Item = DnatRule<'_>> {
        self.chains[chain].dnats.iter().map(|d| DnatRule {
            handle: d.handle,
            line: 0,
            dnat: &d.dnat,
        })
    }

    fn jumps(&self, chain: usize) -> impl Iterator<Item = Jump<'_>> {
        self.chains[chain].jumps.iter().map(|&id| self.jump(id))
    }

    fn rule_count(&self) -> usize {
        self.chains.iter().map(|c| c.rules as usize).sum()
    }

    fn nodeport_dispatch(&self) -> impl Iterator<Item = usize> {
        self.dispatch.iter().filter_map(|name| self.find_chain(name))
    }

    fn nodeport_maps(&self) -> impl Iterator<Item = &MapIr<'_>> {
        self.maps.iter().filter_map(|m| match m {
            KeptMap::NodePorts(map) => Some(map),
            KeptMap::Other { .. } => None,
        })
    }

    fn element_count(&self) -> usize {
        self.maps
            .iter()
            .map(|m| match m {
                KeptMap::NodePorts(map) => map.elements.len(),
                KeptMap::Other { elements, .. } => *elements,
            })
            .sum()
    }

    fn element_jumps(&self) -> impl Iterator<Item = Jump<'_>> {
        self.maps.iter().flat_map(|m| {
            let (nodeports, others) = match m {
                KeptMap::NodePorts(map) => (Some(map), &[][..]),
                KeptMap::Other { jumps, .. } => (None, &jumps[..]),
            };
            let nodeports = nodeports
                .into_iter()
                .flat_map(|m| &m.elements)
                .filter_map(|e| e.verdict.chain())
                .map(|c| jump_to(self, c));
            nodeports.chain(others.iter().map(|&id| self.jump(id)))
        })
    }

    fn unparsed(&self) -> &[Unparsed] {
        &[]
    }

    fn complete(&self) -> bool {
        true
    }

    fn notes(&self) -> &[String] {
        &self.notes
    }
}

#[cfg(test)]
mod tests;
