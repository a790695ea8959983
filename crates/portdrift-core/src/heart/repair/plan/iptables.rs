//! Planning on iptables: single rules out of kube-proxy's dispatch chains, orphaned
//! per-service chains rule by rule, and the chains those deletions leave unreferenced.

use std::collections::{BTreeSet, HashSet};
use std::net::SocketAddr;

use super::refusals::{
    PER_SERVICE_DNAT, is_kubernetes_hash, kept_rule_present, names_kubernetes, owner_named_without_proof,
};
use super::{Op, Planned, Planner, RepairAction, describe_finding};
use crate::heart::finding::{Finding, Kind};
use crate::heart::kube_proxy;
use crate::heart::model::{Backend, Family};
use crate::heart::repair::ruleset::{IptTable, IptablesRuleset};

/// kube-proxy's iptables dispatch chains: the only chains a single rule is deleted from.
const IPT_DISPATCH_CHAINS: [&str; 3] = ["KUBE-NODEPORTS", "KUBE-EXTERNAL-SERVICES", "KUBE-SERVICES"];
/// The tables kube-proxy's NodePort rules live in.
const IPT_TABLES: [&str; 2] = ["nat", "filter"];

/// Rules (by chain and line) and chains an iptables table loses in this plan.
#[derive(Debug, Default)]
pub(super) struct IptDeletions {
    rules: HashSet<(String, String)>,
    chains: BTreeSet<String>,
    /// Chains the deleted objects jump to: candidates for the cascade, in order.
    leads: Vec<String>,
}

impl Planner<'_> {
    pub(super) fn ipt_rule(
        &mut self,
        f: &Finding,
        backend: Backend,
        family: Family,
        rs: &IptablesRuleset,
        line: &str,
    ) -> Planned {
        let places: Vec<(&IptTable, &str)> = rs.locate(line).map(|(t, c)| (t, c.name.as_str())).collect();
        let (table, chain) = match places[..] {
            [] => return Err("the rule is no longer in the ruleset".into()),
            [one] => one,
            _ => {
                return Err(
                    "the same rule sits in more than one chain; which one is meant is unclear".into(),
                );
            }
        };
        if f.kind == Kind::StaleEndpoint && kube_proxy::chain_hash(chain).is_some() {
            return Err(PER_SERVICE_DNAT.into());
        }
        if !IPT_TABLES.contains(&table.name.as_str()) || !IPT_DISPATCH_CHAINS.contains(&chain) {
            return Err(format!(
                "the rule sits in {} {chain}: repair deletes single rules only from kube-proxy's dispatch chains",
                table.name
            ));
        }
        let rule = table
            .chain(chain)
            .and_then(|c| c.rules.iter().find(|r| r.line == line))
            .ok_or("the rule is no longer in the ruleset")?;
        let target = rule.target.as_deref().unwrap_or("");
        if names_kubernetes(line) || kube_proxy::chain_hash(target).is_some_and(is_kubernetes_hash) {
            return Err("the rule belongs to default/kubernetes".into());
        }
        self.explained_by_owner(f, family, target)?;
        if f.kind == Kind::StaleNodeport {
            owner_named_without_proof(self.ctx.desired, f, family, line, || {
                dnat_destinations(table, target)
            })?;
        }
        match f.kind {
            Kind::StaleEndpoint if target != "DNAT" => {
                return Err(PER_SERVICE_DNAT.into());
            }
            Kind::DuplicateRule => kept_rule_present(f, table, chain, line)?,
            _ => {}
        }
        let key = (backend, family, table.name.clone());
        let deleted = self.ipt_deleted.entry(key).or_default();
        if !deleted.rules.insert((chain.to_string(), line.to_string())) {
            // Another finding named the same rule: one action repairs both.
            return self.add_reason(
                backend,
                family,
                |op| matches!(op, Op::IptDeleteRule { rule, .. } if rule == line),
                f,
            );
        }
        if kube_proxy::chain_hash(target).is_some() {
            deleted.leads.push(target.to_string());
        }
        self.plan.actions.push(RepairAction {
            backend,
            family,
            op: Op::IptDeleteRule {
                table: table.name.clone(),
                chain: chain.to_string(),
                rule: line.to_string(),
            },
            reasons: vec![describe_finding(f)],
        });
        Ok(())
    }

    pub(super) fn ipt_orphan(
        &mut self,
        f: &Finding,
        backend: Backend,
        family: Family,
        rs: &IptablesRuleset,
        chain: &str,
    ) -> Planned {
        let table = rs
            .tables
            .iter()
            .find(|t| IPT_TABLES.contains(&t.name.as_str()) && t.chain(chain).is_some())
            .ok_or("the chain is no longer in the ruleset")?;
        let hash = kube_proxy::chain_hash(chain).ok_or("not one of kube-proxy's per-service chains")?;
        if is_kubernetes_hash(hash) {
            return Err("the chain belongs to default/kubernetes".into());
        }
        let key = (backend, family, table.name.clone());
        let deleted = self.ipt_deleted.entry(key).or_default();
        if let Some((from, _)) = table.referrers(chain).find(|(c, r)| {
            !deleted.chains.contains(&c.name) && !deleted.rules.contains(&(c.name.clone(), r.line.clone()))
        }) {
            return Err(format!("{} still jumps to it", from.name));
        }
        let action =
            ipt_delete_chain(table, chain, deleted).ok_or("the chain is no longer in the ruleset")?;
        self.plan.actions.push(RepairAction {
            backend,
            family,
            op: action,
            reasons: vec![describe_finding(f)],
        });
        Ok(())
    }

    /// The iptables half of the cascade: per-service chains the deletions leave unreferenced.
    pub(super) fn cascade_iptables(&mut self) {
        let ipt = std::mem::take(&mut self.ipt_deleted);
        for ((backend, family, table_name), mut deleted) in ipt {
            let Some(table) = self
                .ctx
                .rulesets
                .iptables
                .get(&(backend, family))
                .and_then(|rs| rs.table(&table_name))
            else {
                continue;
            };
            let mut at = 0;
            while at < deleted.leads.len() {
                let chain = deleted.leads[at].clone();
                at += 1;
                let Some(hash) = kube_proxy::chain_hash(&chain) else {
                    continue;
                };
                if deleted.chains.contains(&chain)
                    || is_kubernetes_hash(hash)
                    || table.chain(&chain).is_none()
                {
                    continue;
                }
                let still_used = table.referrers(&chain).any(|(c, r)| {
                    !deleted.chains.contains(&c.name)
                        && !deleted.rules.contains(&(c.name.clone(), r.line.clone()))
                });
                if still_used {
                    continue;
                }
                if let Some(op) = ipt_delete_chain(table, &chain, &mut deleted) {
                    self.plan.actions.push(RepairAction {
                        backend,
                        family,
                        op,
                        reasons: vec!["no rule jumps to it once the stale rules above are gone".into()],
                    });
                }
            }
        }
    }
}

/// Every DNAT destination reachable from `chain` in `table` (each chain entered once).
fn dnat_destinations(table: &IptTable, chain: &str) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut queue = vec![chain];
    while let Some(name) = queue.pop() {
        let Some(c) = table.chain(name).filter(|_| seen.insert(name)) else {
            continue;
        };
        for r in &c.rules {
            match r.target.as_deref() {
                Some("DNAT") => out.extend(
                    r.line
                        .split_once("--to-destination ")
                        .and_then(|(_, d)| d.split(' ').next())
                        .and_then(|d| d.parse::<SocketAddr>().ok()),
                ),
                Some(next) => queue.push(next),
                None => {}
            }
        }
    }
    out
}

/// A chain's removal: its rules by spec, then the chain. Records what it removes and
/// where those rules led.
fn ipt_delete_chain(table: &IptTable, chain: &str, deleted: &mut IptDeletions) -> Option<Op> {
    let c = table.chain(chain)?;
    if c.builtin {
        return None;
    }
    deleted.chains.insert(chain.to_string());
    for r in &c.rules {
        deleted.rules.insert((chain.to_string(), r.line.clone()));
        if let Some(t) = r
            .target
            .as_deref()
            .filter(|t| kube_proxy::chain_hash(t).is_some())
        {
            deleted.leads.push(t.to_string());
        }
    }
    Some(Op::IptDeleteChain {
        table: table.name.clone(),
        chain: chain.to_string(),
        rules: c.rules.iter().map(|r| r.line.clone()).collect(),
    })
}
