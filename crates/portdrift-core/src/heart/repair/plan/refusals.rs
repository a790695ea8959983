//! The refusal rules shared by both backends: what the desired state explains, what
//! belongs to the API server's own Service, and which duplicate copy must stay.

use std::net::SocketAddr;

use super::{Planned, Planner};
use crate::heart::desired::{DesiredPort, DesiredState};
use crate::heart::finding::{Finding, Kind};
use crate::heart::kube_proxy::{self, Naming};
use crate::heart::model::{Family, Protocol, ServicePortRef};
use crate::heart::repair::ruleset::IptTable;

/// Why a single DNAT inside kube-proxy's per-service chains is refused.
pub(super) const PER_SERVICE_DNAT: &str = "the stale DNAT sits in kube-proxy's per-service chains: taking one endpoint out of a rotation would skew or break it; kube-proxy's resync (or the removal of the whole stale path) repairs it";

/// The API server's own Service, never touched.
pub(super) const KUBERNETES_SERVICE: &str = "default/kubernetes";

impl Planner<'_> {
    /// Refuses a rule that leads to the chains of the Service owning its port now, or a
    /// DNAT to an address that Service lists.
    pub(super) fn explained_by_owner(&self, f: &Finding, family: Family, target: &str) -> Planned {
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
            let leads_to_owner = kube_proxy::chain_hash(target).is_some_and(|hash| {
                Naming::ALL.into_iter().any(|naming| {
                    hash.as_bytes() == kube_proxy::service_chain_hash_as(&owner.service, protocol, naming)
                })
            });
            if leads_to_owner {
                return Err(format!(
                    "the rule leads to the chains of {}, which owns the port (as one kube-proxy release or another names them): the desired state explains it",
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
}

/// A rule whose kube-proxy comment names the port's owner is removed only on proof,
/// re-read from the fresh ruleset, that it is an earlier incarnation's: it leads to
/// DNATs, none of them to an endpoint the owner's EndpointSlices list, and those are
/// known in full. A chain name that differs from today's hash proves nothing: older
/// kube-proxy releases named chains otherwise, and their rules work.
pub(super) fn owner_named_without_proof(
    desired: &DesiredState,
    f: &Finding,
    family: Family,
    line: &str,
    dnats: impl FnOnce() -> Vec<SocketAddr>,
) -> Planned {
    let (Some(protocol), Some(port)) = (f.protocol, f.port) else {
        return Ok(());
    };
    let Some(named) = comment_service(line) else {
        return Ok(());
    };
    let Some(owner) = owners(desired, protocol, port, family).find(|o| o.service == named) else {
        return Ok(());
    };
    let svc = owner.service.service();
    let eps = owner
        .endpoints(family)
        .filter(|_| !desired.uncertain && !owner.uncertain)
        .ok_or_else(|| {
            format!(
                "the rule's comment names {svc}, which owns the port, and its endpoints are not known in full"
            )
        })?;
    let dnats = dnats();
    if dnats.is_empty() {
        return Err(format!(
            "the rule's comment names {svc}, which owns the port, and it leads to no DNAT: nothing proves it stale"
        ));
    }
    if let Some(addr) = dnats.iter().find(|a| eps.listed.contains(a)) {
        return Err(format!(
            "the rule's comment names {svc}, which owns the port, and it leads to {addr}, one of its endpoints"
        ));
    }
    Ok(())
}

/// The Service port kube-proxy's comment in an iptables rule line names
/// (`--comment "ns/svc:port ..."`; `ns/svc:` is an older release's unnamed port).
fn comment_service(line: &str) -> Option<ServicePortRef> {
    let rest = line.split_once("--comment ")?.1;
    let text = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => rest.split(' ').next()?,
    };
    ServicePortRef::parse(text.split(' ').next()?)
}

/// A duplicate is only removed while the copy that stays is still there.
pub(super) fn kept_rule_present(f: &Finding, table: &IptTable, chain: &str, line: &str) -> Planned {
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

pub(super) fn owners<'a>(
    desired: &'a DesiredState,
    protocol: Protocol,
    port: u16,
    family: Family,
) -> impl Iterator<Item = &'a DesiredPort> + 'a {
    desired
        .ports
        .iter()
        .filter(move |p| p.protocol == protocol && p.node_port == port && p.in_family(family))
}

/// Whether a rule's text names the API server's Service in kube-proxy's comment form.
pub(super) fn names_kubernetes(text: &str) -> bool {
    text.contains("\"default/kubernetes:")
        || text.contains("default/kubernetes ")
        || text.contains("/default/kubernetes/")
}

pub(super) fn is_kubernetes_hash(hash: &str) -> bool {
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
