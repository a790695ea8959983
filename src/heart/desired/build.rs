//! Services + EndpointSlices → [`DesiredState`], with kube-proxy's semantics.
//!
//! Objects are reduced to compact summaries as they arrive, so a caller streaming a
//! large cluster state (see `cluster_file`) never holds the API objects themselves.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;

use crate::heart::acceptance::{Acceptance, service_acceptances};
use crate::heart::desired::model::{CiliumAnnotations, DesiredPort, DesiredState, LABEL_ZONE, ObjectProblem};
use crate::heart::desired::slices::{
    OPT_OUT_LABELS, SliceRead, SliceSummary, ZoneTable, merge_port, parse_api_protocol, parse_ip_sloppy,
    read_slice,
};
use crate::heart::desired::topology::{NodeView, PortPolicy, ZoneView, categorize};
use crate::heart::model::{Family, Protocol, ServicePortRef};

/// What the node's plumbing should be, computed from the cluster's Services and
/// EndpointSlices as kube-proxy on `node` would see them. `node_zone` is the node's
/// `topology.kubernetes.io/zone` label, for topology hints.
pub fn desired_state(
    services: &[Service],
    slices: &[EndpointSlice],
    node: Option<&str>,
    node_zone: Option<&str>,
) -> DesiredState {
    let mut builder = DesiredBuilder::new(node);
    for service in services {
        builder.add_service(service);
    }
    for slice in slices {
        builder.add_endpoint_slice(slice);
    }
    let labels = node_zone.map(|zone| BTreeMap::from([(LABEL_ZONE.to_string(), zone.to_string())]));
    builder.finish(labels)
}

/// `(namespace, name)` of a Service.
type ServiceKey = (String, String);

/// A Service port that owns a nodePort.
#[derive(Debug)]
struct NodePortSpec {
    name: String,
    protocol: Protocol,
    node_port: u16,
}

/// A Service kube-proxy programs, reduced to what the desired state needs.
#[derive(Debug)]
struct ServiceSummary {
    families: Vec<Family>,
    ports: Vec<NodePortSpec>,
    external_policy_local: bool,
    internal_policy_local: bool,
    health_check_node_port: Option<u16>,
    created: Option<Timestamp>,
    cilium: Option<Box<CiliumAnnotations>>,
}

/// Builds a [`DesiredState`] from Services and EndpointSlices given one at a time, in
/// any order. Each object is reduced on arrival; [`finish`](Self::finish) joins them.
#[derive(Debug)]
pub struct DesiredBuilder {
    node: Option<String>,
    zones: ZoneTable,
    services: HashMap<ServiceKey, ServiceSummary>,
    slices: HashMap<ServiceKey, Vec<SliceSummary>>,
    /// Services with a slice that could not be read.
    uncertain_services: HashSet<ServiceKey>,
    /// What each Service accepts of its own findings (a later copy replaces it).
    accepted_by_services: HashMap<ServiceKey, Vec<Acceptance>>,
    /// No Service's endpoints can be known (a list without EndpointSlices).
    endpoints_unknown: bool,
    state: DesiredState,
}

impl DesiredBuilder {
    /// A builder for the desired state of `node` (None: nothing is local).
    pub fn new(node: Option<&str>) -> DesiredBuilder {
        // kube-proxy treats an empty node name as no node (`len(nodeName) > 0`).
        let node = node.filter(|n| !n.is_empty()).map(str::to_string);
        DesiredBuilder {
            node: node.clone(),
            zones: ZoneTable::default(),
            services: HashMap::new(),
            slices: HashMap::new(),
            uncertain_services: HashSet::new(),
            accepted_by_services: HashMap::new(),
            endpoints_unknown: false,
            state: DesiredState {
                node,
                ..DesiredState::default()
            },
        }
    }

    /// Adds (or replaces, when seen before) a Service.
    pub fn add_service(&mut self, service: &Service) {
        let meta = &service.metadata;
        let namespace = meta.namespace.as_deref().filter(|s| !s.is_empty());
        let name = meta.name.as_deref().filter(|s| !s.is_empty());
        let (Some(namespace), Some(name)) = (namespace, name) else {
            let object = format!("Service {}/{}", namespace.unwrap_or("?"), name.unwrap_or("?"));
            self.problem(
                object,
                "has no metadata.name or metadata.namespace; its nodePorts are kept as allocated",
            );
            self.allocate_spec_ports(service.spec.as_ref());
            return;
        };
        let key = (namespace.to_string(), name.to_string());
        let object = format!("Service {namespace}/{name}");
        if self.services.remove(&key).is_some() {
            self.problem(object.clone(), "is listed twice; the later copy is used");
        }
        match service_acceptances(namespace, name, meta.annotations.as_ref()) {
            Ok(accepted) if accepted.is_empty() => {
                self.accepted_by_services.remove(&key);
            }
            Ok(accepted) => {
                self.accepted_by_services.insert(key.clone(), accepted);
            }
            Err(problem) => {
                self.accepted_by_services.remove(&key);
                self.state.acceptance_problems.push(ObjectProblem {
                    object: object.clone(),
                    problem,
                });
            }
        }
        if let Some(summary) = self.summarize_service(&object, service) {
            self.services.insert(key, summary);
        }
    }

    /// The Service as kube-proxy programs it; None when it owns no nodePort or
    /// kube-proxy skips it (its nodePorts then count as allocated).
    fn summarize_service(&mut self, object: &str, service: &Service) -> Option<ServiceSummary> {
        let Some(spec) = service.spec.as_ref() else {
            self.problem(object, "has no spec");
            return None;
        };
        let ports = self.node_port_specs(object, spec);
        if ports.is_empty() {
            return None;
        }
        if skipped_by_kube_proxy(service, spec) {
            self.allocate(&ports, skipped_health_check_port(spec));
            return None;
        }
        let families = self.service_families(object, spec);
        if families.is_empty() {
            self.problem(
                object,
                "has no usable clusterIP; its nodePorts are kept as allocated",
            );
            self.allocate(&ports, None);
            return None;
        }
        Some(ServiceSummary {
            families,
            ports,
            external_policy_local: external_policy_local(spec),
            internal_policy_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
            health_check_node_port: self.health_check_node_port(object, spec),
            created: crate::heart::desired::slices::last_recorded_change(&service.metadata),
            cilium: CiliumAnnotations::from_annotations(service.metadata.annotations.as_ref()),
        })
    }

    /// Adds (or replaces, when seen before) an EndpointSlice.
    pub fn add_endpoint_slice(&mut self, slice: &EndpointSlice) {
        let object = object_name("EndpointSlice", &slice.metadata.namespace, &slice.metadata.name);
        match read_slice(slice, self.node.as_deref(), &mut self.zones) {
            SliceRead::Ignore => {}
            SliceRead::Broken {
                namespace,
                service,
                problem,
            } => {
                self.unreadable_slice(object, problem, namespace.as_deref(), service.as_deref());
            }
            SliceRead::Use {
                namespace,
                service,
                summary,
                problems,
            } => {
                for problem in problems {
                    self.problem(object.clone(), problem);
                }
                let group = self.slices.entry((namespace, service)).or_default();
                match group.iter_mut().find(|s| s.name == summary.name) {
                    Some(existing) => {
                        *existing = summary;
                        self.problem(object, "is listed twice; the later copy is used");
                    }
                    None => group.push(summary),
                }
            }
        }
    }

    /// Records a problem with an object that was skipped.
    pub fn problem(&mut self, object: impl Into<String>, problem: impl Into<String>) {
        self.state.problems.push(ObjectProblem {
            object: object.into(),
            problem: problem.into(),
        });
    }

    /// Records an EndpointSlice that could not be read. When its Service is known the
    /// Service's ports become uncertain; otherwise the whole state does.
    pub fn unreadable_slice(
        &mut self,
        object: impl Into<String>,
        problem: impl Into<String>,
        namespace: Option<&str>,
        service: Option<&str>,
    ) {
        let problem = problem.into();
        match (
            namespace.filter(|s| !s.is_empty()),
            service.filter(|s| !s.is_empty()),
        ) {
            (Some(namespace), Some(service)) => {
                self.uncertain_services
                    .insert((namespace.to_string(), service.to_string()));
                let note =
                    format!("{problem}; endpoint checks for Service {namespace}/{service} are skipped");
                self.problem(object, note);
            }
            _ => {
                self.state.uncertain = true;
                let note =
                    format!("{problem}; its Service is unknown, so endpoint checks are unsafe everywhere");
                self.problem(object, note);
            }
        }
    }

    /// Records a Service that could not be read, with the nodePorts that could still
    /// be extracted from it (None: not even those, so no port can be judged free).
    pub fn unreadable_service(
        &mut self,
        object: impl Into<String>,
        problem: impl Into<String>,
        node_ports: Option<&[(Protocol, u16)]>,
    ) {
        let problem = problem.into();
        let note = match node_ports {
            Some(ports) => {
                self.state.other_allocated.extend(ports.iter().copied());
                if ports.is_empty() {
                    format!("{problem}; it has no nodePorts")
                } else {
                    let list: Vec<String> = ports.iter().map(|(p, n)| format!("{n}/{p}")).collect();
                    format!(
                        "{problem}; its nodePorts {} are kept as allocated",
                        list.join(", ")
                    )
                }
            }
            None => {
                self.state.uncertain = true;
                format!("{problem}; its nodePorts are unknown, so no port can be judged stale")
            }
        };
        self.problem(object, note);
    }

    /// Marks the whole state uncertain (a problem that cannot be pinned to one Service).
    pub fn mark_uncertain(&mut self) {
        self.state.uncertain = true;
    }

    /// Records that the Services may be only some of the cluster's: a port none of
    /// them owns is not judged free.
    pub fn services_partial(&mut self, object: impl Into<String>, problem: impl Into<String>) {
        self.state.services_partial = true;
        self.problem(object, problem);
    }

    /// Records that no Service's endpoints can be known (`object` holds no
    /// EndpointSlice): every port's endpoint checks are skipped, while the Services
    /// still say which NodePorts are owned.
    pub fn endpoints_unknown(&mut self, object: impl Into<String>, problem: impl Into<String>) {
        self.endpoints_unknown = true;
        self.problem(object, problem);
    }

    /// Joins Services and their EndpointSlices into the desired state. `node_labels`
    /// are the node's labels, when its Node was read (its
    /// `topology.kubernetes.io/zone` decides topology hints).
    pub fn finish(mut self, node_labels: Option<BTreeMap<String, String>>) -> DesiredState {
        let node_zone = node_labels
            .as_ref()
            .and_then(|labels| labels.get(LABEL_ZONE))
            .cloned();
        let node_zone = node_zone.as_deref();
        let view = NodeView {
            node_known: self.node.is_some(),
            zone: match node_zone {
                Some(zone) => ZoneView::Known(self.zones.lookup(zone)),
                None => ZoneView::Unknown,
            },
        };
        let services = std::mem::take(&mut self.services);
        let mut ports = Vec::new();
        for (key, service) in services {
            let mut slices = self.slices.remove(&key).unwrap_or_default();
            // Sorted so that every run breaks ties the same way.
            slices.sort_by(|a, b| a.name.cmp(&b.name));
            self.desired_ports(key, &service, &slices, view, &mut ports);
        }
        ports.sort_by(|a, b| (&a.service, a.protocol).cmp(&(&b.service, b.protocol)));
        self.state.ports = ports;
        self.state.node_zone = node_zone.map(str::to_string);
        self.state.node_labels = node_labels;
        let mut accepted: Vec<_> = std::mem::take(&mut self.accepted_by_services)
            .into_iter()
            .collect();
        accepted.sort_by(|a, b| a.0.cmp(&b.0));
        self.state.accepted_by_services = accepted.into_iter().flat_map(|(_, a)| a).collect();
        self.state
    }

    fn desired_ports(
        &mut self,
        key: ServiceKey,
        service: &ServiceSummary,
        slices: &[SliceSummary],
        view: NodeView,
        out: &mut Vec<DesiredPort>,
    ) {
        let last_change = slices
            .iter()
            .filter_map(|s| s.last_change)
            .chain(service.created)
            .max();
        let policy = PortPolicy {
            internal_local: service.internal_policy_local,
            external_local: service.external_policy_local,
            externally_accessible: true,
        };
        // Without the node, the Local set (and so a Local policy's rules) is unknown.
        let local_unknown = !view.node_known && policy.uses_local_endpoints();
        let slice_unreadable = self.endpoints_unknown || self.uncertain_services.contains(&key);
        let (namespace, name) = key;
        for port in &service.ports {
            let mut endpoints = Vec::with_capacity(service.families.len());
            let mut ambiguous = false;
            for &family in &service.families {
                let merged = merge_port(slices, family, &port.name, port.protocol);
                if !merged.ambiguous.is_empty() {
                    ambiguous = true;
                    self.report_ambiguous(&namespace, &name, &merged.ambiguous);
                }
                let mut categorized = categorize(&merged.endpoints, policy, view);
                categorized.listed = merged.endpoints.iter().map(|e| e.addr).collect();
                endpoints.push((family, categorized));
            }
            out.push(DesiredPort {
                service: ServicePortRef {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    port_name: port.name.clone(),
                },
                protocol: port.protocol,
                node_port: port.node_port,
                families: service.families.clone(),
                external_policy_local: service.external_policy_local,
                internal_policy_local: service.internal_policy_local,
                health_check_node_port: service.health_check_node_port,
                endpoints,
                uncertain: slice_unreadable || ambiguous || local_unknown,
                last_change: last_change.map(|t| t.to_string()),
                cilium: service.cilium.clone(),
            });
        }
    }

    fn report_ambiguous(&mut self, namespace: &str, name: &str, addrs: &[std::net::SocketAddr]) {
        let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        self.problem(
            format!("Service {namespace}/{name}"),
            format!(
                "EndpointSlices list {} more than once with different conditions; \
                 kube-proxy's choice between them is undefined, so endpoint checks are skipped",
                list.join(", ")
            ),
        );
    }

    /// The ports of `spec` that own a nodePort. Ports kube-proxy could not program
    /// (unknown protocol, nodePort out of range) are reported and left out.
    fn node_port_specs(&mut self, object: &str, spec: &ServiceSpec) -> Vec<NodePortSpec> {
        let mut out = Vec::new();
        for port in spec.ports.iter().flatten() {
            match node_port_spec(port) {
                Ok(Some(spec)) => out.push(spec),
                Ok(None) => {}
                Err(problem) => self.problem(object, problem),
            }
        }
        out
    }

    /// One family per clusterIP (`spec.clusterIPs`, or `spec.clusterIP` when that list
    /// is empty), as kube-proxy runs one proxier per family.
    fn service_families(&mut self, object: &str, spec: &ServiceSpec) -> Vec<Family> {
        let listed: Vec<&str> = match spec.cluster_ips.as_deref() {
            Some(ips) if !ips.is_empty() => ips.iter().map(String::as_str).collect(),
            _ => spec.cluster_ip.as_deref().into_iter().collect(),
        };
        let mut families = Vec::new();
        for ip in listed {
            match parse_ip_sloppy(ip) {
                Some(ip) => {
                    let family = Family::of(&ip);
                    if !families.contains(&family) {
                        families.push(family);
                    }
                }
                None => self.problem(object, format!("clusterIP {ip:?} is not an IP address; ignored")),
            }
        }
        families
    }

    /// The health-check node port kube-proxy serves: only a LoadBalancer with
    /// externalTrafficPolicy Local has one (`NeedsHealthCheck`).
    fn health_check_node_port(&mut self, object: &str, spec: &ServiceSpec) -> Option<u16> {
        if spec.type_.as_deref() != Some("LoadBalancer") || !external_policy_local(spec) {
            return None;
        }
        let port = spec.health_check_node_port.filter(|p| *p != 0)?;
        let valid = u16::try_from(port).ok().filter(|p| *p != 0);
        if valid.is_none() {
            self.problem(
                object,
                format!("healthCheckNodePort {port} is out of range; ignored"),
            );
        }
        valid
    }

    fn allocate(&mut self, ports: &[NodePortSpec], health_check: Option<u16>) {
        let allocated = &mut self.state.other_allocated;
        allocated.extend(ports.iter().map(|p| (p.protocol, p.node_port)));
        allocated.extend(health_check.map(|p| (Protocol::Tcp, p)));
    }

    fn allocate_spec_ports(&mut self, spec: Option<&ServiceSpec>) {
        let Some(spec) = spec else { return };
        let ports: Vec<NodePortSpec> = spec
            .ports
            .iter()
            .flatten()
            .filter_map(|p| node_port_spec(p).ok().flatten())
            .collect();
        self.allocate(&ports, skipped_health_check_port(spec));
    }
}

/// kube-proxy does not program the Service at all: headless (`ShouldSkipService`
/// looks at `spec.clusterIP` alone, not `clusterIPs`), ExternalName, or opted out by
/// label (its informers never see the Service).
fn skipped_by_kube_proxy(service: &Service, spec: &ServiceSpec) -> bool {
    let headless = matches!(spec.cluster_ip.as_deref(), None | Some("" | "None"));
    let external_name = spec.type_.as_deref() == Some("ExternalName");
    let labels = service.metadata.labels.as_ref();
    let opted_out = OPT_OUT_LABELS
        .iter()
        .any(|label| labels.is_some_and(|l| l.contains_key(*label)));
    headless || external_name || opted_out
}

/// `ExternalPolicyLocal`: externally accessible by type (NodePort, LoadBalancer, or
/// ClusterIP with externalIPs) and externalTrafficPolicy Local.
fn external_policy_local(spec: &ServiceSpec) -> bool {
    let externally_accessible = match spec.type_.as_deref() {
        Some("NodePort") | Some("LoadBalancer") => true,
        Some("ClusterIP") | None => spec.external_ips.as_ref().is_some_and(|ips| !ips.is_empty()),
        _ => false,
    };
    externally_accessible && spec.external_traffic_policy.as_deref() == Some("Local")
}

/// The health-check node port a skipped Service still holds, if any.
fn skipped_health_check_port(spec: &ServiceSpec) -> Option<u16> {
    spec.health_check_node_port
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
}

/// The nodePort of one Service port: `Ok(None)` when it has none; an error when it
/// has one kube-proxy could not program. The API defaults a missing protocol to TCP.
fn node_port_spec(port: &ServicePort) -> Result<Option<NodePortSpec>, String> {
    let Some(node_port) = port.node_port.filter(|p| *p != 0) else {
        return Ok(None);
    };
    let name = port.name.clone().unwrap_or_default();
    let node_port =
        u16::try_from(node_port).map_err(|_| format!("nodePort {node_port} is out of range; ignored"))?;
    let protocol = match port.protocol.as_deref() {
        None => Protocol::Tcp,
        Some(p) => parse_api_protocol(p)
            .ok_or_else(|| format!("port {name:?} has unknown protocol {p:?}; ignored"))?,
    };
    Ok(Some(NodePortSpec {
        name,
        protocol,
        node_port,
    }))
}

/// `Kind ns/name` for messages, with `?` for what is missing.
pub(crate) fn object_name(kind: &str, namespace: &Option<String>, name: &Option<String>) -> String {
    let part = |s: &Option<String>| s.as_deref().filter(|s| !s.is_empty()).unwrap_or("?").to_string();
    format!("{kind} {}/{}", part(namespace), part(name))
}
