//! What a Service holds in the API server's NodePort allocation: each port's nodePort,
//! and the health-check node port of a LoadBalancer with externalTrafficPolicy Local.
//!
//! The API server's allocator is a bitmap of port numbers, not of protocol/port pairs:
//! one Service may use a number for TCP and UDP at once (DNS), but no other Service may
//! take that number for any protocol ("provided port is already allocated").

use k8s_openapi::api::core::v1::{Service, ServicePort};
use serde::Serialize;

use crate::heart::model::Protocol;

/// One number held by one Service.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
pub struct Claim {
    pub port: u16,
    pub protocol: Protocol,
    /// `namespace/name`.
    pub service: String,
    /// The Service port's name (none for a health-check node port or an unnamed port).
    pub port_name: Option<String>,
    /// `NodePort`, `LoadBalancer`, … as the spec says (`ClusterIP` when unset).
    #[serde(rename = "type")]
    pub service_type: String,
    /// The Service's `healthCheckNodePort` (kube-proxy serves HTTP on it: TCP).
    pub health_check: bool,
}

/// A Service's value that cannot be a claim, reported rather than dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ClaimProblem {
    /// `namespace/name`.
    pub service: String,
    pub problem: String,
}

/// `namespace/name`, with `?` for what is missing.
pub fn service_key(service: &Service) -> String {
    let part = |s: &Option<String>| s.as_deref().filter(|s| !s.is_empty()).unwrap_or("?").to_string();
    format!(
        "{}/{}",
        part(&service.metadata.namespace),
        part(&service.metadata.name)
    )
}

/// The numbers `service` holds. Values that no API server would have stored (a
/// nodePort outside 1-65535, an unknown protocol) go to `problems`.
pub fn claims_of(service: &Service, problems: &mut Vec<ClaimProblem>) -> Vec<Claim> {
    let key = service_key(service);
    let Some(spec) = service.spec.as_ref() else {
        return Vec::new();
    };
    let service_type = spec.type_.clone().unwrap_or_else(|| "ClusterIP".to_string());
    let claim = |port, protocol, port_name, health_check| Claim {
        port,
        protocol,
        service: key.clone(),
        port_name,
        service_type: service_type.clone(),
        health_check,
    };
    let mut out = Vec::new();
    for port in spec.ports.iter().flatten() {
        match node_port_of(port) {
            Ok(Some((number, protocol))) => out.push(claim(number, protocol, port.name.clone(), false)),
            Ok(None) => {}
            Err(problem) => problems.push(ClaimProblem {
                service: key.clone(),
                problem,
            }),
        }
    }
    match spec.health_check_node_port.filter(|p| *p != 0).map(u16::try_from) {
        Some(Ok(number)) => out.push(claim(number, Protocol::Tcp, None, true)),
        Some(Err(_)) => problems.push(ClaimProblem {
            service: key.clone(),
            problem: format!(
                "healthCheckNodePort {} is not a port number",
                spec.health_check_node_port.unwrap_or_default()
            ),
        }),
        None => {}
    }
    out
}

/// A Service port's nodePort and protocol (TCP when unset, as the API defaults it).
fn node_port_of(port: &ServicePort) -> Result<Option<(u16, Protocol)>, String> {
    let Some(node_port) = port.node_port.filter(|p| *p != 0) else {
        return Ok(None);
    };
    let name = port.name.as_deref().unwrap_or("");
    let number = u16::try_from(node_port)
        .map_err(|_| format!("port {name:?}: nodePort {node_port} is not a port number"))?;
    let protocol = match port.protocol.as_deref() {
        None => Protocol::Tcp,
        Some(p) => Protocol::parse(p)
            .filter(|_| p.chars().all(|c| c.is_ascii_alphabetic()))
            .ok_or_else(|| format!("port {name:?}: unknown protocol {p:?}"))?,
    };
    Ok(Some((number, protocol)))
}

#[cfg(test)]
mod tests;
