//! Behaviour tests of the desired state, with plain API objects written as kubectl
//! prints them.

mod compact;
mod semantics;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};

use super::{DesiredPort, DesiredState, FamilyEndpoints};
use crate::heart::model::{Family, Protocol};

pub(crate) const CREATED: &str = "2024-05-01T10:00:00Z";

/// A Service `ns/name` with the given spec.
pub(crate) fn service(ns: &str, name: &str, spec: Value) -> Service {
    serde_json::from_value(service_json(ns, name, spec)).expect("service fixture")
}

pub(crate) fn service_json(ns: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": ns, "name": name, "creationTimestamp": CREATED},
        "spec": spec,
    })
}

/// A single-stack IPv4 NodePort Service with one unnamed TCP port.
pub(crate) fn nodeport_service(ns: &str, name: &str, node_port: u16) -> Service {
    service(
        ns,
        name,
        json!({
            "type": "NodePort",
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"],
            "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": node_port}],
        }),
    )
}

/// An EndpointSlice `ns/name` of Service `service`.
pub(crate) fn slice(
    ns: &str,
    name: &str,
    service: &str,
    address_type: &str,
    ports: Value,
    endpoints: Value,
) -> EndpointSlice {
    serde_json::from_value(slice_json(ns, name, service, address_type, ports, endpoints))
        .expect("slice fixture")
}

pub(crate) fn slice_json(
    ns: &str,
    name: &str,
    service: &str,
    address_type: &str,
    ports: Value,
    endpoints: Value,
) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "namespace": ns,
            "name": name,
            "labels": {"kubernetes.io/service-name": service},
            "creationTimestamp": CREATED,
        },
        "addressType": address_type,
        "ports": ports,
        "endpoints": endpoints,
    })
}

/// An IPv4 slice with one unnamed TCP port 8080, as the controller writes it.
pub(crate) fn v4_slice(ns: &str, name: &str, service: &str, endpoints: Value) -> EndpointSlice {
    slice(
        ns,
        name,
        service,
        "IPv4",
        json!([{"name": "", "port": 8080, "protocol": "TCP"}]),
        endpoints,
    )
}

/// A ready endpoint on `node`.
pub(crate) fn ready(ip: &str, node: &str) -> Value {
    endpoint(ip, node, Some(true), Some(true), Some(false))
}

/// An endpoint with explicit conditions (None: the condition is left out).
pub(crate) fn endpoint(
    ip: &str,
    node: &str,
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
) -> Value {
    let mut conditions = serde_json::Map::new();
    for (key, value) in [
        ("ready", ready),
        ("serving", serving),
        ("terminating", terminating),
    ] {
        if let Some(v) = value {
            conditions.insert(key.to_string(), Value::Bool(v));
        }
    }
    json!({"addresses": [ip], "conditions": conditions, "nodeName": node})
}

/// `ip:port` strings as a set.
pub(crate) fn addrs(list: &[&str]) -> crate::heart::desired::EndpointSet {
    list.iter().map(|a| a.parse().expect("address")).collect()
}

/// The only desired port of `state`.
pub(crate) fn only_port(state: &DesiredState) -> &DesiredPort {
    assert_eq!(state.ports.len(), 1, "expected one port, got {:#?}", state.ports);
    &state.ports[0]
}

/// The endpoints of `port` in `family`.
pub(crate) fn family(port: &DesiredPort, family: Family) -> &FamilyEndpoints {
    port.endpoints(family)
        .unwrap_or_else(|| panic!("no {family} endpoints in {port:#?}"))
}

pub(crate) fn v4(port: &DesiredPort) -> &FamilyEndpoints {
    family(port, Family::Ipv4)
}

pub(crate) fn tcp(port: u16) -> (Protocol, u16) {
    (Protocol::Tcp, port)
}
