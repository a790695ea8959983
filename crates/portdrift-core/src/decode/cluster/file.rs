//! Streaming reader of a bundle's `cluster.json`: a v1 `List` as
//! `kubectl get services,endpointslices -A -o json` prints it (optionally with `Node`
//! items too).
//!
//! The `items` array is walked one item at a time: each item's text is held only
//! while it is reduced into a [`DesiredBuilder`], so a large file never sits in memory
//! as a whole, let alone as a `serde_json::Value`. An item that does not deserialize is
//! reported and skipped; only a document that is not JSON, or not a List, is an error.

use std::collections::BTreeMap;
use std::io::Read;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::decode::cluster::error::{ClusterFileError, Position, message_without_position, syntax_error};
use crate::decode::cluster::list_stream::{ListEvent, walk_list};
use crate::decode::cluster::probe::{ItemProbe, LabelProbe, LabelValue, probe_item};
use crate::heart::desired::build::DesiredBuilder;
use crate::heart::desired::model::{DesiredState, LABEL_ZONE, ObjectProblem};
use crate::heart::desired::record::object_name;
use crate::heart::desired::slices::parse_api_protocol;
use crate::heart::desired::trim::trim_service;
use crate::heart::model::Protocol;

/// Reads a `cluster.json` List from `reader` and computes the desired state of `node`
/// (whose Node item, if present, gives its labels: the zone for topology hints, the
/// rest for acceptances' node selectors).
pub fn read_cluster_state<R: Read>(reader: R, node: Option<&str>) -> Result<DesiredState, ClusterFileError> {
    let mut state = ReadState {
        builder: DesiredBuilder::new(node),
        node,
        node_labels: None,
        list_kind: None,
        next_index: 0,
        counts: KindCounts::default(),
    };
    let kind = walk_list(reader, |event| match event {
        ListEvent::Kind(kind) => {
            state.list_kind = kind;
            Ok(())
        }
        ListEvent::Item(bytes, at) => state.take_item(bytes, at),
    })?;
    if !is_list_kind(kind.as_deref()) {
        let found = kind.map_or_else(|| "it has no kind".to_string(), |k| format!("its kind is {k:?}"));
        return Err(ClusterFileError::NotAList { found });
    }
    let KindCounts {
        services,
        slices,
        endpoints,
        api_service,
    } = state.counts;
    // Every cluster has `default/kubernetes`: a list without it was filtered (`-n`,
    // `-l`), and a port none of its Services owns may belong to one it left out.
    if services > 0 && !api_service {
        state.builder.services_partial(
            "the list",
            "lacks Service default/kubernetes, which every cluster has: it looks filtered by namespace or label, so a NodePort rule no listed Service owns was not judged stale; capture it with `kubectl get services,endpointslices -A -o json`",
        );
    }
    // Every cluster's `default/kubernetes` Service has an EndpointSlice: Services alone
    // are a list that left them out, and every endpoint would look stale.
    if services > 0 && slices == 0 {
        let old = if endpoints > 0 {
            format!(" (its {endpoints} Endpoints objects are not what kube-proxy reads)")
        } else {
            String::new()
        };
        state.builder.endpoints_unknown(
            "the list",
            format!(
                "holds {} but no EndpointSlice{old}, as `kubectl get services -o json` prints: no endpoint was compared; capture it with `kubectl get services,endpointslices -A -o json`",
                crate::heart::words::count_of(services, "Service")
            ),
        );
    }
    Ok(state.builder.finish(state.node_labels))
}

/// How many items of each kind that matters the List held.
#[derive(Debug, Default, Clone, Copy)]
struct KindCounts {
    services: usize,
    slices: usize,
    /// v1 Endpoints, which kube-proxy no longer reads.
    endpoints: usize,
    /// `default/kubernetes`, the API server's Service, was listed.
    api_service: bool,
}

fn is_list_kind(kind: Option<&str>) -> bool {
    matches!(
        kind,
        Some("List" | "ServiceList" | "EndpointSliceList" | "NodeList")
    )
}

/// What the reader carries from item to item.
struct ReadState<'n> {
    builder: DesiredBuilder,
    node: Option<&'n str>,
    node_labels: Option<BTreeMap<String, String>>,
    /// The List's own kind, if it came before `items` (typed lists omit item kinds).
    list_kind: Option<String>,
    next_index: usize,
    counts: KindCounts,
}

impl ReadState<'_> {
    /// Reduces one item. Only a JSON syntax error in it is fatal.
    fn take_item(&mut self, raw: &[u8], at: Position) -> Result<(), ClusterFileError> {
        let index = self.next_index;
        self.next_index += 1;
        let probe = probe_item(raw).map_err(|e| syntax_error(&e, at))?;
        let kind = probe.kind.clone().or_else(|| self.kind_from_list());
        match kind.as_deref() {
            Some("Service") => {
                self.counts.services += 1;
                self.counts.api_service |= probe.namespace.as_deref() == Some("default")
                    && probe.name.as_deref() == Some("kubernetes");
                self.take_service(raw, &probe)
            }
            Some("EndpointSlice") => {
                self.counts.slices += 1;
                self.take_slice(raw, &probe)
            }
            Some("Endpoints") => self.counts.endpoints += 1,
            Some("Node") => self.take_node(raw, &probe),
            Some(_) => {}
            None => {
                self.builder
                    .problem(format!("item {index}"), "has no kind; skipped");
                self.builder.mark_uncertain();
            }
        }
        Ok(())
    }

    fn kind_from_list(&self) -> Option<String> {
        let list = self.list_kind.as_deref()?;
        list.strip_suffix("List")
            .filter(|k| !k.is_empty())
            .map(str::to_string)
    }

    fn take_service(&mut self, raw: &[u8], probe: &ItemProbe) {
        match serde_json::from_slice::<Service>(raw) {
            Ok(service) => self.builder.add_service(&service),
            Err(e) => {
                let object = object_name("Service", &probe.namespace, &probe.name);
                let ports = lenient_node_ports(raw);
                self.builder
                    .unreadable_service(object, cannot_read(&e), ports.as_deref());
            }
        }
    }

    fn take_slice(&mut self, raw: &[u8], probe: &ItemProbe) {
        match serde_json::from_slice::<EndpointSlice>(raw) {
            Ok(slice) => self.builder.add_endpoint_slice(&slice),
            Err(e) => {
                let object = object_name("EndpointSlice", &probe.namespace, &probe.name);
                let problem = cannot_read(&e);
                match &probe.labels {
                    // kube-proxy would have ignored this slice whatever it held.
                    Some(labels) if labels.opted_out || labels.service_name == LabelValue::Absent => {
                        self.builder
                            .problem(object, format!("{problem}; kube-proxy ignores it anyway"));
                    }
                    Some(LabelProbe {
                        service_name: LabelValue::Str(service),
                        ..
                    }) => {
                        let namespace = probe.namespace.as_deref();
                        self.builder
                            .unreadable_slice(object, problem, namespace, Some(service));
                    }
                    _ => self.builder.unreadable_slice(object, problem, None, None),
                }
            }
        }
    }

    /// This node's labels; a Node item that does not read as one gives only its zone.
    fn take_node(&mut self, raw: &[u8], probe: &ItemProbe) {
        if self.node.is_some() && probe.name.as_deref() == self.node {
            let labels = serde_json::from_slice::<ObjectLabels>(raw)
                .map(|node| node.metadata.labels)
                .unwrap_or_else(|_| {
                    let zone = probe.labels.as_ref().and_then(|l| l.zone.clone());
                    zone.map(|z| (LABEL_ZONE.to_string(), z)).into_iter().collect()
                });
            self.node_labels = Some(labels);
        }
    }
}

/// A Node's labels, all this reader needs of it.
#[derive(serde::Deserialize)]
struct ObjectLabels {
    metadata: LabelsOnly,
}

#[derive(serde::Deserialize)]
struct LabelsOnly {
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// `cannot be read: <serde's message>`.
fn cannot_read(e: &serde_json::Error) -> String {
    format!("cannot be read: {}", message_without_position(e))
}

/// The nodePorts of a Service item that does not deserialize, read as leniently as
/// possible: integers or numeric strings, protocol defaulting to TCP. None when some
/// port's nodePort or protocol cannot be made out.
fn lenient_node_ports(raw: &[u8]) -> Option<Vec<(Protocol, u16)>> {
    let item: serde_json::Value = serde_json::from_slice(raw).ok()?;
    let ports = match item.get("spec") {
        None | Some(serde_json::Value::Null) => return Some(Vec::new()),
        Some(spec) => match spec.as_object()?.get("ports") {
            None | Some(serde_json::Value::Null) => return Some(Vec::new()),
            Some(ports) => ports.as_array()?,
        },
    };
    let mut out = Vec::new();
    for port in ports {
        let port = port.as_object()?;
        let node_port = match port.get("nodePort") {
            None | Some(serde_json::Value::Null) => continue,
            Some(serde_json::Value::Number(n)) => n.as_u64()?,
            Some(serde_json::Value::String(s)) => s.trim().parse().ok()?,
            Some(_) => return None,
        };
        if node_port == 0 {
            continue;
        }
        let node_port = u16::try_from(node_port).ok()?;
        let protocol = match port.get("protocol") {
            None | Some(serde_json::Value::Null) => Protocol::Tcp,
            Some(p) => parse_api_protocol(&p.as_str()?.to_ascii_uppercase())?,
        };
        out.push((protocol, node_port));
    }
    Some(out)
}

/// The Services of a cluster state file, every one of them: those kube-proxy skips
/// hold nodePorts in the API server's allocation all the same.
#[derive(Debug, Default)]
pub struct ServiceList {
    /// Trimmed as the API watch trims them ([`trim_service`]).
    pub services: Vec<Service>,
    /// Items that could not be read in full. A Service whose nodePorts could still be
    /// made out is in `services` with just those ports.
    pub problems: Vec<ObjectProblem>,
}

/// Reads every Service of a `cluster.json` List from `reader` (other kinds are
/// skipped), with the same streaming walk and the same leniency as
/// [`read_cluster_state`].
pub fn read_services<R: Read>(reader: R) -> Result<ServiceList, ClusterFileError> {
    let mut out = ServiceList::default();
    let mut list_kind: Option<String> = None;
    let kind = walk_list(reader, |event| match event {
        ListEvent::Kind(kind) => {
            list_kind = kind;
            Ok(())
        }
        ListEvent::Item(raw, at) => {
            let probe = probe_item(raw).map_err(|e| syntax_error(&e, at))?;
            let item_kind = probe.kind.clone().or_else(|| {
                let list = list_kind.as_deref()?;
                list.strip_suffix("List").map(str::to_string)
            });
            if item_kind.as_deref() == Some("Service") {
                take_any_service(raw, &probe, &mut out);
            }
            Ok(())
        }
    })?;
    if !is_list_kind(kind.as_deref()) {
        let found = kind.map_or_else(|| "it has no kind".to_string(), |k| format!("its kind is {k:?}"));
        return Err(ClusterFileError::NotAList { found });
    }
    Ok(out)
}

/// One Service item into `out`: whole, or as much of its nodePorts as can be read.
fn take_any_service(raw: &[u8], probe: &ItemProbe, out: &mut ServiceList) {
    match serde_json::from_slice::<Service>(raw) {
        Ok(mut service) => {
            trim_service(&mut service);
            out.services.push(service);
        }
        Err(e) => {
            let object = object_name("Service", &probe.namespace, &probe.name);
            let ports = lenient_node_ports(raw);
            let problem = match &ports {
                Some(_) => format!("{}; its nodePorts are counted", cannot_read(&e)),
                None => format!("{}; its nodePorts cannot be made out", cannot_read(&e)),
            };
            out.problems.push(ObjectProblem { object, problem });
            if let Some(ports) = ports {
                out.services.push(service_with_node_ports(probe, &ports));
            }
        }
    }
}

/// A stand-in for an unreadable Service: its name and the nodePorts read leniently.
fn service_with_node_ports(probe: &ItemProbe, ports: &[(Protocol, u16)]) -> Service {
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    Service {
        metadata: ObjectMeta {
            name: probe.name.clone(),
            namespace: probe.namespace.clone(),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(
                ports
                    .iter()
                    .map(|(protocol, node_port)| ServicePort {
                        protocol: Some(protocol.as_str().to_ascii_uppercase()),
                        node_port: Some(i32::from(*node_port)),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}
