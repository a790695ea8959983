//! The desired NodePort state of one node, as kube-proxy on that node would program it.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use crate::heart::model::{Family, Protocol, ServicePortRef};

/// A set of endpoint addresses: a sorted vector. A Service port has a handful of
/// endpoints, and a cluster has 10,000+ ports: a B-tree node per set cost ~2 KiB per
/// port, this costs what the addresses take.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct EndpointSet(Vec<SocketAddr>);

impl EndpointSet {
    pub fn contains(&self, addr: &SocketAddr) -> bool {
        self.0.binary_search(addr).is_ok()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, SocketAddr> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds an address, keeping the set sorted.
    pub fn insert(&mut self, addr: SocketAddr) -> bool {
        match self.0.binary_search(&addr) {
            Ok(_) => false,
            Err(at) => {
                self.0.insert(at, addr);
                true
            }
        }
    }
}

impl FromIterator<SocketAddr> for EndpointSet {
    fn from_iter<I: IntoIterator<Item = SocketAddr>>(iter: I) -> Self {
        let mut v: Vec<SocketAddr> = iter.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        v.shrink_to_fit();
        EndpointSet(v)
    }
}

impl<'a> IntoIterator for &'a EndpointSet {
    type Item = &'a SocketAddr;
    type IntoIter = std::slice::Iter<'a, SocketAddr>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<const N: usize> From<[SocketAddr; N]> for EndpointSet {
    fn from(addrs: [SocketAddr; N]) -> Self {
        addrs.into_iter().collect()
    }
}

/// The endpoints of one Service port in one IP family, as kube-proxy on this node
/// categorises them (`CategorizeEndpoints`, pkg/proxy/topology.go).
///
/// Which sets a NodePort reaches: kube-proxy's `KUBE-NODEPORTS` rule jumps to the
/// port's `KUBE-EXT-*` chain. With externalTrafficPolicy Cluster that chain goes to
/// `KUBE-SVC-*` (the [`cluster`](Self::cluster) set). With Local it short-circuits
/// pod- and host-originated traffic to `KUBE-SVC-*` and sends the rest to `KUBE-SVL-*`
/// (the [`local`](Self::local) set), so every DNAT reachable from the NodePort is in
/// [`reachable`](Self::reachable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FamilyEndpoints {
    /// Every `ip:port` any EndpointSlice of the Service lists for this port, whatever
    /// its conditions. A DNAT to an address outside this set is stale.
    pub listed: EndpointSet,
    /// kube-proxy's Cluster set: ready endpoints (after topology filtering), or all
    /// serving-and-terminating ones when none is ready anywhere. Empty when the port
    /// does not use Cluster endpoints (`UsesClusterEndpoints`), which never happens for
    /// a port with a nodePort: such a port is always externally accessible.
    pub cluster: EndpointSet,
    /// kube-proxy's Local set: this node's ready endpoints, or its
    /// serving-and-terminating ones when none of them is ready. Empty when the port
    /// uses no Local policy (`UsesLocalEndpoints`: neither traffic policy is Local) and
    /// when the node is unknown (then nothing is local).
    pub local: EndpointSet,
    /// kube-proxy's `hasEndpoints`: a ready or serving-and-terminating endpoint exists
    /// somewhere in the cluster. This alone decides whether the iptables proxier writes
    /// the nat `KUBE-NODEPORTS` rule (to `KUBE-EXT-*`) and the nftables proxier adds the
    /// `service-nodeports` map element; without it the nodePort has only a filter
    /// REJECT and no nat rule at all.
    pub has_endpoints: bool,
    /// kube-proxy's `hasExternalEndpoints`: `has_endpoints`, and with
    /// externalTrafficPolicy Local also a non-empty Local set. When false kube-proxy
    /// writes a filter rule for the nodePort in `KUBE-EXTERNAL-SERVICES` (nftables:
    /// `no-endpoint-nodeports`): REJECT without endpoints, DROP when only remote ones
    /// exist. Both that DROP and the nat rule exist for a Local-policy port whose
    /// endpoints are all on other nodes.
    pub has_external_endpoints: bool,
    /// The Cluster set could not be computed exactly (topology hints without a known
    /// node zone or node name, or node hints whose effect depends on kube-proxy's
    /// `PreferSameTrafficDistribution` feature gate): `cluster` holds all ready
    /// endpoints (or the node-hinted ones) and missing-endpoint checks on it are
    /// skipped rather than guessed.
    pub cluster_uncertain: bool,
}

impl FamilyEndpoints {
    /// Every endpoint kube-proxy writes a DNAT for on this node (its
    /// `allLocallyReachableEndpoints`): the Cluster set and the Local set together.
    pub fn reachable(&self) -> EndpointSet {
        self.cluster.iter().chain(self.local.iter()).copied().collect()
    }
}

/// One Service port that owns a nodePort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredPort {
    pub service: ServicePortRef,
    pub protocol: Protocol,
    pub node_port: u16,
    /// The families this Service is programmed in (one per IP of `spec.clusterIPs`,
    /// or `spec.clusterIP` when that list is empty), in the order listed.
    pub families: Vec<Family>,
    /// `spec.externalTrafficPolicy: Local` on a NodePort or LoadBalancer Service
    /// (kube-proxy's `ExternalPolicyLocal`).
    pub external_policy_local: bool,
    /// `spec.internalTrafficPolicy: Local`.
    pub internal_policy_local: bool,
    /// The Service's `spec.healthCheckNodePort`, when kube-proxy serves it: only for a
    /// LoadBalancer with externalTrafficPolicy Local (`NeedsHealthCheck`).
    pub health_check_node_port: Option<u16>,
    /// Endpoints per family (only families in `families`), at most one entry each. A
    /// vector, not a map: a map's first node reserves room for eleven entries, which
    /// across 10,000 ports cost megabytes for at most two.
    pub endpoints: Vec<(Family, FamilyEndpoints)>,
    /// The endpoints kube-proxy uses for this port cannot be known exactly: one of
    /// the Service's EndpointSlices could not be read, two slices list one `ip:port`
    /// with conditions kube-proxy picks between arbitrarily, or a Local traffic policy
    /// meets an unknown node. Endpoint checks are skipped for this port rather than
    /// guessed.
    pub uncertain: bool,
    /// The newest change to the Service or its EndpointSlices, RFC 3339, when the
    /// objects carry it (creation time, or EndpointSlice's last-change-trigger-time).
    pub last_change: Option<String>,
}

impl DesiredPort {
    /// The endpoints of this port in `family`, if the Service is programmed there.
    pub fn endpoints(&self, family: Family) -> Option<&FamilyEndpoints> {
        self.endpoints.iter().find(|(f, _)| *f == family).map(|(_, e)| e)
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
    /// The node this state was computed for (its local endpoints). Without it nothing
    /// is local, and ports with a Local traffic policy are marked uncertain.
    pub node: Option<String>,
    /// The node's `topology.kubernetes.io/zone`, when known (topology hints).
    pub node_zone: Option<String>,
    /// Every Service port with a nodePort that kube-proxy programs, in a stable order
    /// (namespace, name, port name, protocol).
    pub ports: Vec<DesiredPort>,
    /// nodePorts held by Services kube-proxy skips (headless, ExternalName,
    /// `service.kubernetes.io/service-proxy-name`, `service.kubernetes.io/headless`) or
    /// by Services that could not be read in full: these ports are allocated, not
    /// free, and rules for them are neither stale nor checkable. Health-check node ports
    /// of skipped Services are listed as TCP.
    pub other_allocated: BTreeSet<(Protocol, u16)>,
    /// Objects that could not be read.
    pub problems: Vec<ObjectProblem>,
    /// Problems were found that cannot be pinned to one Service: endpoint checks are
    /// unsafe everywhere.
    pub uncertain: bool,
}

impl DesiredState {
    /// Every health-check node port (always TCP; kube-proxy listens on them).
    pub fn health_check_ports(&self) -> BTreeSet<u16> {
        self.ports
            .iter()
            .filter_map(|p| p.health_check_node_port)
            .collect()
    }
}
