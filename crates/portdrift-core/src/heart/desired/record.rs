//! One Service or EndpointSlice reduced, on arrival, to everything the desired-state
//! builder takes from it: what the API watch keeps in place of the object.
//!
//! A trimmed API object still carries the layout of every field the API defines (an
//! `Endpoint` alone has a dozen optional ones), several kilobytes per Service with its
//! slice; the record holds only what [`DesiredBuilder`](super::DesiredBuilder) reads,
//! with the problems reducing it found, so that building from records is building from
//! the objects (`DesiredBuilder::add_service` is `add_service_record` of the record).

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use crate::heart::acceptance::{Acceptance, service_acceptances};
use crate::heart::desired::model::CiliumAnnotations;
use crate::heart::desired::slices::{
    LABEL_SERVICE_NAME, OPT_OUT_LABELS, SliceRead, ZoneTable, last_recorded_change, parse_api_protocol,
    parse_ip_sloppy, read_slice,
};
use crate::heart::model::{Family, Protocol};

/// `(namespace, name)` of a Service.
pub type ServiceKey = (String, String);

/// A Service port that owns a nodePort.
#[derive(Debug, Clone)]
pub(crate) struct NodePortSpec {
    pub(crate) name: Box<str>,
    pub(crate) protocol: Protocol,
    pub(crate) node_port: u16,
}

/// A Service kube-proxy programs, reduced to what the desired state needs.
#[derive(Debug, Clone)]
pub(crate) struct ServiceSummary {
    pub(crate) families: Box<[Family]>,
    pub(crate) ports: Box<[NodePortSpec]>,
    pub(crate) external_policy_local: bool,
    pub(crate) internal_policy_local: bool,
    pub(crate) health_check_node_port: Option<u16>,
    pub(crate) created: Option<Timestamp>,
    pub(crate) cilium: Option<Box<CiliumAnnotations>>,
}

/// One Service as the builder takes it.
#[derive(Debug, Clone)]
pub struct ServiceRecord {
    /// `metadata.namespace` and `metadata.name`, empty when missing (its ports are then
    /// only allocated).
    pub(crate) namespace: Box<str>,
    pub(crate) name: Box<str>,
    /// What reading it found wrong, in order.
    pub(crate) problems: Box<[String]>,
    /// Its own acceptances (`portdrift.io/accept`), or why they cannot be applied;
    /// None when it has none (nearly every Service).
    pub(crate) acceptances: Option<Box<Result<Vec<Acceptance>, String>>>,
    /// None: it owns no nodePort, or kube-proxy skips it.
    pub(crate) summary: Option<ServiceSummary>,
    /// nodePorts it holds that no rule is checked for (a skipped Service's).
    pub(crate) allocated: Box<[(Protocol, u16)]>,
    /// It has a nodePort or a healthCheckNodePort: its changes can move this node's
    /// NodePort rules.
    pub(crate) has_node_ports: bool,
    /// `metadata.resourceVersion`: the same version is the same Service.
    pub(crate) version: Option<Box<str>>,
}

/// What reading a Service collects before it becomes a record.
#[derive(Default)]
struct ServiceReading {
    problems: Vec<String>,
    allocated: Vec<(Protocol, u16)>,
}

impl ServiceRecord {
    /// Reduces `service` as the builder would read it.
    pub fn of(service: &Service) -> ServiceRecord {
        let meta = &service.metadata;
        let namespace = meta.namespace.as_deref().filter(|s| !s.is_empty());
        let name = meta.name.as_deref().filter(|s| !s.is_empty());
        let spec = service.spec.as_ref();
        let mut reading = ServiceReading::default();
        let mut acceptances = Ok(Vec::new());
        let mut summary = None;
        if let (Some(namespace), Some(name)) = (namespace, name) {
            acceptances = service_acceptances(namespace, name, meta.annotations.as_ref());
            summary = reading.summarize(service);
        } else {
            reading
                .problem("has no metadata.name or metadata.namespace; its nodePorts are kept as allocated");
            if let Some(spec) = spec {
                let ports: Vec<NodePortSpec> = spec
                    .ports
                    .iter()
                    .flatten()
                    .filter_map(|p| node_port_spec(p).ok().flatten())
                    .collect();
                reading.allocate(&ports, skipped_health_check_port(spec));
            }
        }
        ServiceRecord {
            namespace: namespace.unwrap_or_default().into(),
            name: name.unwrap_or_default().into(),
            problems: reading.problems.into_boxed_slice(),
            acceptances: (!matches!(&acceptances, Ok(a) if a.is_empty())).then(|| Box::new(acceptances)),
            summary,
            allocated: reading.allocated.into_boxed_slice(),
            has_node_ports: spec.is_some_and(has_node_ports),
            version: resource_version(meta).map(Into::into),
        }
    }

    /// `(namespace, name)` of the record's Service, when it is named.
    pub fn key(&self) -> Option<(&str, &str)> {
        (!self.namespace.is_empty() && !self.name.is_empty()).then_some((&*self.namespace, &*self.name))
    }

    /// `Service ns/name`, with `?` for what is missing, for problems.
    pub fn object(&self) -> String {
        object_name_of("Service", &self.namespace, &self.name)
    }

    /// Whether its changes can move this node's NodePort rules.
    pub fn has_node_ports(&self) -> bool {
        self.has_node_ports
    }

    /// Its `metadata.resourceVersion`, when it has one.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }
}

impl ServiceReading {
    fn problem(&mut self, problem: impl Into<String>) {
        self.problems.push(problem.into());
    }

    fn allocate(&mut self, ports: &[NodePortSpec], health_check: Option<u16>) {
        self.allocated
            .extend(ports.iter().map(|p| (p.protocol, p.node_port)));
        self.allocated.extend(health_check.map(|p| (Protocol::Tcp, p)));
    }

    /// The Service as kube-proxy programs it; None when it owns no nodePort or
    /// kube-proxy skips it (its nodePorts then count as allocated).
    fn summarize(&mut self, service: &Service) -> Option<ServiceSummary> {
        let Some(spec) = service.spec.as_ref() else {
            self.problem("has no spec");
            return None;
        };
        let ports = self.node_port_specs(spec);
        if ports.is_empty() {
            return None;
        }
        if skipped_by_kube_proxy(service, spec) {
            self.allocate(&ports, skipped_health_check_port(spec));
            return None;
        }
        let families = self.service_families(spec);
        if families.is_empty() {
            self.problem("has no usable clusterIP; its nodePorts are kept as allocated");
            self.allocate(&ports, None);
            return None;
        }
        Some(ServiceSummary {
            families: families.into_boxed_slice(),
            ports: ports.into_boxed_slice(),
            external_policy_local: external_policy_local(spec),
            internal_policy_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
            health_check_node_port: self.health_check_node_port(spec),
            created: last_recorded_change(&service.metadata),
            cilium: CiliumAnnotations::from_annotations(service.metadata.annotations.as_ref()),
        })
    }

    /// The ports of `spec` that own a nodePort. Ports kube-proxy could not program
    /// (unknown protocol, nodePort out of range) are reported and left out.
    fn node_port_specs(&mut self, spec: &ServiceSpec) -> Vec<NodePortSpec> {
        let mut out = Vec::new();
        for port in spec.ports.iter().flatten() {
            match node_port_spec(port) {
                Ok(Some(spec)) => out.push(spec),
                Ok(None) => {}
                Err(problem) => self.problem(problem),
            }
        }
        out
    }

    /// One family per clusterIP (`spec.clusterIPs`, or `spec.clusterIP` when that list
    /// is empty), as kube-proxy runs one proxier per family.
    fn service_families(&mut self, spec: &ServiceSpec) -> Vec<Family> {
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
                None => self.problem(format!("clusterIP {ip:?} is not an IP address; ignored")),
            }
        }
        families
    }

    /// The health-check node port kube-proxy serves: only a LoadBalancer with
    /// externalTrafficPolicy Local has one (`NeedsHealthCheck`).
    fn health_check_node_port(&mut self, spec: &ServiceSpec) -> Option<u16> {
        if spec.type_.as_deref() != Some("LoadBalancer") || !external_policy_local(spec) {
            return None;
        }
        let port = spec.health_check_node_port.filter(|p| *p != 0)?;
        let valid = u16::try_from(port).ok().filter(|p| *p != 0);
        if valid.is_none() {
            self.problem(format!("healthCheckNodePort {port} is out of range; ignored"));
        }
        valid
    }
}

/// One EndpointSlice as the builder takes it.
#[derive(Debug)]
pub struct SliceRecord {
    /// `metadata.namespace` and `metadata.name`, empty when missing.
    pub(crate) namespace: Box<str>,
    pub(crate) name: Box<str>,
    /// The Service its `kubernetes.io/service-name` label names, if any.
    pub(crate) service: Option<Box<str>>,
    pub(crate) read: SliceRead,
    /// `metadata.resourceVersion`: the same version is the same slice.
    pub(crate) version: Option<Box<str>>,
}

impl SliceRecord {
    /// Reduces `slice` as the builder for `node` would read it, its zone hints named
    /// in `zones`.
    pub fn of(slice: &EndpointSlice, node: Option<&str>, zones: &mut ZoneTable) -> SliceRecord {
        let meta = &slice.metadata;
        SliceRecord {
            namespace: meta.namespace.as_deref().unwrap_or_default().into(),
            name: meta.name.as_deref().unwrap_or_default().into(),
            service: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_SERVICE_NAME))
                .map(|service| service.as_str().into()),
            read: read_slice(slice, node, zones),
            version: resource_version(meta).map(Into::into),
        }
    }

    /// `(namespace, name)` of the Service its `kubernetes.io/service-name` label
    /// names, if any.
    pub fn owner(&self) -> Option<(&str, &str)> {
        Some((&self.namespace, self.service.as_deref()?))
    }

    /// `EndpointSlice ns/name`, with `?` for what is missing, for problems.
    pub fn object(&self) -> String {
        object_name_of("EndpointSlice", &self.namespace, &self.name)
    }

    /// Its `metadata.resourceVersion`, when it has one.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }
}

/// The Service has a NodePort (or a healthCheckNodePort).
fn has_node_ports(spec: &ServiceSpec) -> bool {
    spec.health_check_node_port.is_some()
        || spec
            .ports
            .iter()
            .flatten()
            .any(|p| p.node_port.is_some_and(|n| n != 0))
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
    let name = port.name.as_deref().unwrap_or_default();
    let node_port =
        u16::try_from(node_port).map_err(|_| format!("nodePort {node_port} is out of range; ignored"))?;
    let protocol = match port.protocol.as_deref() {
        None => Protocol::Tcp,
        Some(p) => parse_api_protocol(p)
            .ok_or_else(|| format!("port {name:?} has unknown protocol {p:?}; ignored"))?,
    };
    Ok(Some(NodePortSpec {
        name: name.into(),
        protocol,
        node_port,
    }))
}

/// An object's `metadata.resourceVersion`; empty is none. The same version is the
/// same object.
pub fn resource_version(meta: &ObjectMeta) -> Option<&str> {
    meta.resource_version.as_deref().filter(|v| !v.is_empty())
}

/// `Kind ns/name` for messages, with `?` for what is missing.
pub(crate) fn object_name(kind: &str, namespace: &Option<String>, name: &Option<String>) -> String {
    object_name_of(
        kind,
        namespace.as_deref().unwrap_or_default(),
        name.as_deref().unwrap_or_default(),
    )
}

/// [`object_name`] of names that are empty when missing.
fn object_name_of(kind: &str, namespace: &str, name: &str) -> String {
    fn part(s: &str) -> &str {
        if s.is_empty() { "?" } else { s }
    }
    format!("{kind} {}/{}", part(namespace), part(name))
}
