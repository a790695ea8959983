//! `read_cluster_state`: the bundle's `cluster.json`, streamed.

use serde_json::json;

use serde_json::Value;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::decode::cluster::{ClusterFileError, read_cluster_state};
use crate::heart::desired::DesiredState;
use crate::heart::desired::desired_state;
use crate::heart::desired::tests::*;
use crate::heart::model::Protocol;

const NODE: &str = "node-a";

/// A List as kubectl prints it (pretty, keys sorted), holding `items`.
/// A List of `items`, after the API server's Service, which every cluster has.
fn list(mut items: Vec<Value>) -> String {
    items.insert(0, crate::testing::synth::api_server_service());
    serde_json::to_string_pretty(&json!({
        "apiVersion": "v1",
        "items": items,
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    }))
    .unwrap()
}

fn read(text: &str) -> Result<DesiredState, ClusterFileError> {
    read_cluster_state(text.as_bytes(), Some(NODE))
}

fn web_service() -> Value {
    service_json(
        "shop",
        "web",
        json!({"type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
               "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}),
    )
}

fn web_slice(endpoints: Value) -> Value {
    slice_json(
        "shop",
        "web-abc",
        "web",
        "IPv4",
        json!([{"name": "", "port": 8080, "protocol": "TCP"}]),
        endpoints,
    )
}

fn node(name: &str, zone: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}}})
}

#[test]
fn reads_a_kubectl_list_like_the_api_objects() {
    let text = list(vec![
        web_service(),
        web_slice(json!([ready("10.1.0.1", NODE), ready("10.1.0.2", "node-b")])),
    ]);
    let from_file = read(&text).unwrap();
    let svc: Service = serde_json::from_value(web_service()).unwrap();
    let slc: EndpointSlice = serde_json::from_value(web_slice(json!([
        ready("10.1.0.1", NODE),
        ready("10.1.0.2", "node-b")
    ])))
    .unwrap();
    let from_api = desired_state(&[svc], &[slc], Some(NODE), None);
    assert_eq!(from_file.ports, from_api.ports);
    assert_eq!(from_file.node.as_deref(), Some(NODE));
    assert!(from_file.problems.is_empty() && !from_file.uncertain);
    assert_eq!(v4(only_port(&from_file)).cluster.len(), 2);
}

#[test]
fn node_item_gives_the_zone_for_topology_hints() {
    let hinted = |ip: &str, zone: &str| {
        let mut e = ready(ip, "x");
        e["hints"] = json!({"forZones": [{"name": zone}]});
        e
    };
    let items = vec![
        web_service(),
        web_slice(json!([
            hinted("10.1.0.1", "zone-a"),
            hinted("10.1.0.2", "zone-b")
        ])),
        node("node-z", "zone-b"),
        node(NODE, "zone-a"),
    ];
    let state = read(&list(items)).unwrap();
    assert_eq!(state.node_zone.as_deref(), Some("zone-a"));
    assert_eq!(v4(only_port(&state)).cluster, addrs(&["10.1.0.1:8080"]));
}

#[test]
fn unknown_kinds_are_ignored() {
    let config_map =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}});
    let state = read(&list(vec![config_map, web_service(), web_slice(json!([]))])).unwrap();
    assert_eq!(state.ports.len(), 1);
    assert!(state.problems.is_empty());
}

#[test]
fn a_list_without_the_api_servers_service_is_taken_as_filtered() {
    // `kubectl get services,endpointslices -n shop -o json`: Services of other
    // namespaces are left out, so a port none of these owns may still be owned.
    let text = serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List",
        "items": [web_service(), web_slice(json!([]))]}))
    .unwrap();
    let state = read(&text).unwrap();
    assert!(state.services_partial && !state.uncertain);
    assert!(
        state.problems[0]
            .problem
            .starts_with("lacks Service default/kubernetes")
    );
    assert!(
        !read(&list(vec![web_service(), web_slice(json!([]))]))
            .unwrap()
            .services_partial
    );
}

#[test]
fn services_without_any_endpointslice_leave_every_endpoint_unknown() {
    // `kubectl get services -o json`: which NodePorts are owned is known, the
    // endpoints of none.
    let state = read(&list(vec![web_service()])).unwrap();
    assert_eq!(state.ports.len(), 1);
    assert!(only_port(&state).uncertain && !state.uncertain);
    assert_eq!(state.problems.len(), 1);
    assert!(
        state.problems[0]
            .problem
            .starts_with("holds 2 Services but no EndpointSlice")
    );
    // With the old Endpoints objects, the problem says kube-proxy does not read them.
    let endpoints =
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"namespace": "shop", "name": "web"}});
    let state = read(&list(vec![web_service(), endpoints])).unwrap();
    assert!(
        state.problems[0]
            .problem
            .contains("its 1 Endpoints objects are not what kube-proxy reads")
    );
}

#[test]
fn malformed_service_is_reported_and_its_node_ports_stay_allocated() {
    let mut broken = service_json(
        "shop",
        "broken",
        json!({"type": "NodePort", "clusterIP": "10.96.0.11",
               "ports": [{"port": "eighty", "nodePort": 30081}, {"port": 53, "protocol": "UDP", "nodePort": "30053"}]}),
    );
    broken["spec"]["selector"] = json!("not a map");
    let state = read(&list(vec![broken, web_service(), web_slice(json!([]))])).unwrap();
    assert_eq!(state.ports.len(), 1, "the readable Service is still there");
    assert_eq!(state.problems.len(), 1);
    assert_eq!(state.problems[0].object, "Service shop/broken");
    assert_eq!(state.other_allocated, [tcp(30081), (Protocol::Udp, 30053)].into());
    assert!(!state.uncertain, "its ports are known");
}

#[test]
fn malformed_service_without_readable_ports_makes_everything_uncertain() {
    let mut broken = web_service();
    broken["spec"]["ports"] = json!("oops");
    let state = read(&list(vec![broken])).unwrap();
    assert!(state.ports.is_empty());
    assert!(state.uncertain);
    assert_eq!(state.problems[0].object, "Service shop/web");
}

#[test]
fn malformed_slice_makes_its_service_uncertain() {
    let mut broken = web_slice(json!([]));
    broken["endpoints"] = json!([{"addresses": "10.1.0.1"}]);
    let api = service_json(
        "shop",
        "api",
        json!({"type": "NodePort", "clusterIP": "10.96.0.12", "ports": [{"port": 80, "nodePort": 30082}]}),
    );
    let state = read(&list(vec![web_service(), api, broken])).unwrap();
    let uncertain: Vec<_> = state
        .ports
        .iter()
        .map(|p| (p.service.name.as_str(), p.uncertain))
        .collect();
    assert_eq!(uncertain, [("api", false), ("web", true)]);
    assert!(!state.uncertain);
    assert_eq!(state.problems.len(), 1);
    assert_eq!(state.problems[0].object, "EndpointSlice shop/web-abc");
}

#[test]
fn malformed_slice_of_unknown_service_makes_everything_uncertain() {
    let mut broken = web_slice(json!([]));
    broken["metadata"]["labels"] = json!(["not", "a", "map"]);
    broken["ports"] = json!(42);
    let state = read(&list(vec![web_service(), broken])).unwrap();
    assert!(state.uncertain);
    assert_eq!(state.problems.len(), 1);
}

#[test]
fn malformed_slice_that_kube_proxy_ignores_is_only_reported() {
    let mut broken = web_slice(json!([]));
    broken["metadata"]["labels"] = json!({"app": "web"});
    broken["ports"] = json!(42);
    let state = read(&list(vec![web_service(), broken])).unwrap();
    assert!(!state.uncertain && !only_port(&state).uncertain);
    assert_eq!(state.problems.len(), 1);
}

#[test]
fn items_without_a_kind_are_reported() {
    let state = read(&list(vec![
        json!(42),
        json!({"metadata": {"name": "x"}}),
        web_service(),
        web_slice(json!([])),
    ]))
    .unwrap();
    assert_eq!(state.ports.len(), 1);
    assert_eq!(state.problems.len(), 2);
    assert_eq!(state.problems[0].object, "item 1");
    assert!(state.uncertain);
}

#[test]
fn typed_lists_name_the_kind_of_their_items() {
    let mut svc = web_service();
    svc.as_object_mut().unwrap().remove("kind");
    svc.as_object_mut().unwrap().remove("apiVersion");
    // The API server prints kind first; items then need not repeat it.
    let text = format!(r#"{{"kind":"ServiceList","apiVersion":"v1","metadata":{{}},"items":[{svc}]}}"#);
    assert_eq!(read(&text).unwrap().ports.len(), 1);
}

#[test]
fn empty_and_null_item_lists_are_fine() {
    assert!(
        read(r#"{"apiVersion":"v1","kind":"List","items":[]}"#)
            .unwrap()
            .ports
            .is_empty()
    );
    assert!(
        read(r#"{"apiVersion":"v1","kind":"List","items":null}"#)
            .unwrap()
            .ports
            .is_empty()
    );
}

#[test]
fn truncated_json_is_an_error() {
    let text = list(vec![web_service(), web_slice(json!([ready("10.1.0.1", NODE)]))]);
    let cut = &text[..text.len() / 2];
    assert!(
        matches!(read(cut), Err(ClusterFileError::Truncated { .. })),
        "{:?}",
        read(cut)
    );
    assert!(matches!(read(""), Err(ClusterFileError::Truncated { .. })));
}

#[test]
fn bad_json_is_an_error() {
    assert!(matches!(
        read("{\"kind\": List}"),
        Err(ClusterFileError::Syntax { .. })
    ));
    assert!(matches!(
        read("{} trailing"),
        Err(ClusterFileError::Syntax { .. })
    ));
}

#[test]
fn documents_that_are_not_a_list_are_an_error() {
    for text in [
        "[]",
        "42",
        "{}",
        &web_service().to_string(),
        r#"{"kind":"List","items":{}}"#,
    ] {
        let result = read(text);
        assert!(
            matches!(result, Err(ClusterFileError::NotAList { .. })),
            "{text}: {result:?}"
        );
    }
}

#[test]
fn errors_say_what_is_wrong() {
    let message = read(&web_service().to_string()).unwrap_err().to_string();
    assert!(
        message.contains("not a v1 List") && message.contains("Service"),
        "{message}"
    );
}

#[test]
fn no_prefix_of_a_valid_file_panics() {
    let mut broken = web_slice(json!([ready("10.1.0.1", NODE)]));
    broken["endpoints"][0]["conditions"] = json!("x");
    let text = list(vec![
        web_service(),
        broken,
        node(NODE, "zone-a"),
        web_slice(json!(null)),
    ]);
    for end in 0..text.len() {
        if text.is_char_boundary(end) {
            let _ = read(&text[..end]);
        }
    }
    assert!(read(&text).is_ok());
}

#[test]
fn odd_documents_do_not_panic() {
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let deep_item = format!(
        r#"{{"kind":"List","items":[{}{}]}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let docs = [
        deep.as_str(),
        deep_item.as_str(),
        r#"{"kind":"List","items":[{"kind":"Service","spec":{"ports":[{"nodePort":-1}]}}]}"#,
        r#"{"kind":"List","items":[{"kind":"Service","metadata":{"name":"a","namespace":"b"},"spec":{"clusterIP":"1.2.3.4","ports":[{"port":1,"nodePort":99999}]}}]}"#,
        r#"{"kind":"List","items":[{"kind":"EndpointSlice","metadata":7,"addressType":"IPv4"}]}"#,
        r#"{"kind":"List","items":[{"kind":"Node","metadata":{"name":"node-a","labels":null}}]}"#,
        "\u{feff}{}",
        "\0",
    ];
    for doc in docs {
        let _ = read(doc);
    }
}

#[test]
fn read_services_keeps_every_service_and_what_a_broken_one_holds() {
    let opted_out = {
        let mut s = web_service();
        s["metadata"]["name"] = json!("mesh");
        s["metadata"]["labels"] = json!({"service.kubernetes.io/service-proxy-name": "other"});
        s
    };
    // `port` must be a number: the item does not deserialize, its nodePort still reads.
    let broken = service_json(
        "team",
        "broken",
        json!({"type": "NodePort", "ports": [{"port": "eighty", "protocol": "UDP", "nodePort": "30999"}]}),
    );
    let slice = json!({"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
                       "metadata": {"namespace": "shop", "name": "web-1"}, "addressType": "IPv4", "endpoints": []});
    let text = list(vec![web_service(), opted_out, broken, slice]);
    let read = crate::decode::cluster::read_services(text.as_bytes()).unwrap();
    let names: Vec<_> = read
        .services
        .iter()
        .map(|s| s.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["kubernetes", "web", "mesh", "broken"]);
    let broken = &read.services[3].spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    assert_eq!(
        (broken.node_port, broken.protocol.as_deref()),
        (Some(30999), Some("UDP"))
    );
    assert_eq!(read.problems.len(), 1);
    assert!(
        read.problems[0].problem.contains("nodePorts are counted"),
        "{:?}",
        read.problems
    );
    assert!(matches!(
        crate::decode::cluster::read_services(&b"{\"kind\": \"Pod\", \"items\": []}"[..]),
        Err(ClusterFileError::NotAList { .. })
    ));
}
