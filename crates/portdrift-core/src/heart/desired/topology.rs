//! kube-proxy's `CategorizeEndpoints` (pkg/proxy/topology.go): which endpoints a
//! Service port uses on this node, given its traffic policies and topology hints.

use crate::heart::desired::model::{EndpointSet, FamilyEndpoints};
use crate::heart::desired::slices::{MergedEndpoint, NodeHint, ZoneId};

/// The traffic-policy facts of one Service port that kube-proxy's categorisation reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PortPolicy {
    pub internal_local: bool,
    pub external_local: bool,
    /// A nodePort, load-balancer VIP or externalIP exists for the port
    /// (`ExternallyAccessible`); always true for a port with a nodePort.
    pub externally_accessible: bool,
}

impl PortPolicy {
    /// `UsesClusterEndpoints`: internal policy Cluster, or any external access at all
    /// (an external Local policy still needs the Cluster set to short-circuit
    /// traffic from pods and from the node itself).
    pub(crate) fn uses_cluster_endpoints(self) -> bool {
        !self.internal_local || self.externally_accessible
    }

    /// `UsesLocalEndpoints`.
    pub(crate) fn uses_local_endpoints(self) -> bool {
        self.internal_local || (self.external_local && self.externally_accessible)
    }
}

/// What this node knows about itself for topology.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeView {
    /// The node name is known (node hints can match it).
    pub node_known: bool,
    pub zone: ZoneView,
}

/// This node's zone as seen by topology-hint filtering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ZoneView {
    /// The zone label is unknown to us (kube-proxy knows it).
    Unknown,
    /// The zone is known; `None` when no endpoint hint names it.
    Known(Option<ZoneId>),
}

/// How kube-proxy narrows the ready endpoints for the Cluster set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TopologyMode {
    None,
    SameNode,
    SameZone,
}

/// The topology mode kube-proxy picks, and whether we can be sure of it.
struct ModeChoice {
    mode: TopologyMode,
    uncertain: bool,
}

/// Categorises the merged endpoints of one Service port in one family. `listed` is
/// filled by the caller.
pub(crate) fn categorize(
    endpoints: &[MergedEndpoint],
    policy: PortPolicy,
    view: NodeView,
) -> FamilyEndpoints {
    let mut out = FamilyEndpoints::default();
    if policy.uses_cluster_endpoints() {
        let choice = topology_mode(endpoints, view);
        out.cluster = cluster_set(endpoints, choice.mode, view);
        out.cluster_uncertain = choice.uncertain;
        out.has_endpoints = !out.cluster.is_empty();
    }
    if policy.uses_local_endpoints() {
        if endpoints.iter().any(|e| e.ready || serving_terminating(e)) {
            out.has_endpoints = true;
        }
        out.local = local_set(endpoints);
    }
    out.has_external_endpoints = out.has_endpoints && (!policy.external_local || !out.local.is_empty());
    out
}

fn serving_terminating(endpoint: &MergedEndpoint) -> bool {
    endpoint.serving && endpoint.terminating
}

/// Ready endpoints available under `mode`; when there are none, every
/// serving-and-terminating endpoint, without topology (kube-proxy only ignores
/// topology there because a ready endpoint anywhere would have been kept).
fn cluster_set(endpoints: &[MergedEndpoint], mode: TopologyMode, view: NodeView) -> EndpointSet {
    let ready = ready_for_topology(endpoints, mode, view);
    if !ready.is_empty() {
        return ready;
    }
    endpoints
        .iter()
        .filter(|e| serving_terminating(e))
        .map(|e| e.addr)
        .collect()
}

fn ready_for_topology(endpoints: &[MergedEndpoint], mode: TopologyMode, view: NodeView) -> EndpointSet {
    endpoints
        .iter()
        .filter(|e| e.ready && available_for_topology(e, mode, view))
        .map(|e| e.addr)
        .collect()
}

fn available_for_topology(endpoint: &MergedEndpoint, mode: TopologyMode, view: NodeView) -> bool {
    match mode {
        TopologyMode::None => true,
        TopologyMode::SameNode => endpoint.node_hint == NodeHint::ThisNode,
        TopologyMode::SameZone => match view.zone {
            ZoneView::Known(Some(zone)) => endpoint.zone_hints.contains(&zone),
            _ => false,
        },
    }
}

/// This node's ready endpoints, or its serving-and-terminating ones when none is ready.
fn local_set(endpoints: &[MergedEndpoint]) -> EndpointSet {
    let local_ready: EndpointSet = endpoints
        .iter()
        .filter(|e| e.local && e.ready)
        .map(|e| e.addr)
        .collect();
    if !local_ready.is_empty() {
        return local_ready;
    }
    endpoints
        .iter()
        .filter(|e| e.local && serving_terminating(e))
        .map(|e| e.addr)
        .collect()
}

/// kube-proxy's `topologyModeFromHints` over ready endpoints: same node, else same
/// zone, else no filtering. Uncertain when the answer hinges on what we cannot see
/// (the zone, the node name, or the `PreferSameTrafficDistribution` gate).
fn topology_mode(endpoints: &[MergedEndpoint], view: NodeView) -> ModeChoice {
    let ready: Vec<&MergedEndpoint> = endpoints.iter().filter(|e| e.ready).collect();
    if ready.is_empty() {
        return ModeChoice {
            mode: TopologyMode::None,
            uncertain: false,
        };
    }
    let all_node_hints = ready.iter().all(|e| e.node_hint != NodeHint::Absent);
    let hinted_for_node = ready.iter().any(|e| e.node_hint == NodeHint::ThisNode);
    let all_zone_hints = ready.iter().all(|e| !e.zone_hints.is_empty());
    let hinted_for_zone = match view.zone {
        ZoneView::Known(Some(zone)) => ready.iter().any(|e| e.zone_hints.contains(&zone)),
        _ => false,
    };
    let zone_uncertain = all_zone_hints && view.zone == ZoneView::Unknown;
    let zone_mode = if all_zone_hints && hinted_for_zone {
        TopologyMode::SameZone
    } else {
        TopologyMode::None
    };

    if all_node_hints && hinted_for_node {
        // With the gate off kube-proxy would have used zone_mode instead.
        let gate_matters = zone_uncertain
            || ready_for_topology(endpoints, TopologyMode::SameNode, view)
                != ready_for_topology(endpoints, zone_mode, view);
        return ModeChoice {
            mode: TopologyMode::SameNode,
            uncertain: gate_matters,
        };
    }
    // Without the node name we cannot tell whether node hints select this node.
    let node_uncertain = all_node_hints && !view.node_known;
    ModeChoice {
        mode: zone_mode,
        uncertain: zone_uncertain || node_uncertain,
    }
}

#[cfg(test)]
mod tests;
