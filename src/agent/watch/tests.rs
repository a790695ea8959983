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
            annotations: labels(&[("kubectl.kubernetes.io/last-applied-configuration", "{}")]),
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
    assert_eq!(service.metadata.annotations, None);
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
fn a_trimmed_node_keeps_its_name_and_zone() {
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
    assert_eq!(node.metadata.labels, labels(&[(LABEL_ZONE, "zone-a")]));
    assert!(node.spec.is_none() && node.status.is_none());
    assert_eq!(
        node_zone([&node].into_iter(), "worker-1").as_deref(),
        Some("zone-a")
    );
    assert_eq!(node_zone([&node].into_iter(), "worker-2"), None);
}

fn versioned(name: &str, version: &str) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            resource_version: Some(version.into()),
            ..ObjectMeta::default()
        },
        ..Service::default()
    }
}

#[test]
fn a_relist_keeps_the_last_state_until_done_and_reuses_unchanged_objects() {
    let store = Arc::new(ObjectStore::default());
    let mut writer = StoreWriter {
        store: store.clone(),
        relist: None,
        relevant: Arc::new(|_: Option<&Service>, _: Option<&Service>| true),
    };
    writer.apply(watcher::Event::Init);
    for (name, version) in [("a", "1"), ("b", "2"), ("c", "3")] {
        writer.apply(watcher::Event::InitApply(versioned(name, version)));
    }
    assert_eq!(store.len(), 0, "nothing before the list is complete");
    writer.apply(watcher::Event::InitDone);
    let first = store.sorted();
    assert_eq!(first.len(), 3);

    // A relist: a unchanged, b changed, c gone, d new.
    writer.apply(watcher::Event::Init);
    writer.apply(watcher::Event::InitApply(versioned("a", "1")));
    writer.apply(watcher::Event::InitApply(versioned("b", "5")));
    writer.apply(watcher::Event::InitApply(versioned("d", "6")));
    assert!(
        store.sorted().iter().zip(&first).all(|(a, b)| Arc::ptr_eq(a, b)),
        "the last complete state stays during the relist"
    );
    writer.apply(watcher::Event::InitDone);
    let second = store.sorted();
    let names: Vec<_> = second.iter().map(|s| s.metadata.name.clone().unwrap()).collect();
    assert_eq!(names, ["a", "b", "d"]);
    assert!(
        Arc::ptr_eq(&second[0], &first[0]),
        "unchanged: the same allocation"
    );
    assert_eq!(second[1].metadata.resource_version.as_deref(), Some("5"));

    writer.apply(watcher::Event::Delete(versioned("a", "7")));
    writer.apply(watcher::Event::Apply(versioned("e", "8")));
    assert_eq!(store.len(), 3);
}

#[test]
fn only_changes_that_can_move_node_ports_count() {
    let with_ports = |name: &str, node_port: Option<i32>| {
        let mut s = versioned(name, "1");
        s.spec = Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                port: 80,
                node_port,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        });
        s
    };
    let store = Arc::new(ObjectStore::default());
    let mut writer = StoreWriter {
        store: store.clone(),
        relist: None,
        relevant: Arc::new(|old: Option<&Service>, new: Option<&Service>| {
            old.is_some_and(has_node_ports) || new.is_some_and(has_node_ports)
        }),
    };
    assert!(!writer.apply(watcher::Event::Init));
    assert!(!writer.apply(watcher::Event::InitApply(with_ports("a", None))));
    assert!(writer.apply(watcher::Event::InitDone), "a relist always counts");
    assert!(
        !writer.apply(watcher::Event::Apply(with_ports("a", None))),
        "a ClusterIP Service changing"
    );
    assert!(
        writer.apply(watcher::Event::Apply(with_ports("a", Some(30080)))),
        "gaining a NodePort"
    );
    assert!(
        writer.apply(watcher::Event::Apply(with_ports("a", None))),
        "losing it"
    );
    assert!(writer.apply(watcher::Event::Apply(with_ports("b", Some(30081)))));
    assert!(
        writer.apply(watcher::Event::Delete(versioned("b", "2"))),
        "a deleted NodePort Service counts, judged by what the store held"
    );
    assert!(!writer.apply(watcher::Event::Delete(versioned("a", "2"))));
}

#[test]
fn error_labels_are_bounded() {
    let errors = [WatchError::NotSynced, WatchError::Timeout(Duration::from_secs(1))];
    for error in &errors {
        assert!(!error.metric_label().is_empty());
    }
    assert_eq!(
        watcher_error_label(&watcher::Error::NoResourceVersion),
        "no-resource-version"
    );
}

#[tokio::test(start_paused = true)]
async fn freshness_follows_activity_errors_and_relists() {
    let staleness = Duration::from_secs(10);
    let mut h = HealthState::default();
    assert!(!h.fresh(Instant::now(), staleness), "not before the first list");
    h.on_event(Seen::ListStart);
    h.on_event(Seen::ListDone);
    assert!(h.synced && h.fresh(Instant::now(), staleness));
    tokio::time::advance(Duration::from_secs(11)).await;
    assert!(!h.fresh(Instant::now(), staleness), "silent past the bound");
    h.on_data();
    assert!(h.fresh(Instant::now(), staleness), "a bookmark is a sign of life");
    h.on_error("watch-start", &watcher::Error::NoResourceVersion);
    assert!(!h.fresh(Instant::now(), staleness), "failing");
    h.on_response(http::StatusCode::OK);
    assert!(h.fresh(Instant::now(), staleness), "answered again");
    h.on_event(Seen::ListStart);
    assert!(!h.fresh(Instant::now(), staleness) && h.relisting && h.relists == 1);
    h.on_event(Seen::ListDone);
    assert!(h.fresh(Instant::now(), staleness) && h.synced);
}
