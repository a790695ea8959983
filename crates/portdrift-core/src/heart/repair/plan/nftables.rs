//! Planning on nftables: NodePort map elements, orphaned per-service chains by rule
//! handle, and the chains those deletions leave unreferenced.

use std::collections::{BTreeSet, HashSet};

use super::refusals::{KUBERNETES_SERVICE, PER_SERVICE_DNAT, names_kubernetes, owners};
use super::{Op, Planned, Planner, RepairAction, describe_finding};
use crate::heart::finding::{Finding, Kind};
use crate::heart::kube_proxy;
use crate::heart::model::{Backend, Family};
use crate::heart::repair::nft_table::TableView;

/// kube-proxy's nftables maps whose elements dispatch NodePorts.
const NFT_NODEPORT_MAPS: [&str; 2] = ["service-nodeports", "no-endpoint-nodeports"];

#[derive(Debug, Default)]
pub(super) struct NftDeletions {
    elements: HashSet<(String, String)>,
    chains: BTreeSet<String>,
    leads: Vec<String>,
}

impl Planner<'_> {
    pub(super) fn nft_finding(&mut self, f: &Finding, family: Family, rule: &str) -> Planned {
        let Some(table) = self.ctx.rulesets.nftables.get(&family) else {
            return Err(format!("nftables {family} was not read again before repair"));
        };
        if !table.complete {
            return Err(format!("the fresh read of nftables {family} is incomplete"));
        }
        if f.kind == Kind::OrphanChain {
            let chain = rule.strip_prefix(':').unwrap_or(rule);
            return self.nft_orphan(f, family, table, chain);
        }
        if f.kind == Kind::StaleEndpoint {
            return Err(PER_SERVICE_DNAT.into());
        }
        let found = table
            .maps
            .iter()
            .filter(|m| NFT_NODEPORT_MAPS.contains(&m.name.as_str()))
            .find_map(|m| m.elements.iter().find(|e| e.text == rule).map(|e| (m, e)));
        let Some((map, element)) = found else {
            return Err("the map element is no longer in the table".into());
        };
        if !element
            .key
            .split(" . ")
            .all(|w| w.bytes().all(|b| b.is_ascii_alphanumeric()))
        {
            return Err(format!(
                "the element key {:?} is not `protocol . port`",
                element.key
            ));
        }
        let named = element
            .chain
            .as_deref()
            .and_then(kube_proxy::parse_nft_service_chain);
        if names_kubernetes(rule)
            || named
                .as_ref()
                .is_some_and(|(s, _)| s.service() == KUBERNETES_SERVICE)
        {
            return Err("the element belongs to default/kubernetes".into());
        }
        if let (Some((svc, protocol)), Some(port)) = (&named, f.port)
            && owners(self.ctx.desired, *protocol, port, family).any(|o| &o.service == svc)
        {
            return Err(format!(
                "the element leads to the chains of {}, which owns the port: the desired state explains it",
                svc.service()
            ));
        }
        let deleted = self.nft_deleted.entry(family).or_default();
        if !deleted.elements.insert((map.name.clone(), element.key.clone())) {
            let key = element.key.clone();
            return self.add_reason(
                Backend::Nftables,
                family,
                |op| matches!(op, Op::NftDeleteElement { key: k, .. } if *k == key),
                f,
            );
        }
        if let Some(chain) = element.chain.as_deref().filter(|c| c.contains('/')) {
            deleted.leads.push(chain.to_string());
        }
        self.plan.actions.push(RepairAction {
            backend: Backend::Nftables,
            family,
            op: Op::NftDeleteElement {
                table: table.table,
                map: map.name.clone(),
                key: element.key.clone(),
                text: element.text.clone(),
            },
            reasons: vec![describe_finding(f)],
        });
        Ok(())
    }

    fn nft_orphan(&mut self, f: &Finding, family: Family, table: &TableView, chain: &str) -> Planned {
        if !chain.contains('/') {
            return Err("not one of kube-proxy's per-service chains".into());
        }
        if kube_proxy::parse_nft_service_chain(chain).is_some_and(|(s, _)| s.service() == KUBERNETES_SERVICE)
        {
            return Err("the chain belongs to default/kubernetes".into());
        }
        let deleted = self.nft_deleted.entry(family).or_default();
        if nft_references(table, chain, deleted) > 0 {
            return Err("a rule or map element still jumps to it".into());
        }
        let op = nft_delete_chain(table, chain, deleted)?;
        self.plan.actions.push(RepairAction {
            backend: Backend::Nftables,
            family,
            op,
            reasons: vec![describe_finding(f)],
        });
        Ok(())
    }

    /// The nftables half of the cascade: per-service chains the deletions leave unreferenced.
    pub(super) fn cascade_nftables(&mut self) {
        let nft = std::mem::take(&mut self.nft_deleted);
        for (family, mut deleted) in nft {
            let Some(table) = self.ctx.rulesets.nftables.get(&family) else {
                continue;
            };
            let mut at = 0;
            while at < deleted.leads.len() {
                let chain = deleted.leads[at].clone();
                at += 1;
                if deleted.chains.contains(&chain) || table.chain(&chain).is_none() {
                    continue;
                }
                if kube_proxy::parse_nft_service_chain(&chain)
                    .is_some_and(|(s, _)| s.service() == KUBERNETES_SERVICE)
                {
                    continue;
                }
                if nft_references(table, &chain, &deleted) > 0 {
                    continue;
                }
                if let Ok(op) = nft_delete_chain(table, &chain, &mut deleted) {
                    self.plan.actions.push(RepairAction {
                        backend: Backend::Nftables,
                        family,
                        op,
                        reasons: vec!["nothing jumps to it once the stale elements above are gone".into()],
                    });
                }
            }
        }
    }
}

/// References to an nftables chain that this plan does not delete.
fn nft_references(table: &TableView, chain: &str, deleted: &NftDeletions) -> usize {
    let from_rules = table
        .chains
        .iter()
        .filter(|c| !deleted.chains.contains(&c.name))
        .flat_map(|c| c.rules.iter())
        .filter(|r| r.jumps.iter().any(|j| j == chain))
        .count();
    let from_elements = table
        .maps
        .iter()
        .flat_map(|m| m.elements.iter().map(move |e| (m, e)))
        .filter(|(m, e)| {
            e.chain.as_deref() == Some(chain) && !deleted.elements.contains(&(m.name.clone(), e.key.clone()))
        })
        .count();
    from_rules + from_elements
}

fn nft_delete_chain(table: &TableView, chain: &str, deleted: &mut NftDeletions) -> Result<Op, String> {
    let c = table.chain(chain).ok_or("the chain is no longer in the table")?;
    if !nft_name_is_safe(chain) {
        return Err(format!(
            "the chain name {chain:?} has characters repair will not put in a script"
        ));
    }
    let handles: Option<Vec<u64>> = c.rules.iter().map(|r| r.handle).collect();
    let handles = handles.ok_or("a rule of the chain has no handle")?;
    deleted.chains.insert(chain.to_string());
    for r in &c.rules {
        deleted
            .leads
            .extend(r.jumps.iter().filter(|j| j.contains('/')).cloned());
    }
    Ok(Op::NftDeleteChain {
        table: table.table,
        chain: chain.to_string(),
        handles,
    })
}

/// kube-proxy's nftables chain names: letters, digits and `-_./` (an IPv6 endpoint's
/// colons become dots).
fn nft_name_is_safe(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
}
