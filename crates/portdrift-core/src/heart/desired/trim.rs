//! The API's objects reduced to exactly what the desired-state builder reads, and the
//! builder run over such objects: what the API watch and the one-shot lists keep, and
//! how a bundle's Services are read for the NodePort table.
//!
//! Each trim rebuilds the object from the fields `DesiredBuilder` reads, so fields the
//! API adds later are dropped by default and memory follows the NodePort plumbing,
//! not `managedFields`. The watch test `initial_sync_matches_desired_state` guards it.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::heart::acceptance::ACCEPT_ANNOTATIONS;
use crate::heart::desired::build::DesiredBuilder;
use crate::heart::desired::model::{CILIUM_ANNOTATIONS, DesiredState};
use crate::heart::desired::slices::{
    ANNOTATION_LAST_CHANGE_TRIGGER, LABEL_SERVICE_NAME, OPT_OUT_LABELS, last_recorded_change,
};

pub use crate::heart::desired::model::LABEL_ZONE;

/// The desired state from Services and EndpointSlices, in the order given, for a node
/// with `node_labels` (None: its Node was not read).
pub fn desired_from_objects<S, E>(
    node: Option<&str>,
    services: &[S],
    slices: &[E],
    node_labels: Option<&BTreeMap<String, String>>,
) -> DesiredState
where
    S: Borrow<Service>,
    E: Borrow<EndpointSlice>,
{
    let mut builder = DesiredBuilder::new(node);
    for service in services {
        builder.add_service(service.borrow());
    }
    for slice in slices {
        builder.add_endpoint_slice(slice.borrow());
    }
    builder.finish(node_labels.cloned())
}

/// The labels of the Node called `name` among `nodes` (empty when it has none), or
/// None when it is not there.
pub fn node_labels<N: Borrow<Node>>(
    nodes: impl Iterator<Item = N>,
    name: &str,
) -> Option<BTreeMap<String, String>> {
    nodes.into_iter().find_map(|node| {
        let meta = &node.borrow().metadata;
        (meta.name.as_deref() == Some(name)).then(|| meta.labels.clone().unwrap_or_default())
    })
}

/// Moves the newest managedFields time into `creationTimestamp` before managedFields
/// go: the grace window measures from the object's last recorded change, and a spec
/// update (a nodePort edited) moves only the managedFields times.
fn fold_last_change(meta: &mut ObjectMeta) {
    if let Some(newest) = last_recorded_change(meta) {
        meta.creation_timestamp = Some(Time(newest));
    }
}

/// Metadata reduced to identity, creation time, and the labels and annotations in
/// `keep_labels` / `keep_annotations`. `managedFields`, `ownerReferences`, `uid` and
/// the rest go.
fn trim_meta(meta: &mut ObjectMeta, keep_labels: &[&str], keep_annotations: &[&str]) {
    let keep = |map: Option<BTreeMap<String, String>>, keys: &[&str]| {
        let kept: BTreeMap<String, String> = map
            .into_iter()
            .flatten()
            .filter(|(k, _)| keys.contains(&k.as_str()))
            .collect();
        (!kept.is_empty()).then_some(kept)
    };
    *meta = ObjectMeta {
        name: meta.name.take(),
        namespace: meta.namespace.take(),
        // Kept: a relist reuses the object it already holds when the resourceVersion
        // is unchanged (the watch's store).
        resource_version: meta.resource_version.take(),
        creation_timestamp: meta.creation_timestamp.take(),
        labels: keep(meta.labels.take(), keep_labels),
        annotations: keep(meta.annotations.take(), keep_annotations),
        ..ObjectMeta::default()
    };
}

/// A Service reduced to what decides its NodePorts. The whole `status` goes: a
/// load balancer's ingress IPs are not part of NodePort plumbing, and nothing else in
/// it is read. The selector (often the largest part of a spec) goes too: endpoints come
/// from EndpointSlices.
pub fn trim_service(service: &mut Service) {
    fold_last_change(&mut service.metadata);
    let keep: Vec<&str> = ACCEPT_ANNOTATIONS
        .iter()
        .chain(&CILIUM_ANNOTATIONS)
        .copied()
        .collect();
    trim_meta(&mut service.metadata, &OPT_OUT_LABELS, &keep);
    service.status = None;
    service.spec = service.spec.take().map(|spec| ServiceSpec {
        cluster_ip: spec.cluster_ip,
        cluster_ips: spec.cluster_ips,
        // Decides whether a ClusterIP Service is externally accessible (Local policy).
        external_ips: spec.external_ips,
        external_traffic_policy: spec.external_traffic_policy,
        internal_traffic_policy: spec.internal_traffic_policy,
        health_check_node_port: spec.health_check_node_port,
        type_: spec.type_,
        ports: spec.ports.map(|ports| {
            ports
                .into_iter()
                .map(|p| ServicePort {
                    name: p.name,
                    node_port: p.node_port,
                    port: p.port,
                    protocol: p.protocol,
                    ..ServicePort::default()
                })
                .collect()
        }),
        ..ServiceSpec::default()
    });
}

/// An EndpointSlice reduced to what kube-proxy reads (per endpoint the first address,
/// conditions, hints, node name). The last-change-trigger-time annotation is folded
/// into `creationTimestamp`, the newer of the two, the only way the builder reads them.
pub fn trim_endpoint_slice(slice: &mut EndpointSlice) {
    fold_last_change(&mut slice.metadata);
    let triggered = slice
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LAST_CHANGE_TRIGGER))
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
    let labels: Vec<&str> = std::iter::once(LABEL_SERVICE_NAME)
        .chain(OPT_OUT_LABELS)
        .collect();
    trim_meta(&mut slice.metadata, &labels, &[]);
    let created = &mut slice.metadata.creation_timestamp;
    if let Some(triggered) = triggered
        && created.as_ref().is_none_or(|c| c.0 < triggered)
    {
        *created = Some(Time(triggered));
    }
    for endpoint in &mut slice.endpoints {
        let mut addresses = std::mem::take(&mut endpoint.addresses);
        addresses.truncate(1);
        addresses.shrink_to_fit();
        *endpoint = Endpoint {
            addresses,
            conditions: endpoint.conditions.take(),
            hints: endpoint.hints.take(),
            node_name: endpoint.node_name.take(),
            ..Endpoint::default()
        };
    }
    slice.endpoints.shrink_to_fit();
    slice.ports = slice.ports.take().map(|ports| {
        ports
            .into_iter()
            .map(|p| EndpointPort {
                name: p.name,
                port: p.port,
                protocol: p.protocol,
                app_protocol: None,
            })
            .collect()
    });
}

/// A pod as the squatters' owner lookup keeps it: its name, namespace and UID.
pub fn trim_pod(pod: &mut Pod) {
    let uid = pod.metadata.uid.take();
    trim_meta(&mut pod.metadata, &[], &[]);
    pod.metadata.uid = uid;
    pod.spec = None;
    pod.status = None;
}

/// A Node reduced to its name and labels (the zone for topology, all of them for
/// acceptances' node selectors): its status (images, conditions, addresses) is by far
/// the largest part and none of it matters here. Only this node's Node is kept.
pub fn trim_node(node: &mut Node) {
    let labels = node.metadata.labels.take();
    trim_meta(&mut node.metadata, &[], &[]);
    node.metadata.labels = labels;
    node.spec = None;
    node.status = None;
}

#[cfg(test)]
mod tests;
