//! Whether Cilium exposes a Service's nodePort on this node, by the Service's
//! `service.cilium.io/{type,node,node-selector}` annotations (Cilium's
//! `pkg/loadbalancer/reflectors`: a selector that does not parse leaves the Service
//! installed; `type` other than the three it knows provisions every type).

use std::collections::BTreeMap;

use crate::heart::acceptance::NodeSelector;
use crate::heart::desired::{CiliumAnnotations, DesiredPort};

/// Whether the node should carry the port's NodePort frontends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exposure {
    Exposed,
    /// The annotations keep it off this node (the phrase says which).
    NotExposed(String),
    /// The annotations decide it, but what they need is not known (the node's labels, a
    /// selector syntax not read here): nothing is concluded.
    Unknown(String),
}

pub fn exposure(port: &DesiredPort, node_labels: Option<&BTreeMap<String, String>>) -> Exposure {
    let Some(a) = port.cilium.as_deref() else {
        return Exposure::Exposed;
    };
    if let Some(t) = a.frontend_type.as_deref()
        && matches!(t, "ClusterIP" | "LoadBalancer")
    {
        return Exposure::NotExposed(format!("{} is {t}", CiliumAnnotations::TYPE));
    }
    if let Some(selector) = a.node_selector.as_deref() {
        let Ok(parsed) = NodeSelector::try_from(selector.to_string()) else {
            return Exposure::Unknown(format!(
                "{} {selector:?} uses selector syntax not read here",
                CiliumAnnotations::NODE_SELECTOR
            ));
        };
        return match node_labels {
            None => Exposure::Unknown(format!(
                "{} needs the node's labels, which were not read",
                CiliumAnnotations::NODE_SELECTOR
            )),
            Some(labels) if parsed.matches(labels) => Exposure::Exposed,
            Some(_) => Exposure::NotExposed(format!(
                "{} {selector:?} does not select this node",
                CiliumAnnotations::NODE_SELECTOR
            )),
        };
    }
    if let Some(value) = a.node.as_deref() {
        return match node_labels {
            None => Exposure::Unknown(format!(
                "{} needs the node's labels, which were not read",
                CiliumAnnotations::NODE
            )),
            Some(labels) if labels.get(CiliumAnnotations::NODE).map(String::as_str) == Some(value) => {
                Exposure::Exposed
            }
            Some(_) => Exposure::NotExposed(format!(
                "{} {value:?} is not this node's {} label",
                CiliumAnnotations::NODE,
                CiliumAnnotations::NODE
            )),
        };
    }
    Exposure::Exposed
}
