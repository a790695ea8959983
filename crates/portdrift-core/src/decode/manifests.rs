//! Kubernetes manifests → the Services they declare, each value with its line: what
//! `portdrift lint` checks. Reads multi-document YAML (`helm template`, `kustomize
//! build`), `List`s, and JSON (a subset of YAML 1.2).
//!
//! The YAML parser is `saphyr`: the maintained successor of yaml-rust/yaml-rust2 (same
//! authors), pure Rust, YAML 1.2, and its `MarkedYaml` tree keeps the span of every
//! node, which is what pointing at `file:line` needs. serde_yaml and serde_yml are
//! unmaintained, and serde-based readers lose positions once a value is deserialized.

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, ScanError, YamlData};

use crate::heart::views::manifest::{Located, ManifestPort, ManifestProblem, ManifestService};

/// Every Service in `text` (from `file`, for messages), and what could not be read.
/// A document that does not parse stops the file there: YAML offers no safe place to
/// resume, and the error says where.
pub fn services_in(file: &str, text: &str) -> (Vec<ManifestService>, Vec<ManifestProblem>) {
    let mut reader = Reader {
        file,
        services: Vec::new(),
        problems: Vec::new(),
    };
    match MarkedYaml::load_from_str(text) {
        Ok(documents) => {
            for document in &documents {
                reader.object(document);
            }
        }
        Err(e) => reader.problems.push(syntax_problem(file, &e)),
    }
    (reader.services, reader.problems)
}

fn syntax_problem(file: &str, e: &ScanError) -> ManifestProblem {
    let mark = e.marker();
    ManifestProblem {
        file: file.to_string(),
        line: mark.line(),
        message: format!("not valid YAML: {} (column {})", e.info(), mark.col() + 1),
    }
}

struct Reader<'f> {
    file: &'f str,
    services: Vec<ManifestService>,
    problems: Vec<ManifestProblem>,
}

impl Reader<'_> {
    /// A document or a List item: a Service, a List (its items), or anything else.
    fn object(&mut self, node: &MarkedYaml) {
        let Some(kind) = get(node, "kind") else { return };
        match as_str(kind) {
            Some("Service") => {
                let service = self.service(node, line_of(kind));
                self.services.push(service);
            }
            Some(k) if k.ends_with("List") => {
                if let Some(YamlData::Sequence(items)) = get(node, "items").map(|i| &i.data) {
                    for item in items {
                        self.object(item);
                    }
                }
            }
            _ => {}
        }
    }

    fn service(&mut self, node: &MarkedYaml, line: usize) -> ManifestService {
        let meta = get(node, "metadata");
        let spec = get(node, "spec");
        let ports = match spec.and_then(|s| get(s, "ports")).map(|p| &p.data) {
            Some(YamlData::Sequence(ports)) => ports.iter().map(|p| self.port(p)).collect(),
            _ => Vec::new(),
        };
        ManifestService {
            file: self.file.to_string(),
            line,
            namespace: text_at(meta, "namespace").map(str::to_string),
            name: text_at(meta, "name").map(str::to_string),
            service_type: text_at(spec, "type").unwrap_or("ClusterIP").to_string(),
            ports,
            health_check_node_port: spec.and_then(|s| self.integer(s, "healthCheckNodePort")),
            external_traffic_policy: spec
                .and_then(|s| get(s, "externalTrafficPolicy"))
                .and_then(|v| located_str(v)),
            allocate_load_balancer_node_ports: spec
                .and_then(|s| get(s, "allocateLoadBalancerNodePorts"))
                .and_then(|v| self.boolean(v, "allocateLoadBalancerNodePorts")),
        }
    }

    fn port(&mut self, node: &MarkedYaml) -> ManifestPort {
        ManifestPort {
            line: line_of(node),
            name: get(node, "name").and_then(as_str).map(str::to_string),
            protocol: get(node, "protocol")
                .and_then(as_str)
                .unwrap_or("TCP")
                .to_string(),
            node_port: self.integer(node, "nodePort"),
        }
    }

    /// An integer field; a value of another type is a problem (the API server would
    /// refuse the manifest), `null` is no value.
    fn integer(&mut self, parent: &MarkedYaml, key: &str) -> Option<Located<i64>> {
        let value = get(parent, key)?;
        match &value.data {
            YamlData::Value(Scalar::Integer(n)) => Some(Located {
                value: *n,
                line: line_of(value),
            }),
            YamlData::Value(Scalar::Null) => None,
            _ => {
                self.wrong_type(value, key, "an integer");
                None
            }
        }
    }

    fn boolean(&mut self, value: &MarkedYaml, key: &str) -> Option<Located<bool>> {
        match &value.data {
            YamlData::Value(Scalar::Boolean(b)) => Some(Located {
                value: *b,
                line: line_of(value),
            }),
            YamlData::Value(Scalar::Null) => None,
            _ => {
                self.wrong_type(value, key, "true or false");
                None
            }
        }
    }

    fn wrong_type(&mut self, value: &MarkedYaml, key: &str, expected: &str) {
        let shown = match &value.data {
            YamlData::Value(Scalar::String(s)) => format!("the string {s:?}"),
            YamlData::Value(Scalar::FloatingPoint(f)) => format!("{f}"),
            YamlData::Value(Scalar::Boolean(b)) => format!("{b}"),
            YamlData::Value(Scalar::Integer(n)) => format!("{n}"),
            _ => "not a scalar".to_string(),
        };
        self.problems.push(ManifestProblem {
            file: self.file.to_string(),
            line: line_of(value),
            message: format!("{key} must be {expected}, not {shown} (the API server refuses it)"),
        });
    }
}

/// The string at `key` of `parent`, if both are there.
fn text_at<'a>(parent: Option<&'a MarkedYaml<'_>>, key: &str) -> Option<&'a str> {
    parent.and_then(|p| get(p, key)).and_then(as_str)
}

fn line_of(node: &MarkedYaml) -> usize {
    node.span.start.line()
}

/// The value of `key` in a mapping.
fn get<'a, 'i>(node: &'a MarkedYaml<'i>, key: &str) -> Option<&'a MarkedYaml<'i>> {
    let YamlData::Mapping(map) = &node.data else {
        return None;
    };
    map.iter().find(|(k, _)| as_str(k) == Some(key)).map(|(_, v)| v)
}

fn as_str<'a>(node: &'a MarkedYaml<'_>) -> Option<&'a str> {
    match &node.data {
        YamlData::Value(Scalar::String(s)) => Some(s.as_ref()),
        _ => None,
    }
}

fn located_str(node: &MarkedYaml) -> Option<Located<String>> {
    as_str(node).map(|s| Located {
        value: s.to_string(),
        line: line_of(node),
    })
}

#[cfg(test)]
mod tests;
