//! Findings → repair actions. Pure: the findings of a scan, the cluster state and a
//! fresh read of each backend's whole ruleset in, a list of exact actions out.
//!
//! Each action names one exact kernel object (an iptables rule by table, chain and
//! full rule spec; an orphaned kube-proxy chain with every rule it holds; an nftables
//! map element by key; an nftables chain with the handles of its rules), or the
//! gentler nudge: deleting kube-proxy's canary so that a live kube-proxy resyncs and
//! cleans up after itself.
//!
//! What is never planned, whatever a finding says (each refusal says why):
//! - anything the desired state explains: a rule that leads to the chains of the
//!   Service that owns its port now, a DNAT to an address its EndpointSlices list;
//! - a chain that any rule not being deleted still jumps to;
//! - a flush: a chain is removed rule by rule, by full spec, and then deleted, so
//!   the kernel refuses the whole step if the chain holds anything unplanned;
//! - anything outside kube-proxy's chains (its dispatch chains `KUBE-NODEPORTS`,
//!   `KUBE-EXTERNAL-SERVICES`, `KUBE-SERVICES`, and its hashed per-service chains) in
//!   the nat and filter tables, or outside its nftables tables;
//! - a single DNAT inside kube-proxy's per-service chains: removing one endpoint from
//!   a `KUBE-SVC-*` rotation would skew or break it; kube-proxy's resync (the nudge),
//!   or removing the whole stale path, is the repair;
//! - anything of `default/kubernetes`, the API server's own Service: breaking it cuts
//!   this agent (and every other) off from the API.

mod commands;
mod iptables;
mod nftables;
mod refusals;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::heart::desired::DesiredState;
use crate::heart::finding::{Finding, Kind};
use crate::heart::model::{Backend, Family};
use crate::heart::repair::nft_table::TableView;
use crate::heart::repair::ruleset::IptablesRuleset;
use iptables::IptDeletions;
use nftables::NftDeletions;
use refusals::KUBERNETES_SERVICE;

/// The finding kinds repair acts on.
pub const REPAIRABLE: [Kind; 5] = [
    Kind::StaleNodeport,
    Kind::StaleEndpoint,
    Kind::DuplicateRule,
    Kind::BackendSplit,
    Kind::OrphanChain,
];

/// Fresh reads of the backends the findings name.
#[derive(Debug, Clone, Default)]
pub struct RepairRulesets {
    pub iptables: BTreeMap<(Backend, Family), IptablesRuleset>,
    pub nftables: BTreeMap<Family, TableView>,
}

/// What planning needs besides the findings.
#[derive(Debug, Clone, Copy)]
pub struct PlanContext<'a> {
    pub desired: &'a DesiredState,
    pub rulesets: &'a RepairRulesets,
    /// iptables backends a live, healthy kube-proxy writes, where a nudge (deleting its
    /// canary) has not yet been tried in vain: drift there is left to kube-proxy.
    pub nudge: &'a BTreeSet<(Backend, Family)>,
}

/// One exact change to the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `-D <chain> <spec>` in `table`.
    IptDeleteRule {
        table: String,
        chain: String,
        rule: String,
    },
    /// `-D <chain> <spec>` for every rule, then `-X <chain>`.
    IptDeleteChain {
        table: String,
        chain: String,
        rules: Vec<String>,
    },
    /// `-X KUBE-PROXY-CANARY` in each table holding it: kube-proxy resyncs in full.
    IptDeleteCanary { tables: Vec<String> },
    /// `delete element <table> <map> { <key> }`.
    NftDeleteElement {
        table: &'static str,
        map: String,
        key: String,
        /// The element as listed, for the record.
        text: String,
    },
    /// `delete rule <table> <chain> handle <h>` for every rule, then `delete chain`.
    NftDeleteChain {
        table: &'static str,
        chain: String,
        handles: Vec<u64>,
    },
}

/// One planned change, with the findings it repairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairAction {
    pub backend: Backend,
    pub family: Family,
    pub op: Op,
    /// The findings this repairs (`kind port service`), or why a chain goes with them.
    pub reasons: Vec<String>,
}

/// A finding repair will not act on, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub finding: String,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairPlan {
    pub actions: Vec<RepairAction>,
    pub refused: Vec<Refusal>,
}

/// A finding as logs and refusals name it.
pub fn describe_finding(f: &Finding) -> String {
    let mut s = f.kind.to_string();
    if let (Some(p), Some(port)) = (f.protocol, f.port) {
        let _ = write!(s, " {p}/{port}");
    }
    if let Some(b) = f.backend {
        let _ = write!(s, " {b}");
    }
    if let Some(fam) = f.family {
        let _ = write!(s, " {fam}");
    }
    if let Some(svc) = &f.service {
        let _ = write!(s, " {svc}");
    }
    if let Some(t) = &f.target {
        let _ = write!(s, " → {t}");
    }
    s
}

/// Plans the repair of `findings` (already confirmed and outside the grace window).
pub fn plan(findings: &[&Finding], ctx: PlanContext<'_>) -> RepairPlan {
    let mut planner = Planner {
        ctx,
        plan: RepairPlan::default(),
        ipt_deleted: BTreeMap::new(),
        nft_deleted: BTreeMap::new(),
        nudged: BTreeSet::new(),
    };
    for f in findings {
        if let Err(reason) = planner.finding(f) {
            planner.plan.refused.push(Refusal {
                finding: describe_finding(f),
                reason,
            });
        }
    }
    planner.cascade();
    planner.plan
}

struct Planner<'a> {
    ctx: PlanContext<'a>,
    plan: RepairPlan,
    ipt_deleted: BTreeMap<(Backend, Family, String), IptDeletions>,
    nft_deleted: BTreeMap<Family, NftDeletions>,
    nudged: BTreeSet<(Backend, Family)>,
}

type Planned = Result<(), String>;

impl Planner<'_> {
    fn finding(&mut self, f: &Finding) -> Planned {
        if !REPAIRABLE.contains(&f.kind) {
            return Err("repair does not act on this kind".into());
        }
        if f.on_stale_cluster_state {
            return Err("drawn from a cluster state that is not current".into());
        }
        if f.pending_seconds.is_some() {
            return Err("the Service changed within the grace window".into());
        }
        if let Some(a) = &f.accepted {
            return Err(format!("accepted as an exception ({})", a.reason));
        }
        if f.service.as_deref() == Some(KUBERNETES_SERVICE) {
            return Err("the API server's own Service (default/kubernetes) is never touched".into());
        }
        let (Some(backend), Some(family)) = (f.backend, f.family) else {
            // Findings in Cilium's maps or IPVS have no netfilter backend: their owner
            // fixes them, not portdrift.
            return Err(
                "the finding names no netfilter backend (Cilium's maps and IPVS are never written: restart the agent that owns them)"
                    .into(),
            );
        };
        let Some(rule) = f.rule.as_deref() else {
            return Err("the finding names no rule".into());
        };
        if backend == Backend::Nftables {
            return self.nft_finding(f, family, rule);
        }
        let Some(rs) = self.ctx.rulesets.iptables.get(&(backend, family)) else {
            return Err(format!("{backend} {family} was not read again before repair"));
        };
        if !rs.complete() {
            return Err(format!(
                "the fresh read of {backend} {family} is incomplete ({})",
                rs.problems.join("; ")
            ));
        }
        if self.ctx.nudge.contains(&(backend, family)) && f.kind != Kind::BackendSplit {
            return self.nudge(f, backend, family, rs);
        }
        if f.kind == Kind::OrphanChain {
            let chain = rule.strip_prefix(':').unwrap_or(rule);
            return self.ipt_orphan(f, backend, family, rs, chain);
        }
        self.ipt_rule(f, backend, family, rs, rule)
    }

    /// Leaves the drift to the live kube-proxy: one canary deletion per backend.
    fn nudge(&mut self, f: &Finding, backend: Backend, family: Family, rs: &IptablesRuleset) -> Planned {
        let tables: Vec<String> = rs.canary_tables().into_iter().map(str::to_string).collect();
        if tables.is_empty() {
            return Err("kube-proxy's canary is gone already; waiting for its resync".into());
        }
        if self.nudged.insert((backend, family)) {
            self.plan.actions.push(RepairAction {
                backend,
                family,
                op: Op::IptDeleteCanary { tables },
                reasons: vec![describe_finding(f)],
            });
        } else if let Some(a) = self.plan.actions.iter_mut().find(|a| {
            a.backend == backend && a.family == family && matches!(a.op, Op::IptDeleteCanary { .. })
        }) {
            a.reasons.push(describe_finding(f));
        }
        Ok(())
    }

    fn add_reason(
        &mut self,
        backend: Backend,
        family: Family,
        same: impl Fn(&Op) -> bool,
        f: &Finding,
    ) -> Planned {
        if let Some(a) = self
            .plan
            .actions
            .iter_mut()
            .find(|a| a.backend == backend && a.family == family && same(&a.op))
        {
            a.reasons.push(describe_finding(f));
        }
        Ok(())
    }

    /// Chains that the planned deletions leave with no referrer go too, if they are
    /// kube-proxy's per-service chains: a deleted Service's NodePort rule takes its
    /// `KUBE-EXT-*` chain with it, and so on down, but a `KUBE-SVC-*` chain that a
    /// cluster-IP rule still uses stays.
    fn cascade(&mut self) {
        self.cascade_iptables();
        self.cascade_nftables();
    }
}

#[cfg(test)]
mod tests;
