//! The desired NodePort state of one node, as kube-proxy on that node would program it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use crate::model::{Family, Protocol, ServicePortRef};

/// The endpoints of one Service port in one IP family, as kube-proxy on this node
/// categorises them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FamilyEndpoints {
    /// Every `ip:port` any EndpointSlice of the Service lists for this port, whatever
    /// its conditions. A DNAT to an address outside this set is stale.
    pub listed: BTreeSet<SocketAddr>,
    /// kube-proxy's Cluster set: ready endpoints (after topology filtering), or all
    /// serving-and-terminating ones when none is ready.
    pub cluster: BTreeSet<SocketAddr>,
    /// kube-proxy's Local set: this node's ready endpoints, or its
    /// serving-and-terminating ones when none is ready.
    pub local: BTreeSet<SocketAddr>,
    /// Any ready or serving-and-terminating endpoint exists cluster-wide: kube-proxy
    /// writes DNAT rules (otherwise only a REJECT).
    pub has_endpoints: bool,
    /// The Cluster set could not be computed exactly (topology hints without a known
    /// node zone): missing-endpoint checks are skipped rather than guessed.
    pub cluster_uncertain: bool,
}

/// One Service port that owns a nodePort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredPort {
    pub service: ServicePortRef,
    pub protocol: Protocol,
    pub node_port: u16,
    /// The families this Service is programmed in (from `spec.clusterIPs`).
    pub families: Vec<Family>,
    pub external_policy_local: bool,
    pub internal_policy_local: bool,
    pub health_check_node_port: Option<u16>,
    /// Endpoints per family (only families in `families`).
    pub endpoints: BTreeMap<Family, FamilyEndpoints>,
    /// Some of the Service's EndpointSlices could not be read: endpoint checks are
    /// skipped for this port rather than guessed.
    pub uncertain: bool,
    /// The newest change to the Service or its EndpointSlices, RFC 3339, when the
    /// objects carry it (creation time, or EndpointSlice's last-change-trigger-time).
    pub last_change: Option<String>,
}

impl DesiredPort {
    /// The endpoints of this port in `family`, if the Service is programmed there.
    pub fn endpoints(&self, family: Family) -> Option<&FamilyEndpoints> {
        self.endpoints.get(&family)
    }

    pub fn in_family(&self, family: Family) -> bool {
        self.families.contains(&family)
    }
}

/// A problem with one object of the cluster state, reported and skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectProblem {
    /// `Service ns/name`, `EndpointSlice ns/name`, or `item 12` when nothing names it.
    pub object: String,
    pub problem: String,
}

/// What the cluster says this node's NodePorts should be.
#[derive(Debug, Clone, Default)]
pub struct DesiredState {
    /// The node this state was computed for (its local endpoints).
    pub node: Option<String>,
    /// Every Service port with a nodePort, in a stable order (namespace, name, port).
    pub ports: Vec<DesiredPort>,
    /// Services skipped by kube-proxy's rules (headless, ExternalName, service-proxy-name)
    /// that still hold a nodePort allocation: their ports are allocated, not free.
    pub other_allocated: BTreeSet<(Protocol, u16)>,
    /// Objects that could not be read.
    pub problems: Vec<ObjectProblem>,
    /// Problems were found that cannot be pinned to one Service: endpoint checks are
    /// unsafe everywhere.
    pub uncertain: bool,
}

impl DesiredState {
    /// All desired ports claiming `protocol`/`port`.
    pub fn owners(&self, protocol: Protocol, port: u16) -> impl Iterator<Item = &DesiredPort> {
        self.ports
            .iter()
            .filter(move |p| p.protocol == protocol && p.node_port == port)
    }

    /// Every health-check node port (always TCP; kube-proxy listens on them).
    pub fn health_check_ports(&self) -> BTreeSet<u16> {
        self.ports
            .iter()
            .filter_map(|p| p.health_check_node_port)
            .collect()
    }
}
