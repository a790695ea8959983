use super::*;

#[test]
fn pod_uids_become_names_where_the_api_knows_them() {
    let process = |pod: Option<&str>| ProcessInfo {
        pid: 7,
        name: "squatterd".into(),
        container: None,
        pod: pod.map(str::to_string),
        exe: None,
        uid: None,
        cmdline: None,
    };
    let mut owners = HashMap::from([
        (1, process(Some("0f0e0d0c-0000-4000-8000-000000000001"))),
        (2, process(Some("0f0e0d0c-0000-4000-8000-00000000ffff"))),
        (3, process(None)),
    ]);
    let pods = HashMap::from([(
        "0f0e0d0c-0000-4000-8000-000000000001".to_string(),
        "edge/agent-x7k2p".to_string(),
    )]);
    name_pods(&mut owners, &pods);
    assert_eq!(owners[&1].pod.as_deref(), Some("edge/agent-x7k2p"));
    // A pod the API does not know (gone already) keeps its UID.
    assert_eq!(
        owners[&2].pod.as_deref(),
        Some("0f0e0d0c-0000-4000-8000-00000000ffff")
    );
    assert_eq!(owners[&3].pod, None);
}
