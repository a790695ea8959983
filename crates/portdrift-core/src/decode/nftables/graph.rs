//! What building [`RuleDump`](crate::heart::model::RuleDump)s needs of a kube-proxy
//! table: its chains as a graph of jumps with the DNATs they hold, and its maps. Both
//! forms of a table give it: the intermediate form a dump is decoded into ([`TableIr`])
//! and the small form a following reader keeps between reads
//! ([`KeptTable`](super::kept::KeptTable)), so one builder serves both.

use std::sync::Arc;

use super::ir::{DnatIr, MapIr, TableIr};
use crate::heart::model::{Family, Unparsed};

/// Where a jump goes: a chain of the table (its position), or a name no chain has.
pub(crate) type Jump<'g> = Result<usize, &'g str>;

/// A rule that holds a DNAT, as a [`DnatTarget`](crate::heart::model::DnatTarget) needs it.
pub struct DnatRule<'g> {
    pub(crate) handle: Option<u64>,
    pub(crate) line: u32,
    pub(crate) dnat: &'g DnatIr,
}

/// A kube-proxy table as the builder reads it. Chains are named by their position.
pub trait RuleGraph {
    fn family(&self) -> Family;
    fn chain_count(&self) -> usize;
    fn chain_name(&self, chain: usize) -> &str;
    fn chain_line(&self, chain: usize) -> u32;
    /// The chain's name as an `Arc` for the rule sources to hold: the graph's own when it
    /// keeps one, so that the name is not copied.
    fn shared_chain_name(&self, chain: usize) -> Arc<str> {
        Arc::from(self.chain_name(chain))
    }
    fn find_chain(&self, name: &str) -> Option<usize>;
    /// The DNAT rules of `chain`, in rule order.
    fn dnats(&self, chain: usize) -> impl Iterator<Item = DnatRule<'_>>;
    /// The jumps of `chain`'s rules, in rule order.
    fn jumps(&self, chain: usize) -> impl Iterator<Item = Jump<'_>>;
    /// The rules of every chain.
    fn rule_count(&self) -> usize;
    /// The chains holding a rule that dispatches NodePorts (`vmap @service-nodeports`).
    fn nodeport_dispatch(&self) -> impl Iterator<Item = usize>;
    /// The maps whose elements are NodePorts (`service-nodeports`,
    /// `no-endpoint-nodeports`), in the table's order.
    fn nodeport_maps(&self) -> impl Iterator<Item = &MapIr<'_>>;
    /// The elements of every map.
    fn element_count(&self) -> usize;
    /// Where every map element's verdict goes, when it names a chain.
    fn element_jumps(&self) -> impl Iterator<Item = Jump<'_>>;
    fn unparsed(&self) -> &[Unparsed];
    /// False when the dump ended inside this table.
    fn complete(&self) -> bool;
    fn notes(&self) -> &[String];
}

/// A jump to the chain called `name`, as a rule or element naming it makes.
pub(crate) fn jump_to<'n>(graph: &impl RuleGraph, name: &'n str) -> Jump<'n> {
    graph.find_chain(name).ok_or(name)
}

/// Whether `name` is one of the two maps whose elements are NodePorts.
pub(crate) fn is_nodeport_map(name: &str) -> bool {
    name == super::SERVICE_NODEPORTS_MAP || name == super::NO_ENDPOINT_NODEPORTS_MAP
}

impl RuleGraph for TableIr<'_> {
    fn family(&self) -> Family {
        self.family
    }

    fn chain_count(&self) -> usize {
        self.chains.len()
    }

    fn chain_name(&self, chain: usize) -> &str {
        &self.chains[chain].name
    }

    fn chain_line(&self, chain: usize) -> u32 {
        self.chains[chain].line
    }

    fn find_chain(&self, name: &str) -> Option<usize> {
        self.chain_position_of(name)
    }

    fn dnats(&self, chain: usize) -> impl Iterator<Item = DnatRule<'_>> {
        self.chains[chain].rules.iter().filter_map(|r| {
            r.dnat.as_deref().map(|dnat| DnatRule {
                handle: r.handle,
                line: r.line,
                dnat,
            })
        })
    }

    fn jumps(&self, chain: usize) -> impl Iterator<Item = Jump<'_>> {
        self.chains[chain]
            .rules
            .iter()
            .flat_map(|r| r.jumps.iter())
            .map(|j| jump_to(self, j))
    }

    fn rule_count(&self) -> usize {
        self.chains.iter().map(|c| c.rules.len()).sum()
    }

    fn nodeport_dispatch(&self) -> impl Iterator<Item = usize> {
        (0..self.chains.len()).filter(|&c| self.chains[c].rules.iter().any(|r| r.nodeport_dispatch))
    }

    fn nodeport_maps(&self) -> impl Iterator<Item = &MapIr<'_>> {
        self.maps.iter().filter(|m| is_nodeport_map(&m.name))
    }

    fn element_count(&self) -> usize {
        self.maps.iter().map(|m| m.elements.len()).sum()
    }

    fn element_jumps(&self) -> impl Iterator<Item = Jump<'_>> {
        self.maps
            .iter()
            .flat_map(|m| m.elements.iter())
            .filter_map(|e| e.verdict.chain())
            .map(|c| jump_to(self, c))
    }

    fn unparsed(&self) -> &[Unparsed] {
        &self.unparsed
    }

    fn complete(&self) -> bool {
        self.complete
    }

    fn notes(&self) -> &[String] {
        &self.notes
    }
}
