use super::*;
use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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
    let mut writer = StoreWriter::new(
        store.clone(),
        service_reduce(),
        Arc::new(|_: Option<&ServiceRecord>, _: Option<&ServiceRecord>| true),
    );
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
    let names: Vec<_> = second.iter().map(|s| s.key().unwrap().1.to_string()).collect();
    assert_eq!(names, ["a", "b", "d"]);
    assert!(
        Arc::ptr_eq(&second[0], &first[0]),
        "unchanged: the same allocation"
    );
    assert_eq!(second[1].version(), Some("5"));

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
    let mut writer = StoreWriter::new(store.clone(), service_reduce(), service_relevance());
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
