//! orphan-chain: kube-proxy chains no Service owns.

use std::collections::HashMap;

use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::kube_proxy::{self, Naming};
use crate::heart::model::{Family, RuleDump};

use super::attribution::{DesiredIndex, hash_key};
use super::builders::set_service;

pub(super) fn orphan_chains(source: &RuleDump, index: &DesiredIndex<'_>, out: &mut Vec<Finding>) {
    // An orphan is the absence of a jump, which a partial dump cannot show.
    if source.orphans.is_empty() || !source.complete {
        return;
    }
    let endpoint_hashes = endpoint_hash_index(index, source.family, &source.orphans);
    let mut budget = ORPHAN_HASH_BUDGET;
    for orphan in &source.orphans {
        let owner = owner_of_chain(orphan, index, &endpoint_hashes, &mut budget);
        let mut f = Finding::new(
            Kind::OrphanChain,
            Severity::Info,
            format!(
                "Chain {} in {} is no longer referenced by any rule; kube-proxy deletes such leftovers lazily, so it is harmless unless it persists across syncs.",
                orphan.chain, source.backend
            ),
        );
        f.family = Some(source.family);
        f.backend = Some(source.backend);
        f.rule = Some(format!(":{}", orphan.chain));
        f.rule_source = Some(source.cite_chain(&orphan.table, &orphan.chain, orphan.line));
        if let Some(i) = owner {
            let desired = index.port(i);
            f.protocol = Some(desired.protocol);
            f.port = Some(desired.node_port);
            set_service(&mut f, &desired.service);
        }
        out.push(f);
    }
}

/// `KUBE-SEP-` hashes of every listed endpoint, computed only when a source has
/// orphan endpoint chains to attribute.
pub(super) fn endpoint_hash_index(
    index: &DesiredIndex<'_>,
    family: Family,
    orphans: &[crate::heart::model::OrphanChain],
) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    if !orphans.iter().any(|o| o.chain.starts_with("KUBE-SEP-")) {
        return out;
    }
    for (i, p) in index.state.ports.iter().enumerate() {
        if let Some(eps) = p.endpoints(family) {
            for addr in &eps.listed {
                for naming in Naming::ALL.into_iter().filter(|n| n.applies_to(&p.service)) {
                    out.insert(
                        kube_proxy::endpoint_chain_hash_as(&p.service, p.protocol, &addr, naming),
                        i,
                    );
                }
            }
        }
    }
    out
}

/// How many endpoint-chain hashes may be computed, in all, to attribute orphan
/// endpoint chains of deleted pods (each try is one sha256 per Service port): enough
/// for the leftovers of an ordinary rollout, bounded after a mass deletion.
pub(super) const ORPHAN_HASH_BUDGET: usize = 200_000;

pub(super) fn owner_of_chain(
    orphan: &crate::heart::model::OrphanChain,
    index: &DesiredIndex<'_>,
    endpoint_hashes: &HashMap<String, usize>,
    budget: &mut usize,
) -> Option<usize> {
    let chain = orphan.chain.as_str();
    if let Some(hash) = kube_proxy::chain_hash(chain) {
        if !chain.starts_with("KUBE-SEP-") {
            return hash_key(hash).and_then(|k| index.by_hash.get(&k)).copied();
        }
        if let Some(&i) = endpoint_hashes.get(hash) {
            return Some(i);
        }
        // The pod is gone from the API, but the chain still DNATs to it: the name is
        // the hash of (Service port, protocol, that address), so try each Service port.
        let dnat = orphan.dnat?;
        let ports = index.state.ports.len();
        if *budget < ports {
            return None;
        }
        *budget -= ports;
        return index.state.ports.iter().position(|p| {
            Naming::ALL
                .into_iter()
                .filter(|n| n.applies_to(&p.service))
                .any(|n| kube_proxy::endpoint_chain_hash_as(&p.service, p.protocol, &dnat, n) == hash)
        });
    }
    let (svc, protocol) = kube_proxy::parse_nft_service_chain(chain)?;
    index.by_name.get(&(&svc, protocol)).copied()
}
