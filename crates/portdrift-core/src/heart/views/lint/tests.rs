use super::*;
use crate::decode::manifests::services_in;
use crate::heart::model::Protocol;

fn config() -> LintConfig {
    LintConfig {
        nodeport_range: 30000..=32767,
        default_namespace: "default".into(),
    }
}

fn checks(report: &LintReport) -> Vec<(&'static str, &str, usize)> {
    report
        .findings
        .iter()
        .map(|f| (f.check.as_str(), f.file.as_str(), f.line))
        .collect()
}

const TEAM_A: &str = "\
kind: Service
metadata: {name: web, namespace: shop}
spec:
  type: NodePort
  ports:
  - {name: http, port: 80, nodePort: 30080}
  - {name: dns, port: 53, protocol: UDP, nodePort: 30053}
  - {name: dns-tcp, port: 53, protocol: TCP, nodePort: 30053}
";
const TEAM_B: &str = "\
kind: Service
metadata: {name: api, namespace: team-b}
spec:
  type: NodePort
  externalTrafficPolicy: Local
  ports:
  - {name: http, port: 80, nodePort: 30080}
  - {name: admin, port: 81, nodePort: 40000}
";

#[test]
fn collisions_across_namespaces_range_and_static_ports() {
    let (mut services, problems) = services_in("a.yaml", TEAM_A);
    services.extend(services_in("b.yaml", TEAM_B).0);
    let report = lint(&services, &problems, None, &config());
    assert_eq!(
        checks(&report),
        [
            ("static-nodeport", "a.yaml", 6),
            ("static-nodeport", "a.yaml", 7),
            ("static-nodeport", "a.yaml", 8),
            ("local-without-health-check", "b.yaml", 5),
            ("collision", "b.yaml", 7),
            ("static-nodeport", "b.yaml", 7),
            ("out-of-range", "b.yaml", 8),
            ("static-nodeport", "b.yaml", 8),
        ],
        "{}",
        render_lint(&report)
    );
    // TCP and UDP DNS of one Service share 30053: not a collision.
    assert_eq!(report.errors, 2);
    assert_eq!(report.exit_code(), 1);
    assert!(render_lint(&report).contains("b.yaml:7: error: team-b/api: nodePort 30080 (tcp) is also asked for by shop/web at a.yaml:6 [collision]"));
}

fn live(port: u16, service: &str) -> Claim {
    Claim {
        port,
        protocol: Protocol::Udp,
        service: service.into(),
        port_name: Some("x".into()),
        service_type: "NodePort".into(),
        health_check: false,
    }
}

#[test]
fn the_live_cluster_counts_except_the_service_being_updated() {
    let (services, _) = services_in("a.yaml", TEAM_A);
    let cluster = [live(30080, "shop/web"), live(30053, "other/dns")];
    let report = lint(&services, &[], Some(&cluster), &config());
    let allocated: Vec<usize> = report
        .findings
        .iter()
        .filter(|f| f.check == LintCheck::Allocated)
        .map(|f| f.line)
        .collect();
    // 30080 is this very Service's own; 30053 is another's (for UDP: numbers count).
    assert_eq!(allocated, [7, 8], "{}", render_lint(&report));
    assert!(report.checked_cluster);
}

#[test]
fn load_balancers_and_the_default_namespace() {
    let text = "\
kind: Service
metadata: {name: lb}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  ports: [{port: 443}]
---
kind: Service
metadata: {name: lb2}
spec: {type: LoadBalancer, allocateLoadBalancerNodePorts: false, ports: [{port: 443}]}
---
kind: Service
metadata: {name: internal}
spec: {ports: [{port: 80, nodePort: 30100}]}
";
    let (services, problems) = services_in("lb.yaml", text);
    let report = lint(&services, &problems, None, &config());
    assert_eq!(
        checks(&report),
        [
            ("lb-node-ports", "lb.yaml", 1),
            ("nodeport-on-clusterip", "lb.yaml", 14)
        ],
        "{}",
        render_lint(&report)
    );
    assert_eq!(report.findings[0].service.as_deref(), Some("default/lb"));
}

#[test]
fn one_service_in_a_base_and_an_overlay_is_not_a_collision() {
    let (mut services, _) = services_in("base.yaml", TEAM_B);
    services.extend(services_in("overlay.yaml", TEAM_B).0);
    let report = lint(&services, &[], None, &config());
    assert!(
        report.findings.iter().all(|f| f.check != LintCheck::Collision),
        "{}",
        render_lint(&report)
    );
}

#[test]
fn yaml_problems_are_errors() {
    let (services, problems) = services_in("bad.yaml", "kind: Service\n  name: [\n");
    let report = lint(&services, &problems, None, &config());
    assert_eq!(report.errors, 1);
    assert_eq!(report.findings[0].check, LintCheck::Yaml);
    assert!(render_lint(&report).starts_with("bad.yaml:"));
}
