//! missing-rule and missing-endpoint: what the cluster wants and the rules lack.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::heart::desired::{DesiredPort, FamilyEndpoints};
use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::model::{DestMatch, Family, NodePortRule, RuleDump, Verdict};

use super::attribution::{DesiredIndex, Judged, PortIndex};
use super::builders::{rule_finding, set_service};

pub(super) fn missing_rules(
    family: Family,
    primary: &RuleDump,
    judged: &[Judged<'_>],
    index: &DesiredIndex<'_>,
    out: &mut Vec<Finding>,
) {
    if !primary.complete || !primary.forwarding_shown {
        // A truncated or partly unreadable dump cannot prove a rule is absent, nor can
        // one that leaves out the nat table (`iptables -S` is the filter table alone).
        return;
    }
    let by_port = PortIndex::new(
        primary
            .nodeports
            .iter()
            .zip(judged)
            .map(|(r, j)| ((r.protocol, r.port), (r, j))),
    );
    // One buffer for every port: a large node has tens of thousands.
    let mut forwarding: Vec<&NodePortRule> = Vec::new();
    for (i, desired) in index.state.ports.iter().enumerate() {
        if !desired.in_family(family) || !index.endpoints_certain(i) {
            continue;
        }
        let Some(eps) = desired.endpoints(family).filter(|eps| eps.has_endpoints) else {
            continue;
        };
        let rules = by_port.get((desired.protocol, desired.node_port));
        forwarding.clear();
        forwarding.extend(
            rules
                .iter()
                .filter(|(r, j)| r.verdict == Verdict::Forward && j.owner == Some(i))
                .map(|(r, _)| *r),
        );
        if forwarding.is_empty() {
            out.push(missing_rule_finding(family, primary, desired, rules));
            continue;
        }
        forwarding.sort_by_key(|r| r.dest == DestMatch::Localhost);
        let port = PortRules {
            primary,
            desired,
            eps,
            rules,
            forwarding: &forwarding,
        };
        port.missing_endpoints(out);
    }
}

/// One desired port with endpoints, and the rules that forward it.
struct PortRules<'p, 'r> {
    primary: &'p RuleDump,
    desired: &'p DesiredPort,
    eps: &'p FamilyEndpoints,
    /// Every rule for the port.
    rules: &'p [(&'r NodePortRule, &'r Judged<'r>)],
    /// The port's own forwarding rules, not empty, those for localhost last.
    forwarding: &'p [&'r NodePortRule],
}

impl PortRules<'_, '_> {
    /// A finding for each endpoint the rules should reach and do not.
    fn missing_endpoints(&self, out: &mut Vec<Finding>) {
        let local_unreached = self.local_unreached();
        // Each unreached endpoint once; `true` when it is such a local endpoint.
        let mut missing: BTreeMap<SocketAddr, bool> = BTreeMap::new();
        if !self.eps.cluster_uncertain {
            missing.extend(
                self.eps
                    .cluster
                    .iter()
                    .filter(|a| !self.reaches(a))
                    .map(|a| (a, false)),
            );
        }
        missing.extend(local_unreached.iter().map(|&a| (a, true)));
        let dropping = self.dropping(&local_unreached);
        for (addr, local) in missing {
            out.push(if local {
                let (primary, desired) = (self.primary, self.desired);
                let reached = self.reaches(&addr);
                local_endpoint_unreached(primary, desired, self.forwarding[0], &addr, reached, dropping)
            } else {
                self.cluster_endpoint_unreached(addr)
            });
        }
    }

    fn reaches(&self, addr: &SocketAddr) -> bool {
        self.forwarding
            .iter()
            .any(|r| r.targets.iter().any(|t| t.addr == *addr))
    }

    /// The local endpoints external traffic must reach (externalTrafficPolicy Local)
    /// and does not.
    fn local_unreached(&self) -> Vec<SocketAddr> {
        if !self.desired.external_policy_local {
            return Vec::new();
        }
        self.eps
            .local
            .iter()
            .filter(|a| !self.forwarding.iter().any(|r| r.external_targets.contains(a)))
            .collect()
    }

    /// The rule by which the node drops the port's external traffic as if it had no
    /// local endpoint, when none of its local endpoints is reached: every external
    /// client is dropped here.
    fn dropping(&self, local_unreached: &[SocketAddr]) -> Option<&NodePortRule> {
        self.rules
            .iter()
            .find(|(r, _)| r.verdict == Verdict::Drop)
            .map(|(r, _)| *r)
            .filter(|_| !local_unreached.is_empty() && local_unreached.len() == self.eps.local.len())
    }

    /// An endpoint of the Cluster set that no forwarding rule reaches.
    fn cluster_endpoint_unreached(&self, addr: SocketAddr) -> Finding {
        // The rules end without a DNAT (a chain on the way emptied or cut off): the port
        // reaches no endpoint at all, which is an outage, not a lag.
        let dead_end = self.forwarding.iter().all(|r| r.targets.is_empty());
        let (severity, why) = if dead_end {
            (
                Severity::Critical,
                ": its rules lead to no DNAT at all, so the port reaches nothing on this node — kube-proxy has not synced this Service, or a chain on its path was changed by hand; check kube-proxy's logs.",
            )
        } else {
            (
                Severity::Warning,
                ": kube-proxy has not synced the latest EndpointSlice — check its logs.",
            )
        };
        let desired = self.desired;
        let mut f = rule_finding(
            Kind::MissingEndpoint,
            severity,
            self.primary,
            self.forwarding[0],
            format!(
                "{}'s endpoint {addr} is ready to serve, but NodePort {}/{} never sends traffic to it in {}{why}",
                desired.service.service(),
                desired.protocol,
                desired.node_port,
                self.primary.backend
            ),
        );
        set_service(&mut f, &desired.service);
        f.target = Some(addr.to_string());
        f
    }
}

/// A local endpoint of an externalTrafficPolicy Local port that traffic from outside
/// the node never reaches: critical when the node drops that traffic outright (the drop
/// rule is the evidence), a warning when only pod and host traffic reaches it.
pub(super) fn local_endpoint_unreached(
    primary: &RuleDump,
    desired: &DesiredPort,
    forwarding: &NodePortRule,
    addr: &SocketAddr,
    internally: bool,
    dropping: Option<&NodePortRule>,
) -> Finding {
    let service = desired.service.service();
    let (protocol, port) = (desired.protocol, desired.node_port);
    let mut f = match dropping {
        Some(drop) => {
            let mut f = rule_finding(
                Kind::MissingEndpoint,
                Severity::Critical,
                primary,
                drop,
                format!(
                    "{service} has externalTrafficPolicy Local and a ready endpoint on this node ({addr}), but {} still drops external traffic to NodePort {protocol}/{port} as if the node had none: clients from outside reaching this node get no answer — kube-proxy has not synced the endpoint; check its logs.",
                    primary.backend
                ),
            );
            f.evidence.push(format!(
                "NodePort rule: {} ({}), which {}",
                forwarding.rule.text,
                primary.cite_rule(&forwarding.rule, &forwarding.identity),
                if internally {
                    format!("reaches {addr} for pod and host traffic only")
                } else {
                    format!("does not reach {addr} at all")
                }
            ));
            f
        }
        None => rule_finding(
            Kind::MissingEndpoint,
            Severity::Warning,
            primary,
            forwarding,
            format!(
                "{service} has externalTrafficPolicy Local and a ready endpoint on this node ({addr}), but in {} external traffic to NodePort {protocol}/{port} never reaches it (only pod and host traffic does): kube-proxy has not synced the latest EndpointSlice — check its logs.",
                primary.backend
            ),
        ),
    };
    set_service(&mut f, &desired.service);
    f.target = Some(addr.to_string());
    f
}

pub(super) fn missing_rule_finding(
    family: Family,
    primary: &RuleDump,
    desired: &DesiredPort,
    rules: &[(&NodePortRule, &Judged<'_>)],
) -> Finding {
    let mut f = Finding::new(
        Kind::MissingRule,
        Severity::Critical,
        format!(
            "{} has endpoints, but {} has no {} NodePort rule for {}/{}, so the port does not reach the Service on this node: kube-proxy is not syncing — check that it runs and its logs.",
            desired.service.service(),
            primary.backend,
            family,
            desired.protocol,
            desired.node_port
        ),
    );
    f.protocol = Some(desired.protocol);
    f.port = Some(desired.node_port);
    f.family = Some(family);
    f.backend = Some(primary.backend);
    set_service(&mut f, &desired.service);
    for (r, _) in rules {
        let what = match r.verdict {
            Verdict::Reject => "still rejects the port as if the Service had no endpoints",
            Verdict::Drop => "still drops the port as if there were no local endpoints",
            Verdict::HealthCheckAccept => "accepts health checks on the port",
            Verdict::Forward => "forwards the port for another Service",
        };
        f.evidence.push(format!(
            "{} {what}: {}",
            primary.cite_rule(&r.rule, &r.identity),
            r.rule.text
        ));
    }
    f
}
