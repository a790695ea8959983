use super::*;
use k8s_openapi::api::discovery::v1::{EndpointConditions, EndpointHints, ForZone};

fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

#[test]
fn trimmed_objects_keep_what_the_builder_reads() {
    let mut service = Service {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("shop".into()),
            labels: labels(&[("app", "web")]),
            annotations: labels(&[
                ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
                ("portdrift.io/accept", "squatter"),
                ("portdrift.io/accept-reason", "ours"),
            ]),
            uid: Some("u".into()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("10.96.0.10".into()),
            type_: Some("NodePort".into()),
            selector: labels(&[("app", "web")]),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                node_port: Some(30080),
                port: 80,
                app_protocol: Some("http".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: Some(Default::default()),
    };
    trim_service(&mut service);
    assert_eq!(service.metadata.labels, None);
    // What a team accepts of its own Service's findings is kept; the rest goes.
    assert_eq!(
        service.metadata.annotations,
        labels(&[
            ("portdrift.io/accept", "squatter"),
            ("portdrift.io/accept-reason", "ours")
        ])
    );
    assert_eq!(service.metadata.uid, None);
    assert_eq!(service.status, None);
    let spec = service.spec.as_ref().unwrap();
    assert_eq!(spec.selector, None);
    assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.10"));
    let port = &spec.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.node_port, port.app_protocol.as_deref()),
        (Some(30080), None)
    );

    let mut slice = EndpointSlice {
        address_type: "IPv4".into(),
        metadata: ObjectMeta {
            name: Some("web-abc".into()),
            labels: labels(&[(LABEL_SERVICE_NAME, "web"), ("other", "x")]),
            annotations: labels(&[
                (ANNOTATION_LAST_CHANGE_TRIGGER, "2026-01-01T00:00:00Z"),
                ("x", "y"),
            ]),
            ..ObjectMeta::default()
        },
        endpoints: vec![Endpoint {
            addresses: vec!["10.0.0.1".into(), "10.0.0.2".into()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                ..EndpointConditions::default()
            }),
            hints: Some(EndpointHints {
                for_zones: Some(vec![ForZone { name: "a".into() }]),
                ..EndpointHints::default()
            }),
            hostname: Some("h".into()),
            node_name: Some("n".into()),
            ..Endpoint::default()
        }],
        ports: None,
    };
    trim_endpoint_slice(&mut slice);
    assert_eq!(slice.metadata.labels, labels(&[(LABEL_SERVICE_NAME, "web")]));
    assert_eq!(slice.metadata.annotations, None);
    assert_eq!(
        slice.metadata.creation_timestamp,
        Some(Time("2026-01-01T00:00:00Z".parse().unwrap())),
        "the trigger time, newer than no creation time"
    );
    let endpoint = &slice.endpoints[0];
    assert_eq!(endpoint.addresses, vec!["10.0.0.1".to_string()]);
    assert_eq!(endpoint.hostname, None);
    assert!(endpoint.hints.is_some() && endpoint.conditions.is_some());
    assert_eq!(endpoint.node_name.as_deref(), Some("n"));
}

#[test]
fn the_trigger_time_is_folded_into_the_creation_time_only_when_newer() {
    let at = |t: &str| Some(Time(t.parse().unwrap()));
    let slice = |created: &str, triggered: &str| EndpointSlice {
        address_type: "IPv4".into(),
        metadata: ObjectMeta {
            creation_timestamp: at(created),
            annotations: labels(&[(ANNOTATION_LAST_CHANGE_TRIGGER, triggered)]),
            ..ObjectMeta::default()
        },
        endpoints: Vec::new(),
        ports: None,
    };
    let mut newer = slice("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z");
    trim_endpoint_slice(&mut newer);
    assert_eq!(newer.metadata.creation_timestamp, at("2026-01-02T00:00:00Z"));
    let mut older = slice("2026-01-03T00:00:00Z", "2026-01-02T00:00:00Z");
    trim_endpoint_slice(&mut older);
    assert_eq!(older.metadata.creation_timestamp, at("2026-01-03T00:00:00Z"));
    let mut garbage = slice("2026-01-03T00:00:00Z", "yesterday");
    trim_endpoint_slice(&mut garbage);
    assert_eq!(garbage.metadata.creation_timestamp, at("2026-01-03T00:00:00Z"));
}

#[test]
fn a_trimmed_node_keeps_its_name_and_labels() {
    let mut node = Node {
        metadata: ObjectMeta {
            name: Some("worker-1".into()),
            labels: labels(&[(LABEL_ZONE, "zone-a"), ("kubernetes.io/os", "linux")]),
            ..ObjectMeta::default()
        },
        spec: Some(Default::default()),
        status: Some(Default::default()),
    };
    trim_node(&mut node);
    let kept = labels(&[(LABEL_ZONE, "zone-a"), ("kubernetes.io/os", "linux")]);
    assert_eq!(node.metadata.labels, kept);
    assert!(node.spec.is_none() && node.status.is_none());
    assert_eq!(node_labels([&node].into_iter(), "worker-1"), kept);
    assert_eq!(node_labels([&node].into_iter(), "worker-2"), None);
}
