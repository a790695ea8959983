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

mod by_condition {
    use super::super::nodes::{NodeState, NodesSummary, node_status, nodes_to_ask};
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use std::time::Duration;

    const NOW: &str = "2026-12-01T12:00:00Z";

    fn node(name: &str, condition: Option<(&str, &str)>) -> Node {
        let conditions: Vec<Value> = condition
            .map(|(status, heartbeat)| {
                json!({"type": "NodePortDrift", "status": status, "reason": "R", "message": "said",
                       "lastTransitionTime": "2026-12-01T08:00:00Z", "lastHeartbeatTime": heartbeat})
            })
            .into_iter()
            .chain([json!({"type": "Ready", "status": "True"})])
            .collect();
        serde_json::from_value(json!({"metadata": {"name": name}, "status": {"conditions": conditions}}))
            .unwrap()
    }

    fn state(node: &Node) -> (NodeState, String) {
        let s = node_status(node, NOW.parse().unwrap(), Duration::from_secs(900));
        (s.state, s.message)
    }

    #[test]
    fn a_node_is_clean_only_by_a_fresh_false_condition() {
        let fresh = "2026-12-01T11:58:00Z";
        assert_eq!(state(&node("a", Some(("True", fresh)))).0, NodeState::Drift);
        assert_eq!(
            state(&node("b", Some(("False", fresh)))),
            (NodeState::Clean, "said".into())
        );
        let (s, why) = state(&node("c", None));
        assert_eq!(s, NodeState::Unknown);
        assert!(why.contains("no NodePortDrift condition"), "{why}");
        let (s, why) = state(&node("d", Some(("Unknown", fresh))));
        assert_eq!(s, NodeState::Unknown, "{why}");
        let (s, why) = state(&node("e", Some(("False", "2026-12-01T11:00:00Z"))));
        assert_eq!(s, NodeState::Unknown);
        assert!(why.contains("not renewed for 3600s (said no drift)"), "{why}");
    }

    #[test]
    fn drifted_and_unknown_nodes_are_asked_and_all_asks_every_one() {
        let fresh = "2026-12-01T11:58:00Z";
        let nodes = [
            node("a", Some(("True", fresh))),
            node("b", Some(("False", fresh))),
            node("c", None),
        ];
        let statuses: Vec<_> = nodes
            .iter()
            .map(|n| node_status(n, NOW.parse().unwrap(), Duration::from_secs(900)))
            .collect();
        let asked: Vec<String> = nodes_to_ask(&statuses, false).into_iter().collect();
        assert_eq!(asked, ["a", "c"]);
        assert_eq!(nodes_to_ask(&statuses, true).len(), 3);

        // c answered clean: only a's drift makes the exit status 1.
        let summary = NodesSummary::of(&statuses);
        let view = |answers: &[AgentAnswer]| {
            fleet_view(answers).with_nodes("conditions".into(), Some(summary.clone()), vec![])
        };
        let clean = || Ok(json!({"findings": [], "coverage": {"complete": true}}));
        assert_eq!(view(&[answer("a", clean()), answer("c", clean())]).exit_code(), 1);
        let only_unknown = NodesSummary::of(&statuses[1..]);
        let v =
            fleet_view(&[answer("c", clean())]).with_nodes(String::new(), Some(only_unknown.clone()), vec![]);
        assert_eq!(v.exit_code(), 0);
        // An unknown node whose agent could not check everything stays unresolved.
        let partial =
            Ok(json!({"findings": [], "coverage": {"complete": false, "not_checked": ["no sockets"]}}));
        let v = fleet_view(&[answer("c", partial)]).with_nodes(String::new(), Some(only_unknown), vec![]);
        assert_eq!(v.exit_code(), 1);
        assert_eq!(v.notes, ["c: the agent's check is incomplete: no sockets"]);
    }
}

mod from_prometheus {
    use super::super::prometheus::{PromAnswers, parse_vector, prometheus_view};
    use super::*;

    fn vector(samples: &[(&[(&str, &str)], f64)]) -> Vec<super::super::prometheus::Sample> {
        let result: Vec<Value> = samples
            .iter()
            .map(|(labels, v)| {
                let metric: serde_json::Map<String, Value> =
                    labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
                json!({"metric": metric, "value": [1.7e9, v.to_string()]})
            })
            .collect();
        let body = json!({"status": "success", "data": {"resultType": "vector", "result": result}});
        parse_vector(body.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn errors_and_other_result_types_are_refused() {
        let error = br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#;
        assert_eq!(
            parse_vector(error).unwrap_err(),
            "bad_data: parse error at char 3"
        );
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(parse_vector(matrix).unwrap_err().contains("not a vector"));
        assert!(parse_vector(b"<html>").unwrap_err().starts_with("not JSON"));
    }

    #[test]
    fn capped_details_are_noted_and_a_node_falls_back_to_its_instance() {
        let answers = PromAnswers {
            up: vector(&[
                (&[("node", "n1"), ("instance", "10.0.0.1:9741")], 1.0),
                (&[("instance", "10.0.0.2:9741")], 1.0),
            ]),
            coverage_complete: vector(&[(&[("node", "n1")], 1.0), (&[("instance", "10.0.0.2:9741")], 1.0)]),
            by_severity: vector(&[(
                &[("node", "n1"), ("kind", "missing-rule"), ("severity", "critical")],
                3.0,
            )]),
            details: vector(&[(
                &[
                    ("node", "n1"),
                    ("kind", "missing-rule"),
                    ("severity", "critical"),
                    ("protocol", "tcp"),
                    ("port", "30001"),
                    ("service", "a/b"),
                ],
                1.0,
            )]),
            not_detailed: vector(&[(&[("node", "n1")], 2.0)]),
        };
        let view = prometheus_view(&answers, "Prometheus".into());
        let nodes = view.nodes.as_ref().unwrap();
        assert_eq!(nodes.drift.len(), 1);
        assert_eq!(nodes.clean, ["10.0.0.2:9741"]);
        assert_eq!(view.findings.len(), 1);
        assert_eq!(view.findings[0].key.port, Some(30001));
        assert_eq!(view.notes.len(), 1, "{:?}", view.notes);
        assert!(view.notes[0].starts_with("n1: 2 findings not in portdrift_finding"));
        assert_eq!(view.exit_code(), 1);
    }
}
