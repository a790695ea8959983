//! Services + EndpointSlices → [`DesiredState`], with kube-proxy's semantics.
//!
//! Objects are reduced to compact summaries as they arrive, so a caller streaming a
//! large cluster state (see `decode::cluster::file::read_cluster_state`) never holds
//! the API objects themselves.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::heart::acceptance::Acceptance;
use crate::heart::desired::model::{DesiredPort, DesiredState, LABEL_ZONE, ObjectProblem};
use crate::heart::desired::record::{ServiceKey, ServiceRecord, ServiceSummary, SliceRecord};
use crate::heart::desired::slices::{SliceRead, SliceSummary, ZoneTable, merge_port};
use crate::heart::desired::topology::{NodeView, PortPolicy, ZoneView, categorize};
use crate::heart::model::{Protocol, ServicePortRef};

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

/// Builds a [`DesiredState`] from Services and EndpointSlices given one at a time, in
/// any order. Each object is reduced on arrival; [`finish`](Self::finish) joins them.
#[derive(Debug)]
pub struct DesiredBuilder {
    node: Option<String>,
    zones: ZoneTable,
    services: HashMap<ServiceKey, ServiceSummary>,
    /// Each Service's slices by name.
    slices: HashMap<ServiceKey, Vec<(Box<str>, SliceSummary)>>,
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
        Self::with_zones(node, ZoneTable::default())
    }

    /// A builder for records read with `zones` (the zone names their hints use).
    pub fn with_zones(node: Option<&str>, zones: ZoneTable) -> DesiredBuilder {
        // kube-proxy treats an empty node name as no node (`len(nodeName) > 0`).
        let node = node.filter(|n| !n.is_empty()).map(str::to_string);
        DesiredBuilder {
            node: node.clone(),
            zones,
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
        self.add_service_record(&ServiceRecord::of(service));
    }

    /// Adds (or replaces, when seen before) a Service as its record holds it.
    pub fn add_service_record(&mut self, record: &ServiceRecord) {
        let Some((namespace, name)) = record.key() else {
            self.apply_service_problems(record);
            return;
        };
        let key: ServiceKey = (namespace.to_string(), name.to_string());
        if self.services.remove(&key).is_some() {
            self.problem(record.object(), "is listed twice; the later copy is used");
        }
        match record.acceptances.as_deref() {
            None => {
                self.accepted_by_services.remove(&key);
            }
            Some(Ok(accepted)) => {
                self.accepted_by_services.insert(key.clone(), accepted.clone());
            }
            Some(Err(problem)) => {
                self.accepted_by_services.remove(&key);
                self.state.acceptance_problems.push(ObjectProblem {
                    object: record.object(),
                    problem: problem.clone(),
                });
            }
        }
        self.apply_service_problems(record);
        if let Some(summary) = &record.summary {
            self.services.insert(key, summary.clone());
        }
    }

    /// A record's problems and the nodePorts it keeps as allocated.
    fn apply_service_problems(&mut self, record: &ServiceRecord) {
        if !record.problems.is_empty() {
            let object = record.object();
            for problem in &record.problems {
                self.problem(object.as_str(), problem.as_str());
            }
        }
        self.state
            .other_allocated
            .extend(record.allocated.iter().copied());
    }

    /// Adds (or replaces, when seen before) an EndpointSlice.
    pub fn add_endpoint_slice(&mut self, slice: &EndpointSlice) {
        let record = SliceRecord::of(slice, self.node.as_deref(), &mut self.zones);
        self.add_slice_record(&record);
    }

    /// Adds (or replaces, when seen before) an EndpointSlice as its record holds it
    /// (read with this builder's zone names).
    pub fn add_slice_record(&mut self, record: &SliceRecord) {
        match &record.read {
            SliceRead::Ignore => {}
            SliceRead::Broken { problem } => {
                self.unreadable_slice(
                    record.object(),
                    &**problem,
                    Some(&*record.namespace),
                    record.service.as_deref(),
                );
            }
            SliceRead::Use { summary, problems } => {
                for problem in problems {
                    self.problem(record.object(), problem.as_str());
                }
                // A slice kube-proxy uses has a namespace, a name and a Service label.
                let service = record.service.as_deref().unwrap_or_default();
                let group = self
                    .slices
                    .entry((record.namespace.to_string(), service.to_string()))
                    .or_default();
                match group.iter_mut().find(|(name, _)| *name == record.name) {
                    Some((_, existing)) => {
                        *existing = summary.clone();
                        self.problem(record.object(), "is listed twice; the later copy is used");
                    }
                    None => group.push((record.name.clone(), summary.clone())),
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
            slices.sort_by(|a, b| a.0.cmp(&b.0));
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
        slices: &[(Box<str>, SliceSummary)],
        view: NodeView,
        out: &mut Vec<DesiredPort>,
    ) {
        let last_change = slices
            .iter()
            .filter_map(|(_, s)| s.last_change)
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
        for port in &*service.ports {
            let mut endpoints = Vec::with_capacity(service.families.len());
            let mut ambiguous = false;
            for &family in &*service.families {
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
                    port_name: port.name.to_string(),
                },
                protocol: port.protocol,
                node_port: port.node_port,
                families: service.families.to_vec(),
                external_policy_local: service.external_policy_local,
                internal_policy_local: service.internal_policy_local,
                health_check_node_port: service.health_check_node_port,
                endpoints,
                uncertain: slice_unreadable || ambiguous || local_unknown,
                last_change,
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
}
