use super::*;
use serde_json::json;

fn stale(target: &str, backend: &str) -> Value {
    json!({"kind": "stale-endpoint", "severity": "critical", "protocol": "tcp", "port": 30080,
               "family": "ipv4", "backend": backend, "service": "shop/web", "target": target,
               "message": "stale"})
}

fn answer(node: &str, outcome: Result<Value, String>) -> AgentAnswer {
    AgentAnswer {
        node: node.into(),
        pod: format!("portdrift-{node}"),
        outcome,
    }
}

#[test]
fn findings_are_grouped_by_node_and_silent_agents_listed() {
    let answers = [
        answer(
            "node-b",
            Ok(json!({"findings": [stale("10.244.1.5:8080", "iptables-nft"),
                                                    stale("10.244.1.5:8080", "iptables-legacy")]})),
        ),
        answer(
            "node-a",
            Ok(json!({"findings": [stale("10.244.1.5:8080", "iptables-nft")]})),
        ),
        answer(
            "node-c",
            Ok(json!({"findings": [stale("10.244.9.9:8080", "iptables-nft"),
                                                    {"kind": "orphan-chain", "severity": "info"}]})),
        ),
        answer("node-d", Ok(json!({"findings": []}))),
        answer("node-f", Err("timed out after 5s".into())),
        answer("node-e", Ok(json!({"status": "not findings"}))),
    ];
    let view = fleet_view(&answers);
    assert_eq!((view.agents, view.answered), (6, 4));
    let summary: Vec<(Option<&str>, Vec<&str>)> = view
        .findings
        .iter()
        .map(|f| {
            (
                f.key.target.as_deref(),
                f.nodes.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (Some("10.244.1.5:8080"), vec!["node-a", "node-b"]),
            (Some("10.244.9.9:8080"), vec!["node-c"]),
            (None, vec!["node-c"]),
        ]
    );
    let silent: Vec<&str> = view.unanswered.iter().map(|u| u.node.as_str()).collect();
    assert_eq!(silent, ["node-e", "node-f"]);
    assert_eq!(view.exit_code(), 1);
    let text = render_fleet(&view);
    assert!(
        text.contains(
            "critical stale-endpoint tcp/30080 shop/web → 10.244.1.5:8080: 2 of 6 nodes: node-a, node-b"
        ),
        "{text}"
    );
    assert!(
        text.contains("node-f (portdrift-node-f): timed out after 5s"),
        "{text}"
    );
}

#[test]
fn a_clean_fleet_exits_zero() {
    let view = fleet_view(&[answer("node-a", Ok(json!({"findings": []})))]);
    assert_eq!(view.exit_code(), 0);
    assert!(view.findings.is_empty());
}
