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

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::net::SocketAddr;

use crate::heart::desired::DesiredState;
use crate::heart::finding::{Finding, Kind};
use crate::heart::kube_proxy;
use crate::heart::model::{Backend, Family, Protocol, ServicePortRef};
use crate::heart::repair::nft_table::TableView;

use crate::heart::repair::ruleset::{CANARY_CHAIN, IptTable, IptablesRuleset, iptables_tools, rule_spec};

/// The finding kinds repair acts on.
pub const REPAIRABLE: [Kind; 5] = [
    Kind::StaleNodeport,
    Kind::StaleEndpoint,
    Kind::DuplicateRule,
    Kind::BackendSplit,
    Kind::OrphanChain,
];

/// kube-proxy's iptables dispatch chains: the only chains a single rule is deleted from.
const IPT_DISPATCH_CHAINS: [&str; 3] = ["KUBE-NODEPORTS", "KUBE-EXTERNAL-SERVICES", "KUBE-SERVICES"];
/// The tables kube-proxy's NodePort rules live in.
const IPT_TABLES: [&str; 2] = ["nat", "filter"];
/// kube-proxy's nftables maps whose elements dispatch NodePorts.
const NFT_NODEPORT_MAPS: [&str; 2] = ["service-nodeports", "no-endpoint-nodeports"];

const PER_SERVICE_DNAT: &str = "the stale DNAT sits in kube-proxy's per-service chains: taking one endpoint out of a rotation would skew or break it; kube-proxy's resync (or the removal of the whole stale path) repairs it";

/// The API server's own Service, never touched.
const KUBERNETES_SERVICE: &str = "default/kubernetes";

/// Fresh reads of the backends the findings name.
#[derive(Debug, Clone, Default)]
pub struct Rulesets {
    pub iptables: BTreeMap<(Backend, Family), IptablesRuleset>,
    pub nftables: BTreeMap<Family, TableView>,
}

/// What planning needs besides the findings.
#[derive(Debug, Clone, Copy)]
pub struct PlanContext<'a> {
    pub desired: &'a DesiredState,
    pub rulesets: &'a Rulesets,
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
pub struct Action {
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
pub struct Plan {
    pub actions: Vec<Action>,
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
pub fn plan(findings: &[&Finding], ctx: PlanContext<'_>) -> Plan {
    let mut planner = Planner {
        ctx,
        plan: Plan::default(),
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

/// Rules (by chain and line) and chains an iptables table loses in this plan.
#[derive(Debug, Default)]
struct IptDeletions {
    rules: HashSet<(String, String)>,
    chains: BTreeSet<String>,
    /// Chains the deleted objects jump to: candidates for the cascade, in order.
    leads: Vec<String>,
}

#[derive(Debug, Default)]
struct NftDeletions {
    elements: HashSet<(String, String)>,
    chains: BTreeSet<String>,
    leads: Vec<String>,
}

struct Planner<'a> {
    ctx: PlanContext<'a>,
    plan: Plan,
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
        if f.service.as_deref() == Some(KUBERNETES_SERVICE) {
            return Err("the API server's own Service (default/kubernetes) is never touched".into());
        }
        let (Some(backend), Some(family)) = (f.backend, f.family) else {
            return Err("the finding names no backend".into());
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
            self.plan.actions.push(Action {
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

    fn ipt_rule(
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
        self.plan.actions.push(Action {
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

    /// Refuses a rule that leads to the chains of the Service owning its port now, or a
    /// DNAT to an address that Service lists.
    fn explained_by_owner(&self, f: &Finding, family: Family, target: &str) -> Planned {
        let (Some(protocol), Some(port)) = (f.protocol, f.port) else {
            return Ok(());
        };
        // kube-proxy's filter-table verdicts: a REJECT (no endpoints) or DROP (no local
        // endpoints) for a port a Service owns, an ACCEPT on a Service's health-check
        // port. The detector never calls these stale; repair does not trust that alone.
        if matches!(target, "REJECT" | "DROP")
            && let Some(owner) = owners(self.ctx.desired, protocol, port, family).next()
        {
            return Err(format!(
                "a {target} for a port {} owns: the desired state explains it",
                owner.service.service()
            ));
        }
        if target == "ACCEPT"
            && let Some(owner) = self.ctx.desired.ports.iter().find(|p| {
                p.health_check_node_port == Some(port) && protocol == Protocol::Tcp && p.in_family(family)
            })
        {
            return Err(format!(
                "the health-check port of {}: the desired state explains it",
                owner.service.service()
            ));
        }
        for owner in owners(self.ctx.desired, protocol, port, family) {
            let hash = kube_proxy::service_chain_hash(&owner.service, protocol);
            if kube_proxy::chain_hash(target) == Some(hash.as_str()) {
                return Err(format!(
                    "the rule leads to the chains of {}, which owns the port: the desired state explains it",
                    owner.service.service()
                ));
            }
            if let Some(addr) = f.target.as_deref().and_then(|t| t.parse::<SocketAddr>().ok())
                && f.kind == Kind::StaleEndpoint
                && owner.endpoints(family).is_some_and(|e| e.listed.contains(&addr))
            {
                return Err(format!("{addr} is an endpoint of {}", owner.service.service()));
            }
        }
        Ok(())
    }

    fn ipt_orphan(
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
        self.plan.actions.push(Action {
            backend,
            family,
            op: action,
            reasons: vec![describe_finding(f)],
        });
        Ok(())
    }

    fn nft_finding(&mut self, f: &Finding, family: Family, rule: &str) -> Planned {
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
        self.plan.actions.push(Action {
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
        self.plan.actions.push(Action {
            backend: Backend::Nftables,
            family,
            op,
            reasons: vec![describe_finding(f)],
        });
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
                    self.plan.actions.push(Action {
                        backend,
                        family,
                        op,
                        reasons: vec!["no rule jumps to it once the stale rules above are gone".into()],
                    });
                }
            }
        }
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
                    self.plan.actions.push(Action {
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

/// A duplicate is only removed while the copy that stays is still there.
fn kept_rule_present(f: &Finding, table: &IptTable, chain: &str, line: &str) -> Planned {
    let kept = f
        .evidence
        .iter()
        .find_map(|e| e.strip_prefix("kept rule: "))
        .ok_or("the finding does not say which copy stays")?;
    let copies = table
        .chain(chain)
        .map(|c| c.rules.iter().filter(|r| r.line == kept).count())
        .unwrap_or(0);
    let needed = if kept == line { 2 } else { 1 };
    if copies < needed {
        return Err("the copy that should stay is no longer there".into());
    }
    Ok(())
}

fn owners<'a>(
    desired: &'a DesiredState,
    protocol: Protocol,
    port: u16,
    family: Family,
) -> impl Iterator<Item = &'a crate::heart::desired::DesiredPort> + 'a {
    desired
        .ports
        .iter()
        .filter(move |p| p.protocol == protocol && p.node_port == port && p.in_family(family))
}

/// Whether a rule's text names the API server's Service in kube-proxy's comment form.
fn names_kubernetes(text: &str) -> bool {
    text.contains("\"default/kubernetes:")
        || text.contains("default/kubernetes ")
        || text.contains("/default/kubernetes/")
}

fn is_kubernetes_hash(hash: &str) -> bool {
    ["https", "http", ""].iter().any(|port| {
        let svc = ServicePortRef {
            namespace: "default".into(),
            name: "kubernetes".into(),
            port_name: (*port).into(),
        };
        [Protocol::Tcp, Protocol::Udp, Protocol::Sctp]
            .iter()
            .any(|&p| kube_proxy::service_chain_hash(&svc, p) == hash)
    })
}

// === the exact commands ===

impl Action {
    /// The program and arguments that apply this action (its script goes to stdin).
    pub fn program(&self) -> (&'static str, [&'static str; 2]) {
        match self.op {
            Op::IptDeleteRule { .. } | Op::IptDeleteChain { .. } | Op::IptDeleteCanary { .. } => {
                let restore = iptables_tools(self.backend, self.family)
                    .map(|(_, r)| r)
                    .unwrap_or("iptables-nft-restore");
                // --noflush: touch nothing but what the script names; -w: wait for the
                // xtables lock, as kube-proxy does.
                (restore, ["--noflush", "-w"])
            }
            Op::NftDeleteElement { .. } | Op::NftDeleteChain { .. } => ("nft", ["-f", "-"]),
        }
    }

    /// The script the program reads on stdin: one transaction.
    pub fn script(&self) -> String {
        let mut s = String::new();
        match &self.op {
            Op::IptDeleteRule { table, chain, rule } => {
                let _ = writeln!(s, "*{table}");
                let _ = writeln!(s, "-D {chain} {}", rule_spec(rule).unwrap_or(""));
                s.push_str("COMMIT\n");
            }
            Op::IptDeleteChain { table, chain, rules } => {
                let _ = writeln!(s, "*{table}");
                for r in rules {
                    let _ = writeln!(s, "-D {chain} {}", rule_spec(r).unwrap_or(""));
                }
                let _ = writeln!(s, "-X {chain}");
                s.push_str("COMMIT\n");
            }
            Op::IptDeleteCanary { tables } => {
                for t in tables {
                    let _ = writeln!(s, "*{t}\n-X {CANARY_CHAIN}\nCOMMIT");
                }
            }
            Op::NftDeleteElement { table, map, key, .. } => {
                let _ = writeln!(s, "delete element {table} {map} {{ {key} }}");
            }
            Op::NftDeleteChain {
                table,
                chain,
                handles,
            } => {
                for h in handles {
                    // nft 1.0 takes chain names bare (kube-proxy writes them so);
                    // `nft_name_is_safe` keeps them to characters that need no quoting.
                    let _ = writeln!(s, "delete rule {table} {chain} handle {h}");
                }
                let _ = writeln!(s, "delete chain {table} {chain}");
            }
        }
        s
    }

    /// The whole command, as a person would type it.
    pub fn command_line(&self) -> String {
        let (program, args) = self.program();
        format!("{program} {} <<'EOF'\n{}EOF", args.join(" "), self.script())
    }

    /// One line for logs: what goes.
    pub fn describe(&self) -> String {
        let on = format!("{} {}", self.backend, self.family);
        match &self.op {
            Op::IptDeleteRule { table, rule, .. } => format!("delete rule ({on} {table}): {rule}"),
            Op::IptDeleteChain { table, chain, rules } => {
                format!(
                    "delete chain {chain} ({on} {table}) and its {} rules",
                    rules.len()
                )
            }
            Op::IptDeleteCanary { tables } => format!(
                "nudge kube-proxy: delete {CANARY_CHAIN} ({on} {}) so that it resyncs in full",
                tables.join(", ")
            ),
            Op::NftDeleteElement { table, map, text, .. } => {
                format!("delete element of {table} {map}: {text}")
            }
            Op::NftDeleteChain {
                table,
                chain,
                handles,
            } => {
                format!("delete chain {chain} ({table}) and its {} rules", handles.len())
            }
        }
    }

    pub fn is_nudge(&self) -> bool {
        matches!(self.op, Op::IptDeleteCanary { .. })
    }
}

#[cfg(test)]
mod tests;
