use super::*;

const STREAM: &str = "\
---
# Source: shop/templates/cm.yaml
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
---
# Source: shop/templates/svc.yaml
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  allocateLoadBalancerNodePorts: false
  healthCheckNodePort: 32100
  ports:
    - name: http
      port: 80
      nodePort: 30080
    - name: dns
      port: 53
      protocol: UDP
---
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: api}
  spec: {type: NodePort, ports: [{port: 80, nodePort: 30081}]}
";

#[test]
fn services_come_with_their_lines_from_streams_and_lists() {
    let (services, problems) = services_in("all.yaml", STREAM);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(services.len(), 2);
    let web = &services[0];
    assert_eq!(
        (web.name.as_deref(), web.namespace.as_deref()),
        (Some("web"), Some("shop"))
    );
    assert_eq!(web.line, 9);
    assert_eq!(web.service_type, "LoadBalancer");
    assert_eq!(
        web.ports[0].node_port,
        Some(Located {
            value: 30080,
            line: 21
        })
    );
    assert_eq!(web.ports[1].protocol, "UDP");
    assert_eq!(web.ports[1].node_port, None);
    assert_eq!(
        web.health_check_node_port,
        Some(Located {
            value: 32100,
            line: 17
        })
    );
    assert_eq!(
        web.allocate_load_balancer_node_ports.as_ref().map(|a| a.value),
        Some(false)
    );
    assert_eq!(
        web.external_traffic_policy.as_ref().map(|p| p.value.as_str()),
        Some("Local")
    );
    let api = &services[1];
    assert_eq!(
        (api.name.as_deref(), api.namespace.as_deref()),
        (Some("api"), None)
    );
    assert_eq!(
        api.ports[0].node_port,
        Some(Located {
            value: 30081,
            line: 33
        })
    );
}

#[test]
fn json_lists_read_too() {
    let json = r#"{"kind": "List", "items": [
  {"kind": "Service", "metadata": {"name": "a", "namespace": "n"},
   "spec": {"type": "NodePort", "ports": [{"port": 1, "nodePort": 30001}]}}]}"#;
    let (services, problems) = services_in("list.json", json);
    assert!(problems.is_empty());
    assert_eq!(
        services[0].ports[0].node_port,
        Some(Located {
            value: 30001,
            line: 3
        })
    );
}

#[test]
fn malformed_yaml_and_wrong_types_are_problems_with_lines() {
    let (_, problems) = services_in(
        "bad.yaml",
        "kind: Service\nspec:\n  ports:\n  - port: 80\n   nodePort: [\n",
    );
    assert_eq!(problems.len(), 1);
    assert!(problems[0].message.starts_with("not valid YAML"), "{problems:?}");
    assert!(problems[0].line >= 4, "{problems:?}");

    let text = "kind: Service\nmetadata: {name: x}\nspec:\n  ports:\n  - port: 80\n    nodePort: \"30080\"\n";
    let (services, problems) = services_in("typed.yaml", text);
    assert_eq!(services[0].ports[0].node_port, None);
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].line, 6);
    assert!(
        problems[0].message.contains("nodePort must be an integer"),
        "{problems:?}"
    );
}

#[test]
fn nothing_odd_panics() {
    for text in [
        "",
        "---\n---\n",
        "- 1\n- 2\n",
        "kind: [Service]\n",
        "kind: List\nitems: 3\n",
        "\u{0}\u{1}",
        "a: &x\n  b: *x\n",
    ] {
        let _ = services_in("odd.yaml", text);
    }
}
