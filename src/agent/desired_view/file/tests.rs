use super::*;

const GOOD: &str = r#"{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "Service",
   "metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
   "spec": {"type": "NodePort", "clusterIP": "10.96.0.10",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}}
]}"#;

#[tokio::test]
async fn the_file_is_read_again_and_a_bad_one_keeps_the_last_good_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.json");
    std::fs::write(&path, GOOD).unwrap();
    let file = ClusterFile::start(&path, Some("node-a")).unwrap();
    let mut changes = file.changes();
    changes.mark_unchanged();
    assert!(file.synced() && file.fresh());
    assert_eq!(file.desired_state().unwrap().ports.len(), 1);

    // Unchanged contents: nothing moves.
    assert_eq!(file.inner.reread(), None);
    assert!(!changes.has_changed().unwrap());

    std::fs::write(&path, "{ not json").unwrap();
    assert!(
        file.inner
            .reread()
            .is_some_and(|why| why.contains("is not a cluster state"))
    );
    assert!(changes.has_changed().unwrap());
    assert!(file.synced() && !file.fresh(), "a bad file is not current");
    assert_eq!(
        file.desired_state().unwrap().ports.len(),
        1,
        "the last good state stays"
    );

    std::fs::remove_file(&path).unwrap();
    assert!(
        file.inner
            .reread()
            .is_some_and(|why| why.contains("cannot be read"))
    );
    assert!(!file.fresh());

    std::fs::write(&path, GOOD.replace("30080", "30081")).unwrap();
    assert_eq!(file.inner.reread(), None);
    assert!(file.fresh());
    let ports = file.desired_state().unwrap().ports;
    assert_eq!(ports.iter().map(|p| p.node_port).collect::<Vec<_>>(), [30081]);
}

#[tokio::test]
async fn an_agent_does_not_start_on_a_file_it_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.json");
    let error = ClusterFile::start(&missing, None).unwrap_err().to_string();
    assert!(
        error.contains("nope.json") && error.contains("cannot be read"),
        "{error}"
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "[]").unwrap();
    let error = ClusterFile::start(&bad, None).unwrap_err().to_string();
    assert!(error.contains("is not a cluster state"), "{error}");
}
