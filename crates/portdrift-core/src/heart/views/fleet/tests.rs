use super::*;
use serde_json::{Value, json};

fn stale(target: &str, backend: &str) -> Value {
    json!({"kind": "stale-endpoint", "severity": "critical", "protocol": "tcp", "port": 30080,
               "family": "ipv4", "backend": backend, "service": "shop/web", "target": target,
               "message": "stale"})
}

/// An agent's answer: its document as `decode::fleet` reads it, or why there is none.
fn answer(node: &str, outcome: Result<Value, NoAnswer>) -> AgentAnswer {
    AgentAnswer {
        node: node.into(),
        pod: format!("portdrift-{node}"),
        outcome: outcome.and_then(|document| crate::decode::fleet::agent_report(&document.to_string())),
        unready: None,
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
        answer(
            "node-f",
            Err(NoAnswer::Timeout(std::time::Duration::from_secs(5))),
        ),
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
        text.contains("node-f (portdrift-node-f): no answer within 5s"),
        "{text}"
    );
}

#[test]
fn a_finding_this_portdrift_cannot_read_is_noted_not_shown_and_its_node_not_clean() {
    let odd = [
        json!({"kind": "port-hijack", "severity": "critical", "port": 30080, "message": "new"}),
        json!({"kind": "stale-endpoint", "severity": "urgent", "port": 30080, "message": "odd"}),
        json!({"kind": "stale-endpoint", "severity": "info", "protocol": "quic", "port": 30080}),
        json!({"severity": "info", "message": "no kind"}),
    ];
    let answers = [
        answer("node-a", Ok(json!({"findings": odd}))),
        answer(
            "node-b",
            Ok(json!({"findings": [stale("10.244.1.5:8080", "iptables-nft")]})),
        ),
    ];
    let view = fleet_view(&answers);
    let kinds: Vec<&str> = view.findings.iter().map(|f| f.key.kind.as_str()).collect();
    assert_eq!(kinds, ["stale-endpoint"]);
    assert_eq!(view.findings[0].nodes, ["node-b"]);
    assert_eq!(
        view.notes,
        ["node-a: 4 findings this portdrift cannot read (kind \"port-hijack\"): a newer portdrift may"]
    );
    // node-a answered, but what it said is not known clean.
    assert_eq!(view.answered, 2);
    assert!(!view.answered_nodes.contains("node-a"));
    assert!(view.answered_nodes.contains("node-b"));
}

#[test]
fn findings_on_as_many_nodes_are_listed_most_severe_first_then_by_their_spellings() {
    let finding = |kind: &str, severity: &str, port: u16| json!({"kind": kind, "severity": severity, "protocol": "tcp", "port": port, "message": kind});
    let findings = [
        finding("stale-endpoint", "warning", 30080),
        finding("missing-rule", "warning", 30090),
        finding("backend-split", "info", 30070),
        finding("squatter", "critical", 30100),
        finding("missing-rule", "warning", 30080),
    ];
    let view = fleet_view(&[answer("node-a", Ok(json!({"findings": findings})))]);
    let listed: Vec<(&str, Option<u16>)> = view
        .findings
        .iter()
        .map(|f| (f.key.kind.as_str(), f.key.port))
        .collect();
    assert_eq!(
        listed,
        [
            ("squatter", Some(30100)),
            ("missing-rule", Some(30080)),
            ("missing-rule", Some(30090)),
            ("stale-endpoint", Some(30080)),
            ("backend-split", Some(30070)),
        ]
    );
}

#[test]
fn a_family_or_backend_this_portdrift_does_not_know_is_noted() {
    let mut ipvs = stale("10.244.1.5:8080", "ipvs");
    let answers = [answer("node-a", Ok(json!({"findings": [ipvs.clone()]})))];
    assert_eq!(
        fleet_view(&answers).notes,
        ["node-a: 1 finding this portdrift cannot read (backend \"ipvs\"): a newer portdrift may"]
    );
    ipvs["family"] = json!("ipv5");
    let answers = [answer("node-a", Ok(json!({"findings": [ipvs]})))];
    assert!(fleet_view(&answers).notes[0].contains("(family \"ipv5\")"));
}

#[test]
fn a_clean_fleet_exits_zero() {
    let view = fleet_view(&[answer("node-a", Ok(json!({"findings": []})))]);
    assert_eq!(view.exit_code(), 0);
    assert!(view.findings.is_empty());
}

mod by_condition {
    use super::super::nodes::{
        AgentReadiness, NodeState, NodeStatus, NodesSummary, confirm_clean, node_status, nodes_to_ask,
        pod_ready,
    };
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};

    fn node(name: &str, status: Option<&str>) -> Node {
        let conditions: Vec<Value> = status
            .map(|status| {
                // An old heartbeat: the agents patch only on a change, so age says nothing.
                json!({"type": "NodePortDrift", "status": status, "reason": "R", "message": "said",
                       "lastTransitionTime": "2026-12-01T08:00:00Z",
                       "lastHeartbeatTime": "2026-12-01T08:00:00Z"})
            })
            .into_iter()
            .chain([json!({"type": "Ready", "status": "True"})])
            .collect();
        serde_json::from_value(json!({"metadata": {"name": name}, "status": {"conditions": conditions}}))
            .unwrap()
    }

    /// An agent pod on `node`: its phase and its Ready condition's status, if any.
    fn pod(node: &str, phase: &str, ready: Option<&str>) -> Pod {
        let conditions: Vec<Value> = ready
            .map(|status| json!({"type": "Ready", "status": status, "reason": "ContainersNotReady"}))
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": format!("portdrift-{node}")},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase, "conditions": conditions}
        }))
        .unwrap()
    }

    fn confirmed(nodes: &[Node], pods: &[Pod]) -> Vec<NodeStatus> {
        let statuses = nodes.iter().map(node_status).collect();
        confirm_clean(statuses, Ok(&AgentReadiness::of(pods)))
    }

    #[test]
    fn the_condition_alone_says_drift_clean_or_unknown_whatever_its_age() {
        let s = node_status(&node("a", Some("True")));
        assert_eq!((s.state, s.message.as_str()), (NodeState::Drift, "said"));
        let s = node_status(&node("b", Some("False")));
        assert_eq!(
            (s.state, s.since.as_deref()),
            (NodeState::Clean, Some("2026-12-01T08:00:00Z"))
        );
        let s = node_status(&node("c", None));
        assert_eq!(s.state, NodeState::Unknown);
        assert!(s.message.contains("no NodePortDrift condition"), "{}", s.message);
        let s = node_status(&node("d", Some("Unknown")));
        assert_eq!(s.state, NodeState::Unknown, "{}", s.message);
    }

    #[test]
    fn a_pod_is_ready_only_running_with_ready_true() {
        assert_eq!(pod_ready(&pod("a", "Running", Some("True"))), Ok(()));
        assert_eq!(
            pod_ready(&pod("a", "Running", Some("False"))).unwrap_err(),
            "pod portdrift-a: not ready (ContainersNotReady)"
        );
        assert_eq!(
            pod_ready(&pod("a", "Running", None)).unwrap_err(),
            "pod portdrift-a: no Ready condition"
        );
        assert_eq!(
            pod_ready(&pod("a", "Pending", Some("True"))).unwrap_err(),
            "pod portdrift-a: phase Pending"
        );
        let mut terminating = pod("a", "Running", Some("True"));
        terminating.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-12-01T08:00:00Z".parse().unwrap(),
        ));
        assert_eq!(
            pod_ready(&terminating).unwrap_err(),
            "pod portdrift-a: terminating"
        );
    }

    #[test]
    fn a_clean_condition_counts_only_with_a_ready_agent_on_the_node() {
        let nodes = [
            node("a", Some("False")),
            node("b", Some("False")),
            node("c", Some("False")),
            node("d", Some("False")),
            node("e", Some("True")),
        ];
        let pods = [
            pod("a", "Running", Some("True")),
            pod("b", "Running", Some("False")),
            // d: one pod on its way out, one ready: the ready one stands.
            pod("d", "Failed", None),
            pod("d", "Running", Some("True")),
            // e drifted: asked whatever its agent's state.
            pod("e", "Pending", None),
        ];
        let statuses = confirmed(&nodes, &pods);
        let states: Vec<(&str, NodeState)> = statuses.iter().map(|s| (s.node.as_str(), s.state)).collect();
        assert_eq!(
            states,
            [
                ("a", NodeState::Clean),
                ("b", NodeState::Unknown),
                ("c", NodeState::Unknown),
                ("d", NodeState::Clean),
                ("e", NodeState::Drift),
            ]
        );
        assert_eq!(
            statuses[1].message,
            "NodePortDrift says no drift, but no ready agent on this node \
             (pod portdrift-b: not ready (ContainersNotReady)): the condition may be out of date"
        );
        assert!(
            statuses[2].message.contains("(no agent pod)"),
            "{}",
            statuses[2].message
        );
        assert_eq!(statuses[1].since, None);
        let asked: Vec<String> = nodes_to_ask(&statuses, false).into_iter().collect();
        assert_eq!(asked, ["b", "c", "e"]);

        // Without the pods' readiness no clean condition stands.
        let all = nodes.iter().map(node_status).collect();
        let statuses = confirm_clean(all, Err("403 pods is forbidden"));
        assert!(statuses.iter().all(|s| s.state != NodeState::Clean));
        assert!(
            statuses[0]
                .message
                .contains("(the agents' pods could not be listed: 403 pods is forbidden)"),
            "{}",
            statuses[0].message
        );
        assert_eq!(statuses[4].state, NodeState::Drift);
    }

    #[test]
    fn drifted_and_unknown_nodes_are_asked_and_all_asks_every_one() {
        let nodes = [node("a", Some("True")), node("b", Some("False")), node("c", None)];
        let statuses = confirmed(&nodes, &[pod("b", "Running", Some("True"))]);
        let asked: Vec<String> = nodes_to_ask(&statuses, false).into_iter().collect();
        assert_eq!(asked, ["a", "c"]);
        assert_eq!(nodes_to_ask(&statuses, true).len(), 3);

        // c answered clean: only a's drift makes the exit status 1.
        let summary = NodesSummary::of(&statuses);
        let view = |answers: &[AgentAnswer]| {
            fleet_view(answers).with_nodes(Some("conditions".into()), Some(summary.clone()), vec![])
        };
        let clean = || Ok(json!({"findings": [], "coverage": {"complete": true}}));
        assert_eq!(view(&[answer("a", clean()), answer("c", clean())]).exit_code(), 1);
        let only_unknown = NodesSummary::of(&statuses[1..]);
        let v = fleet_view(&[answer("c", clean())]).with_nodes(None, Some(only_unknown.clone()), vec![]);
        assert_eq!(v.exit_code(), 0);
        // An unknown node whose agent could not check everything stays unresolved.
        let partial =
            Ok(json!({"findings": [], "coverage": {"complete": false, "not_checked": ["no sockets"]}}));
        let v = fleet_view(&[answer("c", partial)]).with_nodes(None, Some(only_unknown), vec![]);
        assert_eq!(v.exit_code(), 1);
        assert_eq!(v.notes, ["c: the agent's check is incomplete: no sockets"]);
    }

    #[test]
    fn an_unconfirmed_clean_node_not_answered_for_keeps_the_exit_status_one() {
        let nodes = [node("a", Some("False")), node("b", Some("False"))];
        let ready = [pod("a", "Running", Some("True"))];
        let summary = NodesSummary::of(&confirmed(&nodes, &ready));
        assert_eq!((summary.clean.len(), summary.unknown.len()), (1, 1));
        let v = fleet_view(&[]).with_nodes(None, Some(summary.clone()), vec![]);
        assert_eq!(v.exit_code(), 1, "b is unknown and nobody answered for it");
        let clean = || Ok(json!({"findings": [], "coverage": {"complete": true}}));
        let v = fleet_view(&[answer("b", clean())]).with_nodes(None, Some(summary.clone()), vec![]);
        assert_eq!(v.exit_code(), 0, "b's agent answered: clean, fully checked");
        // An answer from an agent that is not ready is shown, but resolves nothing.
        let unready = AgentAnswer {
            unready: Some("pod portdrift-b: not ready".into()),
            ..answer("b", clean())
        };
        let v = fleet_view(&[unready]).with_nodes(None, Some(summary), vec![]);
        assert_eq!((v.answered, v.exit_code()), (1, 1));
        assert_eq!(
            v.notes,
            ["b: the agent is not ready (pod portdrift-b: not ready): its answer may be out of date"]
        );
        // Both confirmed: clean without asking anyone.
        let both = [
            pod("a", "Running", Some("True")),
            pod("b", "Running", Some("True")),
        ];
        let summary = NodesSummary::of(&confirmed(&nodes, &both));
        let v = fleet_view(&[]).with_nodes(None, Some(summary), vec![]);
        assert_eq!(v.exit_code(), 0);
    }
}

mod from_prometheus {
    use super::super::prometheus::{PromAnswers, prometheus_view};
    use super::*;
    use crate::decode::prometheus::parse_vector;

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

#[test]
fn an_agents_answer_prints_no_control_byte() {
    // Another node's answer is untrusted: a target or an error holding a newline and
    // terminal controls must not forge a line or drive the reader's terminal.
    let answers = [
        answer(
            "node-a",
            Ok(json!({"findings": [stale("10.0.0.1:80\ncritical forged\x1b[2J", "iptables-nft")]})),
        ),
        answer("node-b", Err(NoAnswer::Request("reset\r\x1b]0;owned\x07".into()))),
    ];
    let text = render_fleet(&fleet_view(&answers));
    assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
    assert!(
        text.contains(r"→ 10.0.0.1:80\x0acritical forged\x1b[2J: 1 of 2 nodes"),
        "{text}"
    );
    assert!(text.contains(r"reset\x0d\x1b]0;owned\x07"), "{text}");
}

#[test]
fn cilium_and_ipvs_nodes_findings_join_the_fleet_view() {
    // Findings from Cilium's maps carry no netfilter backend, and may be a map kind.
    let cilium_stale = json!({"kind": "stale-endpoint", "severity": "critical", "protocol": "tcp",
        "port": 30080, "family": "ipv4", "backend": null, "service": "shop/web",
        "target": "10.244.1.5:8080", "message": "stale"});
    let missing_backend = json!({"kind": "missing-backend", "severity": "critical", "protocol": "tcp",
        "port": 30080, "family": "ipv4", "backend": null, "service": null,
        "target": "0.0.0.0:30080", "message": "backend 3 not found"});
    let answers = [
        answer(
            "node-a",
            Ok(json!({"findings": [cilium_stale.clone(), missing_backend]})),
        ),
        answer(
            "node-b",
            Ok(json!({"findings": [stale("10.244.1.5:8080", "iptables-nft")]})),
        ),
    ];
    let view = fleet_view(&answers);
    assert_eq!((view.agents, view.answered), (2, 2));
    let rows: Vec<(&str, Vec<&str>)> = view
        .findings
        .iter()
        .map(|f| (f.key.kind.as_str(), f.nodes.iter().map(String::as_str).collect()))
        .collect();
    // The same drift on a Cilium node and a kube-proxy node is one row.
    assert!(
        rows.contains(&("stale-endpoint", vec!["node-a", "node-b"])),
        "{rows:?}"
    );
    assert!(rows.contains(&("missing-backend", vec!["node-a"])), "{rows:?}");
    assert!(render_fleet(&view).contains("missing-backend"));
}

#[test]
fn a_forbidden_pod_proxy_is_noted_when_no_agent_answered() {
    let forbidden = NoAnswer::Proxy {
        code: 403,
        message: "pods \"portdrift-a\" is forbidden".into(),
    };
    let view = fleet_view(&[answer("node-a", Err(forbidden))]).with_nodes(None, None, vec![]);
    assert_eq!(
        serde_json::to_value(&view.unanswered).unwrap(),
        json!([{"node": "node-a", "pod": "portdrift-node-a",
                "reason": "403 from the pod proxy: pods \"portdrift-a\" is forbidden"}])
    );
    assert!(
        view.notes[0].starts_with("the pod proxy is forbidden (403)"),
        "{:?}",
        view.notes
    );
    // A reason whose words begin with 403 is not the pod proxy's refusal.
    let listing = NoAnswer::Request("403 Forbidden".into());
    let view = fleet_view(&[answer("node-a", Err(listing))]).with_nodes(None, None, vec![]);
    assert!(view.notes.is_empty(), "{:?}", view.notes);
}
