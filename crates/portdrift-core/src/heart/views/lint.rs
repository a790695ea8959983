//! The pre-deploy check (`portdrift lint`): Service manifests against each other, the
//! NodePort range and, when given, the live cluster's allocation. Pure: manifests and
//! claims in, findings with file and line out.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::ops::RangeInclusive;

use serde::Serialize;

use crate::heart::views::claims::Claim;
use crate::heart::views::manifest::{Located, ManifestProblem, ManifestService};
use crate::heart::words::count_of;

/// How bad a lint finding is: errors fail the check (exit 1), warnings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LintSeverity {
    Error,
    Warning,
}

impl LintSeverity {
    pub fn as_str(self) -> &'static str {
        match self {
            LintSeverity::Error => "error",
            LintSeverity::Warning => "warning",
        }
    }
}

/// The checks, by the stable names scripts match on (docs/cluster-views.md has the
/// table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LintCheck {
    /// The file is not valid YAML, or a field has the wrong type.
    Yaml,
    /// A static nodePort or healthCheckNodePort outside the NodePort range.
    OutOfRange,
    /// Two Services in the manifests ask for one number.
    Collision,
    /// The cluster gives the number to another Service.
    Allocated,
    /// A nodePort on a Service type that gets none.
    NodeportOnClusterip,
    /// A hard-coded nodePort.
    StaticNodeport,
    /// A LoadBalancer that does not set `allocateLoadBalancerNodePorts`.
    LbNodePorts,
    /// `externalTrafficPolicy: Local` on a NodePort Service.
    LocalWithoutHealthCheck,
}

impl LintCheck {
    pub fn as_str(self) -> &'static str {
        match self {
            LintCheck::Yaml => "yaml",
            LintCheck::OutOfRange => "out-of-range",
            LintCheck::Collision => "collision",
            LintCheck::Allocated => "allocated",
            LintCheck::NodeportOnClusterip => "nodeport-on-clusterip",
            LintCheck::StaticNodeport => "static-nodeport",
            LintCheck::LbNodePorts => "lb-node-ports",
            LintCheck::LocalWithoutHealthCheck => "local-without-health-check",
        }
    }
}

/// One thing wrong in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct LintFinding {
    pub severity: LintSeverity,
    /// Which check found it.
    pub check: LintCheck,
    pub file: String,
    pub line: usize,
    /// `namespace/name`, when the finding is about a Service.
    pub service: Option<String>,
    pub message: String,
}

/// What the check was asked.
#[derive(Debug, Clone)]
pub struct LintConfig {
    pub nodeport_range: RangeInclusive<u16>,
    /// The namespace of a manifest that names none (`kubectl apply -n`).
    pub default_namespace: String,
}

/// Service manifests checked: what is wrong in them, and the counts.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct LintReport {
    pub findings: Vec<LintFinding>,
    pub services: usize,
    pub errors: usize,
    pub warnings: usize,
    /// Whether the live cluster's allocation was checked.
    pub checked_cluster: bool,
}

impl LintReport {
    pub fn exit_code(&self) -> u8 {
        u8::from(self.errors > 0)
    }
}

/// One static number a manifest asks for.
struct Wanted<'a> {
    service: String,
    number: u16,
    protocol: &'a str,
    health_check: bool,
    file: &'a str,
    line: usize,
}

/// Checks `services` against the range and `live` claims, and reports `problems`
/// (the files' unreadable parts) as errors. The checks are listed in docs/cluster-views.md.
pub fn lint(
    services: &[ManifestService],
    problems: &[ManifestProblem],
    live: Option<&[Claim]>,
    config: &LintConfig,
) -> LintReport {
    let mut findings: Vec<LintFinding> = problems.iter().map(yaml_finding).collect();
    let mut wanted = Vec::new();
    for service in services {
        let key = service_key(service, &config.default_namespace);
        wanted.extend(static_numbers(service, &key));
        findings.extend(shape_findings(service, &key));
    }
    for w in &wanted {
        findings.extend(range_finding(w, &config.nodeport_range));
    }
    findings.extend(collision_findings(&wanted));
    if let Some(live) = live {
        findings.extend(allocated_findings(&wanted, live));
    }
    findings.sort_by(|a, b| {
        (&a.file, a.line, a.severity, a.check.as_str()).cmp(&(&b.file, b.line, b.severity, b.check.as_str()))
    });
    let errors = findings
        .iter()
        .filter(|f| f.severity == LintSeverity::Error)
        .count();
    LintReport {
        services: services.len(),
        warnings: findings.len() - errors,
        errors,
        findings,
        checked_cluster: live.is_some(),
    }
}

/// `namespace/name`, the namespace defaulted as `kubectl apply` does.
fn service_key(service: &ManifestService, default_namespace: &str) -> String {
    format!(
        "{}/{}",
        service.namespace.as_deref().unwrap_or(default_namespace),
        service.name.as_deref().unwrap_or("?")
    )
}

fn yaml_finding(problem: &ManifestProblem) -> LintFinding {
    LintFinding {
        severity: LintSeverity::Error,
        check: LintCheck::Yaml,
        file: problem.file.clone(),
        line: problem.line,
        service: None,
        message: problem.message.clone(),
    }
}

fn finding(
    severity: LintSeverity,
    check: LintCheck,
    file: &str,
    line: usize,
    service: &str,
    message: String,
) -> LintFinding {
    LintFinding {
        severity,
        check,
        file: file.to_string(),
        line,
        service: Some(service.to_string()),
        message,
    }
}

/// The static numbers a Service asks for. A number that is no port at all is
/// reported by [`range_finding`] through a wanted entry of 0.
fn static_numbers<'a>(service: &'a ManifestService, key: &str) -> Vec<Wanted<'a>> {
    let wanted = |number: &Located<i64>, protocol, health_check| Wanted {
        service: key.to_string(),
        number: u16::try_from(number.value).unwrap_or(0),
        protocol,
        health_check,
        file: &service.file,
        line: number.line,
    };
    let mut out: Vec<Wanted<'a>> = service
        .ports
        .iter()
        .filter_map(|p| Some(wanted(p.node_port.as_ref()?, p.protocol.as_str(), false)))
        .collect();
    out.extend(
        service
            .health_check_node_port
            .as_ref()
            .map(|n| wanted(n, "TCP", true)),
    );
    out
}

/// What the Service's shape says, port numbers aside.
fn shape_findings(service: &ManifestService, key: &str) -> Vec<LintFinding> {
    use LintSeverity::{Error, Warning};
    let mut out = Vec::new();
    let file = &service.file;
    let gets_node_ports = matches!(service.service_type.as_str(), "NodePort" | "LoadBalancer");
    for port in &service.ports {
        let Some(node_port) = &port.node_port else {
            continue;
        };
        if gets_node_ports {
            out.push(finding(
                Warning,
                LintCheck::StaticNodeport,
                file,
                node_port.line,
                key,
                format!(
                    "nodePort {} is hard-coded: it fails when another Service holds the number; leave it out and let the API server pick one",
                    node_port.value
                ),
            ));
        } else {
            out.push(finding(
                Error,
                LintCheck::NodeportOnClusterip,
                file,
                node_port.line,
                key,
                format!(
                    "nodePort {} on a Service of type {}, which gets no node ports (the API server refuses it)",
                    node_port.value, service.service_type
                ),
            ));
        }
    }
    if let Some(hc) = &service.health_check_node_port {
        out.push(finding(
            Warning,
            LintCheck::StaticNodeport,
            file,
            hc.line,
            key,
            format!(
                "healthCheckNodePort {} is hard-coded; leave it out and let the API server pick one",
                hc.value
            ),
        ));
    }
    if service.service_type == "LoadBalancer" && service.allocate_load_balancer_node_ports.is_none() {
        out.push(finding(
            Warning,
            LintCheck::LbNodePorts,
            file,
            service.line,
            key,
            format!(
                "a LoadBalancer takes a node port for each of its {} ports unless allocateLoadBalancerNodePorts is false; set it false if the load balancer sends to pods directly, or true to say it needs them",
                service.ports.len()
            ),
        ));
    }
    let local = service
        .external_traffic_policy
        .as_ref()
        .filter(|p| p.value == "Local");
    if let Some(policy) = local
        && service.service_type == "NodePort"
    {
        out.push(finding(
            Warning,
            LintCheck::LocalWithoutHealthCheck,
            file,
            policy.line,
            key,
            "externalTrafficPolicy Local on a NodePort Service: nodes without a ready endpoint drop the traffic, and a NodePort Service gets no healthCheckNodePort to tell which; send only to nodes that run it (with your own health check), use a LoadBalancer, or use Cluster".to_string(),
        ));
    }
    out
}

fn range_finding(w: &Wanted<'_>, range: &RangeInclusive<u16>) -> Option<LintFinding> {
    if range.contains(&w.number) {
        return None;
    }
    let what = if w.health_check {
        "healthCheckNodePort"
    } else {
        "nodePort"
    };
    let number = if w.number == 0 {
        "that is not a port number".to_string()
    } else {
        w.number.to_string()
    };
    Some(finding(
        LintSeverity::Error,
        LintCheck::OutOfRange,
        w.file,
        w.line,
        &w.service,
        format!(
            "{what} {number} is outside the NodePort range {}-{} (the API server refuses it)",
            range.start(),
            range.end()
        ),
    ))
}

/// Numbers asked for twice among the manifests, reported at each later request.
fn collision_findings(wanted: &[Wanted<'_>]) -> Vec<LintFinding> {
    let mut first: BTreeMap<u16, Vec<&Wanted<'_>>> = BTreeMap::new();
    let mut out = Vec::new();
    for w in wanted.iter().filter(|w| w.number != 0) {
        let earlier = first.entry(w.number).or_default();
        let clash = earlier.iter().find(|e| {
            e.service != w.service
                || (e.protocol.eq_ignore_ascii_case(w.protocol) && e.health_check == w.health_check)
        });
        // The same Service declared twice (a base and an overlay) is not a clash with
        // itself, unless one declaration asks twice for one protocol.
        let clash = clash.filter(|e| e.service != w.service || e.file == w.file);
        if let Some(e) = clash {
            out.push(finding(
                LintSeverity::Error,
                LintCheck::Collision,
                w.file,
                w.line,
                &w.service,
                format!(
                    "{} {} ({}) is also asked for by {} at {}:{}",
                    if w.health_check {
                        "healthCheckNodePort"
                    } else {
                        "nodePort"
                    },
                    w.number,
                    w.protocol.to_ascii_lowercase(),
                    e.service,
                    e.file,
                    e.line
                ),
            ));
        }
        earlier.push(w);
    }
    out
}

/// Numbers the live cluster has allocated to another Service.
fn allocated_findings(wanted: &[Wanted<'_>], live: &[Claim]) -> Vec<LintFinding> {
    let mut by_number: BTreeMap<u16, Vec<&Claim>> = BTreeMap::new();
    for claim in live {
        by_number.entry(claim.port).or_default().push(claim);
    }
    let mut out = Vec::new();
    for w in wanted {
        let holders: Vec<String> = by_number
            .get(&w.number)
            .into_iter()
            .flatten()
            .filter(|c| c.service != w.service)
            .map(|c| {
                let what = if c.health_check {
                    "health check"
                } else {
                    c.port_name.as_deref().unwrap_or("-")
                };
                format!("{} ({} {what})", c.service, c.protocol.as_str())
            })
            .collect();
        if holders.is_empty() {
            continue;
        }
        out.push(finding(
            LintSeverity::Error,
            LintCheck::Allocated,
            w.file,
            w.line,
            &w.service,
            format!(
                "nodePort {} is already allocated in the cluster to {}: the apply will fail with \"provided port is already allocated\"",
                w.number,
                holders.join(", ")
            ),
        ));
    }
    out
}

/// `file:line: severity: ns/name: message [check]`, one per line, then a summary.
pub fn render_lint(report: &LintReport) -> String {
    let mut out = String::new();
    for f in &report.findings {
        let service = f.service.as_deref().map(|s| format!("{s}: ")).unwrap_or_default();
        let _ = writeln!(
            out,
            "{}:{}: {}: {service}{} [{}]",
            f.file,
            f.line,
            f.severity.as_str(),
            f.message,
            f.check.as_str()
        );
    }
    let _ = writeln!(
        out,
        "{}, {} in {}{}",
        count_of(report.errors, "error"),
        count_of(report.warnings, "warning"),
        count_of(report.services, "Service"),
        if report.checked_cluster {
            " (checked against the cluster's allocation)"
        } else {
            ""
        }
    );
    out
}

#[cfg(test)]
mod tests;
