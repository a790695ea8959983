use super::*;

fn service(json: serde_json::Value) -> Service {
    serde_json::from_value(json).unwrap()
}

#[test]
fn every_node_port_and_the_health_check_port_are_claims() {
    let lb = service(serde_json::json!({
        "metadata": {"namespace": "edge", "name": "gw"},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 32000,
                 "ports": [{"name": "http", "port": 80, "nodePort": 30080},
                           {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053},
                           {"name": "internal", "port": 9000}]}
    }));
    let mut problems = Vec::new();
    let claims = claims_of(&lb, &mut problems);
    assert!(problems.is_empty());
    let got: Vec<_> = claims
        .iter()
        .map(|c| (c.port, c.protocol, c.port_name.as_deref(), c.health_check))
        .collect();
    assert_eq!(
        got,
        [
            (30080, Protocol::Tcp, Some("http"), false),
            (30053, Protocol::Udp, Some("dns"), false),
            (32000, Protocol::Tcp, None, true),
        ]
    );
    assert!(
        claims
            .iter()
            .all(|c| c.service == "edge/gw" && c.service_type == "LoadBalancer")
    );
}

#[test]
fn impossible_values_are_problems_not_claims() {
    let bad = service(serde_json::json!({
        "metadata": {"namespace": "a", "name": "b"},
        "spec": {"type": "NodePort", "healthCheckNodePort": 70000,
                 "ports": [{"name": "x", "port": 1, "nodePort": 99999},
                           {"name": "y", "port": 2, "protocol": "ICMP", "nodePort": 30001}]}
    }));
    let mut problems = Vec::new();
    assert!(claims_of(&bad, &mut problems).is_empty());
    assert_eq!(problems.len(), 3, "{problems:?}");
}
