//! The desired NodePort state of one node, as kube-proxy on that node would program it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use jiff::Timestamp;

use crate::heart::acceptance::Acceptance;
use crate::heart::model::{Family, Protocol, ServicePortRef};

/// The Node label kube-proxy reads for topology hints.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// A set of endpoint addresses, sorted, stored compactly: a port has a handful of
/// endpoints, nearly always IPv4, and a large cluster keeps tens of thousands of sets
/// (a `SocketAddr` takes 32 bytes, an IPv4 `ip:port` packed 6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct EndpointSet(Addrs);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Addrs {
    /// Every address IPv4, packed as in [`V4Addr`].
    V4(Box<[V4Addr]>),
    /// Any IPv6 address among them.
    Any(Box<[SocketAddr]>),
}

impl Default for Addrs {
    fn default() -> Self {
        Addrs::V4(Box::default())
    }
}

/// An IPv4 `ip:port` as 6 big-endian bytes: their order is `SocketAddrV4`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct V4Addr([u8; 6]);

impl V4Addr {
    fn of(addr: SocketAddrV4) -> V4Addr {
        let [a, b, c, d] = addr.ip().octets();
        let [p, q] = addr.port().to_be_bytes();
        V4Addr([a, b, c, d, p, q])
    }

    fn get(self) -> SocketAddr {
        let [a, b, c, d, p, q] = self.0;
        SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::new(a, b, c, d),
            u16::from_be_bytes([p, q]),
        ))
    }
}

/// The addresses of an [`EndpointSet`], in order, by value.
#[derive(Debug, Clone)]
pub struct EndpointIter<'a>(IterInner<'a>);

#[derive(Debug, Clone)]
enum IterInner<'a> {
    V4(std::slice::Iter<'a, V4Addr>),
    Any(std::slice::Iter<'a, SocketAddr>),
}

impl Iterator for EndpointIter<'_> {
    type Item = SocketAddr;

    fn next(&mut self) -> Option<SocketAddr> {
        match &mut self.0 {
            IterInner::V4(it) => it.next().map(|a| a.get()),
            IterInner::Any(it) => it.next().copied(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.0 {
            IterInner::V4(it) => it.size_hint(),
            IterInner::Any(it) => it.size_hint(),
        }
    }
}

impl ExactSizeIterator for EndpointIter<'_> {}

impl EndpointSet {
    pub fn contains(&self, addr: &SocketAddr) -> bool {
        match (&self.0, addr) {
            (Addrs::V4(v4), SocketAddr::V4(a)) => v4.binary_search(&V4Addr::of(*a)).is_ok(),
            (Addrs::V4(_), SocketAddr::V6(_)) => false,
            (Addrs::Any(any), _) => any.binary_search(addr).is_ok(),
        }
    }

    pub fn iter(&self) -> EndpointIter<'_> {
        match &self.0 {
            Addrs::V4(v4) => EndpointIter(IterInner::V4(v4.iter())),
            Addrs::Any(any) => EndpointIter(IterInner::Any(any.iter())),
        }
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Addrs::V4(v4) => v4.len(),
            Addrs::Any(any) => any.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds an address, keeping the set sorted.
    pub fn insert(&mut self, addr: SocketAddr) -> bool {
        if self.contains(&addr) {
            return false;
        }
        *self = self.iter().chain([addr]).collect();
        true
    }
}
impl FromIterator<SocketAddr> for EndpointSet {
    fn from_iter<I: IntoIterator<Item = SocketAddr>>(iter: I) -> Self {
        let mut all: Vec<SocketAddr> = iter.into_iter().collect();
        all.sort_unstable();
        all.dedup();
        let v4: Option<Vec<V4Addr>> = all
            .iter()
            .map(|a| match a {
                SocketAddr::V4(a) => Some(V4Addr::of(*a)),
                SocketAddr::V6(_) => None,
            })
            .collect();
        EndpointSet(match v4 {
            Some(v4) => Addrs::V4(v4.into_boxed_slice()),
            None => Addrs::Any(all.into_boxed_slice()),
        })
    }
}

impl<'a> IntoIterator for &'a EndpointSet {
    type Item = SocketAddr;
    type IntoIter = EndpointIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<const N: usize> From<[SocketAddr; N]> for EndpointSet {
    fn from(addrs: [SocketAddr; N]) -> Self {
        addrs.into_iter().collect()
    }
}

/// The endpoints of one Service port in one IP family, as kube-proxy on this node
/// categorises them (`CategorizeEndpoints`, pkg/proxy/topology.go). With a Local
/// policy a NodePort still reaches both sets, hence [`reachable`](Self::reachable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FamilyEndpoints {
    /// Every `ip:port` any EndpointSlice of the Service lists for this port, whatever
    /// its conditions. A DNAT to an address outside this set is stale.
    pub listed: EndpointSet,
    /// kube-proxy's Cluster set: ready endpoints (after topology filtering), or all
    /// serving-and-terminating ones when none is ready anywhere.
    pub cluster: EndpointSet,
    /// kube-proxy's Local set: this node's ready endpoints, else its serving-and-
    /// terminating ones. Empty without a Local policy or a known node.
    pub local: EndpointSet,
    /// kube-proxy's `hasEndpoints`: a ready or serving-and-terminating endpoint exists
    /// anywhere. Without it the nodePort gets only a filter REJECT, no nat rule.
    pub has_endpoints: bool,
    /// kube-proxy's `hasExternalEndpoints`: `has_endpoints` and, with a Local policy, a
    /// non-empty Local set. When false the nodePort gets a filter REJECT or DROP (the
    /// DROP alongside the nat rule when all endpoints are remote).
    pub has_external_endpoints: bool,
    /// The Cluster set could not be computed exactly (hints without a known zone or
    /// node, or a feature gate's call): missing-endpoint checks on it are skipped.
    pub cluster_uncertain: bool,
}

impl FamilyEndpoints {
    /// Every endpoint kube-proxy writes a DNAT for on this node (its
    /// `allLocallyReachableEndpoints`): the Cluster set and the Local set together.
    pub fn reachable(&self) -> EndpointSet {
        self.cluster.iter().chain(self.local.iter()).collect()
    }
}

/// Cilium's Service annotations that change where it exposes a NodePort (kube-proxy
/// ignores them): as written, judged against the node by `heart::cilium`.
pub const CILIUM_ANNOTATIONS: [&str; 3] = [
    CiliumAnnotations::NODE,
    CiliumAnnotations::NODE_SELECTOR,
    CiliumAnnotations::TYPE,
];

/// The values of [`CILIUM_ANNOTATIONS`] on one Service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CiliumAnnotations {
    /// Exposed only on nodes whose label `service.cilium.io/node` has this value.
    pub node: Option<String>,
    /// A label selector over the node's labels; when set it wins over `node`.
    pub node_selector: Option<String>,
    /// `ClusterIP`, `NodePort` or `LoadBalancer`: only that type of frontend is made.
    pub frontend_type: Option<String>,
}

impl CiliumAnnotations {
    pub const NODE: &str = "service.cilium.io/node";
    pub const NODE_SELECTOR: &str = "service.cilium.io/node-selector";
    pub const TYPE: &str = "service.cilium.io/type";

    /// Read from a Service's annotations; None when it has none of them (the usual case,
    /// kept small).
    pub fn from_annotations(
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Option<Box<CiliumAnnotations>> {
        let annotations = annotations?;
        let get = |key: &str| annotations.get(key).cloned();
        let found = CiliumAnnotations {
            node: get(Self::NODE),
            node_selector: get(Self::NODE_SELECTOR),
            frontend_type: get(Self::TYPE),
        };
        (found != CiliumAnnotations::default()).then(|| Box::new(found))
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
    /// Endpoints per family (only families in `families`), at most one entry each.
    /// A vector, not a map: a map's first node reserves room for eleven entries.
    pub endpoints: Vec<(Family, FamilyEndpoints)>,
    /// The endpoints kube-proxy uses for this port cannot be known exactly (an
    /// unreadable slice, conflicting duplicates, a Local policy on an unknown node):
    /// endpoint checks are skipped for it rather than guessed.
    pub uncertain: bool,
    /// The newest change to the Service or its EndpointSlices, when the objects carry
    /// it (creation time, or EndpointSlice's last-change-trigger-time).
    pub last_change: Option<Timestamp>,
    /// Cilium's annotations on the Service, when it has any.
    pub cilium: Option<Box<CiliumAnnotations>>,
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
    /// The node's labels, when its Node was read (acceptances' node selectors).
    pub node_labels: Option<BTreeMap<String, String>>,
    /// Every Service port with a nodePort that kube-proxy programs, in a stable order
    /// (namespace, name, port name, protocol).
    pub ports: Vec<DesiredPort>,
    /// nodePorts held by Services kube-proxy skips or that could not be read in full:
    /// allocated, not free, and their rules are neither stale nor checkable.
    pub other_allocated: BTreeSet<(Protocol, u16)>,
    /// Objects that could not be read.
    pub problems: Vec<ObjectProblem>,
    /// What Services accept of their own findings (`portdrift.io/accept`), in Service
    /// order.
    pub accepted_by_services: Vec<Acceptance>,
    /// Services whose `portdrift.io/accept` annotations cannot be applied, and why: not
    /// a problem with the desired state (repair is not held back), said with the
    /// acceptances.
    pub acceptance_problems: Vec<ObjectProblem>,
    /// Problems were found that cannot be pinned to one Service: endpoint checks are
    /// unsafe everywhere.
    pub uncertain: bool,
    /// The Services may be only some of the cluster's (a list filtered by namespace or
    /// label): a port no listed Service owns may still be owned, so its rules are not
    /// judged stale, nor is a listener on it a squatter on a free port.
    pub services_partial: bool,
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
