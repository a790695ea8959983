//! The API side of the desired state (`agent::watch`) against a fake API server that
//! speaks the real list/watch protocol over HTTP. Every scenario runs under a timeout.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service, ServiceSpec};
use k8s_openapi::api::discovery::v1::{EndpointHints, EndpointSlice, ForZone};
use portdrift::agent::watch::{ClusterView, WatchOptions};
use portdrift::heart::desired::{DesiredState, desired_state};
use portdrift::sources::kube_client::{
    DEFAULT_PAGE_SIZE, KUBE_PROXY_LABEL_SELECTOR, WatchError, kube_client, kube_config, load_once,
    pods_on_node,
};
use support::fake_apiserver::{Failure, FakeApiServer, Kind, StreamingLists, objects, query_param};
use support::{eventually, scenario};
use tokio::time::Instant;

const NODE: &str = "worker-1";
const ZONE: &str = "zone-a";

/// Short periods, so that staleness and watch renewal happen within a test.
fn options() -> WatchOptions {
    WatchOptions {
        staleness: Duration::from_millis(1500),
        watch_timeout: Duration::from_secs(2),
        ..WatchOptions::default()
    }
}

/// A small cluster with what matters to kube-proxy: a Cluster-policy Service with a
/// local and a remote endpoint, a Local-policy LoadBalancer, a Service without
/// endpoints, endpoints with zone hints (the Node's zone decides), and a Service and
/// slice opted out of kube-proxy by label (the server must filter them).
fn cluster() -> (Vec<Service>, Vec<EndpointSlice>, Node) {
    let web = objects::service("shop", "web", "10.96.0.10", 30080);
    let mut api = objects::service("shop", "api", "10.96.0.11", 30081);
    let spec: &mut ServiceSpec = api.spec.as_mut().unwrap();
    spec.type_ = Some("LoadBalancer".into());
    spec.external_traffic_policy = Some("Local".into());
    spec.health_check_node_port = Some(32001);
    let empty = objects::service("shop", "empty", "10.96.0.12", 30082);
    let hinted = objects::service("shop", "hinted", "10.96.0.13", 30083);
    let mut opted_out = objects::service("infra", "other-proxy", "10.96.0.14", 30084);
    opted_out
        .metadata
        .labels
        .get_or_insert_default()
        .insert("service.kubernetes.io/service-proxy-name".into(), "other".into());

    let web_slice = objects::slice(
        "shop",
        "web",
        "web-1",
        &[("10.244.1.5", NODE, true), ("10.244.2.5", "worker-2", true)],
    );
    let api_slice = objects::slice(
        "shop",
        "api",
        "api-1",
        &[("10.244.1.6", NODE, true), ("10.244.2.6", "worker-2", true)],
    );
    let mut hinted_slice = objects::slice(
        "shop",
        "hinted",
        "hinted-1",
        &[("10.244.1.7", NODE, true), ("10.244.2.7", "worker-2", true)],
    );
    for (endpoint, zone) in hinted_slice.endpoints.iter_mut().zip([ZONE, "zone-b"]) {
        endpoint.hints = Some(EndpointHints {
            for_zones: Some(vec![ForZone { name: zone.into() }]),
            ..EndpointHints::default()
        });
    }
    let mut opted_out_slice = objects::slice(
        "infra",
        "other-proxy",
        "other-proxy-1",
        &[("10.244.3.1", NODE, true)],
    );
    opted_out_slice
        .metadata
        .labels
        .get_or_insert_default()
        .insert("service.kubernetes.io/service-proxy-name".into(), "other".into());

    (
        vec![web, api, empty, hinted, opted_out],
        vec![web_slice, api_slice, hinted_slice, opted_out_slice],
        objects::node(NODE, Some(ZONE)),
    )
}

/// Objects kube-proxy's informers select (no opt-out label).
fn selected<
    K: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta> + Clone,
>(
    objects: &[K],
) -> Vec<K> {
    objects
        .iter()
        .filter(|o| {
            let labels = o.metadata().labels.clone().unwrap_or_default();
            !labels.contains_key("service.kubernetes.io/headless")
                && !labels.contains_key("service.kubernetes.io/service-proxy-name")
        })
        .cloned()
        .collect()
}

/// The server with the small cluster loaded.
async fn serve_cluster() -> (FakeApiServer, DesiredState) {
    let server = FakeApiServer::start().await;
    let (services, slices, node) = cluster();
    server.apply_all(&services);
    server.apply_all(&slices);
    server.apply(&objects::node("worker-2", Some("zone-b")));
    server.apply(&node);
    let expected = desired_state(&selected(&services), &selected(&slices), Some(NODE), Some(ZONE));
    (server, expected)
}

async fn synced_view(server: &FakeApiServer) -> ClusterView {
    let view = ClusterView::start(server.config(), Some(NODE), options()).expect("the view starts");
    tokio::time::timeout(Duration::from_secs(20), view.wait_synced())
        .await
        .expect("the view syncs");
    view
}

/// The same desired state (problems compared as a set: their order follows input order).
fn assert_same(actual: &DesiredState, expected: &DesiredState) {
    assert_eq!(actual.node, expected.node);
    assert_eq!(actual.node_zone, expected.node_zone);
    assert_eq!(actual.ports, expected.ports);
    assert_eq!(actual.other_allocated, expected.other_allocated);
    assert_eq!(actual.uncertain, expected.uncertain);
    let problems = |s: &DesiredState| {
        let mut p: Vec<String> = s
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.object, p.problem))
            .collect();
        p.sort();
        p
    };
    assert_eq!(problems(actual), problems(expected));
}

/// How many of `requests` read a collection's whole state: lists (their first pages)
/// and streaming lists.
fn initial_reads(requests: &[String]) -> usize {
    requests
        .iter()
        .filter(|r| match query_param(r, "watch") {
            Some(_) => query_param(r, "sendInitialEvents").as_deref() == Some("true"),
            None => query_param(r, "continue").is_none(),
        })
        .count()
}

fn has_service(state: &DesiredState, namespace: &str, name: &str) -> bool {
    state
        .ports
        .iter()
        .any(|p| p.service.namespace == namespace && p.service.name == name)
}

/// Ends the watches with a 410 while Service shop/web goes and shop/new comes, and
/// waits until the view shows both changes.
async fn gone_with_changes(server: &FakeApiServer, view: &ClusterView) {
    server.force_gone();
    server.delete::<Service>(Some("shop"), "web");
    server.apply(&objects::service("shop", "new", "10.96.0.20", 30090));
    eventually("the relist brings the changes", Duration::from_secs(15), || {
        let state = view.desired_state().unwrap();
        !has_service(&state, "shop", "web") && has_service(&state, "shop", "new")
    })
    .await;
}

/// The Services' reflector relisted and counted a `gone` error.
fn assert_services_relisted_after_gone(view: &ClusterView) {
    let status = view.status();
    assert!(status.services.relists >= 1, "{status:#?}");
    assert!(
        status
            .services
            .errors_by_kind
            .get("gone")
            .is_some_and(|n| *n >= 1),
        "{status:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_sync_matches_desired_state() {
    scenario(async {
        let (server, expected) = serve_cluster().await;
        let view = synced_view(&server).await;
        assert!(view.synced());
        let state = view.desired_state().expect("synced");
        assert_same(&state, &expected);
        // The fixture is meaningful: the zone came from the Node watch, the opted-out
        // Service was filtered by the server, the local endpoint is local.
        assert_eq!(state.node_zone.as_deref(), Some(ZONE));
        assert!(!has_service(&state, "infra", "other-proxy"));
        assert_eq!(state.ports.len(), 4);
        let status = view.status();
        assert_eq!((status.services.objects, status.endpoint_slices.objects), (4, 3));
        assert_eq!(status.node.as_ref().map(|n| n.objects), Some(1));
        assert!(status.synced && status.services.errors == 0);

        // The one-shot list gives the same state.
        let client = kube_client(server.config()).unwrap();
        let once = load_once(client, Some(NODE), Duration::from_secs(10))
            .await
            .unwrap();
        assert_same(&once, &expected);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_deleted_mid_watch_disappears() {
    scenario(async {
        let (server, _) = serve_cluster().await;
        let view = synced_view(&server).await;
        assert!(has_service(&view.desired_state().unwrap(), "shop", "web"));
        assert!(server.delete::<Service>(Some("shop"), "web"));
        eventually(
            "shop/web leaves the desired state",
            Duration::from_secs(10),
            || !has_service(&view.desired_state().unwrap(), "shop", "web"),
        )
        .await;
        assert!(has_service(&view.desired_state().unwrap(), "shop", "api"));
        assert_eq!(view.status().services.relists, 0, "a watch event, not a relist");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_opts_out_of_kube_proxy_mid_watch_disappears() {
    scenario(async {
        let (server, _) = serve_cluster().await;
        let view = synced_view(&server).await;
        // The server sends a DELETED when an object stops matching the selector.
        let mut web = objects::service("shop", "web", "10.96.0.10", 30080);
        web.metadata
            .labels
            .get_or_insert_default()
            .insert("service.kubernetes.io/service-proxy-name".into(), "other".into());
        server.apply(&web);
        eventually(
            "shop/web leaves the desired state",
            Duration::from_secs(10),
            || !has_service(&view.desired_state().unwrap(), "shop", "web"),
        )
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_slice_change_is_seen() {
    scenario(async {
        let (server, _) = serve_cluster().await;
        let view = synced_view(&server).await;
        let new_endpoint = "10.244.1.99:8080".parse().unwrap();
        let web_endpoints = |state: &DesiredState| {
            state
                .ports
                .iter()
                .find(|p| p.service.name == "web")
                .and_then(|p| p.endpoints.first().map(|(_, e)| e.cluster.clone()))
                .unwrap_or_default()
        };
        assert!(!web_endpoints(&view.desired_state().unwrap()).contains(&new_endpoint));
        server.apply(&objects::slice(
            "shop",
            "web",
            "web-1",
            &[("10.244.1.99", NODE, true), ("10.244.2.5", "worker-2", true)],
        ));
        eventually("the new endpoint is seen", Duration::from_secs(10), || {
            web_endpoints(&view.desired_state().unwrap()).contains(&new_endpoint)
        })
        .await;
        let endpoints = web_endpoints(&view.desired_state().unwrap());
        assert_eq!(endpoints.len(), 2, "the old endpoint went: {endpoints:?}");
        // The grace window runs from when the watch saw the change.
        let state = view.desired_state().unwrap();
        let web = state.ports.iter().find(|p| p.service.name == "web").unwrap();
        let changed: jiff::Timestamp = web.last_change.expect("a change time");
        let age = jiff::Timestamp::now().duration_since(changed);
        assert!(
            age < jiff::SignedDuration::from_secs(30) && age >= jiff::SignedDuration::ZERO,
            "{age:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_synced_before_the_initial_lists_complete() {
    scenario(async {
        let (server, expected) = serve_cluster().await;
        server.hold_lists(true);
        let view = ClusterView::start(server.config(), Some(NODE), options()).unwrap();
        eventually("the lists were asked for", Duration::from_secs(5), || {
            !server.requests_for(Kind::Service).is_empty()
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!view.synced());
        assert!(!view.fresh());
        assert!(matches!(view.desired_state(), Err(WatchError::NotSynced)));
        let status = view.status();
        assert!(!status.synced && !status.services.synced && status.services.objects == 0);

        server.hold_lists(false);
        tokio::time::timeout(Duration::from_secs(10), view.wait_synced())
            .await
            .expect("syncs once the lists are answered");
        assert!(view.synced());
        assert_same(&view.desired_state().unwrap(), &expected);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_gone_is_recovered_by_relisting() {
    scenario(async {
        let (server, _) = serve_cluster().await;
        let view = synced_view(&server).await;
        eventually("the watches are open", Duration::from_secs(5), || {
            server.open_watches() >= 3
        })
        .await;
        let lists_before = initial_reads(&server.requests_for(Kind::Service));

        gone_with_changes(&server, &view).await;
        assert_services_relisted_after_gone(&view);
        let lists_after = initial_reads(&server.requests_for(Kind::Service));
        assert!(lists_after > lists_before, "relisted");
        eventually("fresh again", Duration::from_secs(10), || view.fresh()).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_from_a_compacted_resource_version_relists() {
    scenario(async {
        let (server, _) = serve_cluster().await;
        let view = synced_view(&server).await;
        server.compact();
        server.drop_connections();
        server.apply(&objects::service("shop", "new", "10.96.0.20", 30090));
        eventually("the relist brings the change", Duration::from_secs(15), || {
            has_service(&view.desired_state().unwrap(), "shop", "new")
        })
        .await;
        let status = view.status();
        assert!(status.services.relists >= 1, "{status:#?}");
        assert!(status.services.errors_by_kind.contains_key("gone"), "{status:#?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_outage_keeps_the_last_good_state_and_recovers() {
    scenario(async {
        let (server, expected) = serve_cluster().await;
        let view = synced_view(&server).await;
        eventually("fresh after sync", Duration::from_secs(5), || view.fresh()).await;

        // The API server breaks: every request is a 500, open watches are cut.
        server.set_failure(Failure::Status(500));
        server.drop_connections();
        eventually("no longer fresh", Duration::from_secs(5), || !view.fresh()).await;
        assert!(view.synced(), "the last good state stays synced");
        assert_same(&view.desired_state().expect("the last good state"), &expected);
        // A change made during the outage is not seen, but not lost either.
        server.delete::<Service>(Some("shop"), "web");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!view.fresh());
        assert_same(&view.desired_state().unwrap(), &expected);
        let status = view.status();
        assert!(
            status.services.failing && status.services.errors >= 1,
            "{status:#?}"
        );
        assert!(status.services.last_error.is_some());

        // Then the connections themselves are dropped for a while.
        server.set_failure(Failure::Drop);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!view.fresh());

        server.set_failure(Failure::None);
        eventually("fresh again, with the change", Duration::from_secs(40), || {
            view.fresh() && !has_service(&view.desired_state().unwrap(), "shop", "web")
        })
        .await;
        let status = view.status();
        assert!(!status.services.failing, "{status:#?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_from_the_api_keeps_the_last_good_state_and_recovers() {
    scenario(async {
        let (server, expected) = serve_cluster().await;
        let view = synced_view(&server).await;
        eventually("fresh after sync", Duration::from_secs(5), || view.fresh()).await;

        // Every answer is a 200 whose body is not JSON; open watches are cut, so the
        // relists and new watches get it.
        server.set_failure(Failure::Malformed);
        server.drop_connections();
        eventually("no longer fresh", Duration::from_secs(10), || !view.fresh()).await;
        assert!(view.synced(), "the last good state stays synced");
        assert_same(&view.desired_state().expect("the last good state"), &expected);
        let status = view.status();
        assert!(status.services.failing, "{status:#?}");
        assert!(status.services.last_error.is_some(), "{status:#?}");

        server.set_failure(Failure::None);
        eventually("fresh again", Duration::from_secs(40), || view.fresh()).await;
        assert_same(&view.desired_state().unwrap(), &expected);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_api_goes_stale_and_recovers() {
    scenario(async {
        let (server, expected) = serve_cluster().await;
        let view = synced_view(&server).await;
        eventually("fresh after sync", Duration::from_secs(5), || view.fresh()).await;

        // Requests hang without an error: the watches run out (2 s), their renewals
        // hang, and only the silence tells.
        server.set_failure(Failure::Hang);
        eventually("stale through silence", Duration::from_secs(10), || !view.fresh()).await;
        let status = view.status();
        let watches = [&status.services, &status.endpoint_slices];
        assert!(watches.iter().all(|w| !w.failing && w.errors == 0), "{status:#?}");
        assert!(
            watches
                .iter()
                .any(|w| w.since_last_activity.unwrap() > status.staleness),
            "{status:#?}"
        );
        assert_same(&view.desired_state().unwrap(), &expected);

        server.set_failure(Failure::None);
        eventually("fresh once answered", Duration::from_secs(20), || view.fresh()).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_cluster_stays_fresh_through_watch_renewals() {
    scenario(async {
        // No periodic bookmarks: only the renewal of each 2 s watch (and the bookmark
        // before it closes) shows life, within the 3 s bound.
        let server = FakeApiServer::start_with_bookmarks(None).await;
        let (services, slices, node) = cluster();
        server.apply_all(&services);
        server.apply_all(&slices);
        server.apply(&node);
        let options = WatchOptions {
            staleness: Duration::from_secs(3),
            ..options()
        };
        let view = ClusterView::start(server.config(), Some(NODE), options).unwrap();
        tokio::time::timeout(Duration::from_secs(20), view.wait_synced())
            .await
            .unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            assert!(view.fresh(), "{:#?}", view.status());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let watches = server
            .requests_for(Kind::Service)
            .iter()
            .filter(|r| query_param(r, "watch").as_deref() == Some("true"))
            .count();
        assert!(watches >= 2, "the watch was renewed");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_carry_kube_proxys_selectors_and_ask_for_bookmarks() {
    scenario(async {
        let (server, _) = serve_cluster().await;
        let _view = synced_view(&server).await;
        eventually("the watches are open", Duration::from_secs(5), || {
            server.open_watches() >= 3
        })
        .await;

        for kind in [Kind::Service, Kind::EndpointSlice] {
            let requests = server.requests_for(kind);
            // Streaming lists: every request is a watch.
            let watches: Vec<_> = requests
                .iter()
                .filter(|r| query_param(r, "watch").as_deref() == Some("true"))
                .collect();
            assert!(
                !watches.is_empty() && watches.len() == requests.len(),
                "{kind:?}: {requests:#?}"
            );
            for request in &requests {
                assert_eq!(
                    query_param(request, "labelSelector").as_deref(),
                    Some(KUBE_PROXY_LABEL_SELECTOR),
                    "{request}"
                );
            }
            for watch in &watches {
                assert_eq!(
                    query_param(watch, "allowWatchBookmarks").as_deref(),
                    Some("true"),
                    "{watch}"
                );
                assert!(query_param(watch, "resourceVersion").is_some(), "{watch}");
                assert_eq!(
                    query_param(watch, "timeoutSeconds").as_deref(),
                    Some("2"),
                    "{watch}"
                );
            }
        }
        let nodes = server.requests_for(Kind::Node);
        assert!(!nodes.is_empty());
        for request in &nodes {
            assert_eq!(
                query_param(request, "fieldSelector").as_deref(),
                Some("metadata.name=worker-1"),
                "{request}"
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_once_lists_in_pages_and_times_out() {
    scenario(async {
        let server = FakeApiServer::start().await;
        let (services, slices) = objects::realistic_cluster(1200, 3);
        server.apply_all(&services);
        server.apply_all(&slices);
        let client = kube_client(server.config()).unwrap();
        let state = load_once(client.clone(), Some(NODE), Duration::from_secs(20))
            .await
            .unwrap();
        assert_same(&state, &desired_state(&services, &slices, Some(NODE), None));
        assert_eq!(state.ports.len(), 1200);
        let pages = server
            .requests_for(Kind::Service)
            .iter()
            .filter(|r| query_param(r, "continue").is_some())
            .count();
        let page = DEFAULT_PAGE_SIZE as usize;
        assert_eq!(
            pages,
            1200usize.div_ceil(page) - 1,
            "1,200 Services in pages of {page}"
        );

        server.hold_lists(true);
        let error = load_once(client, Some(NODE), Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(matches!(error, WatchError::Timeout(_)), "{error}");
        assert_eq!(error.metric_label(), "timeout");

        server.hold_lists(false);
        server.set_failure(Failure::Status(500));
        let client = kube_client(server.config()).unwrap();
        let error = load_once(client, Some(NODE), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(error.metric_label(), "list", "{error}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_kubeconfig_reaches_the_fake() {
    scenario(async {
        let (server, expected) = serve_cluster().await;
        let dir = tempfile::tempdir().unwrap();
        let path = server.write_kubeconfig(dir.path());
        let config = kube_config(Some(&path)).await.expect("the kubeconfig reads");
        let state = load_once(
            kube_client(config.clone()).unwrap(),
            Some(NODE),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_same(&state, &expected);
        let view = ClusterView::start(config, Some(NODE), options()).unwrap();
        tokio::time::timeout(Duration::from_secs(20), view.wait_synced())
            .await
            .unwrap();
        assert_same(&view.desired_state().unwrap(), &expected);

        let missing = kube_config(Some(&dir.path().join("nope"))).await.unwrap_err();
        assert_eq!(missing.metric_label(), "kubeconfig");
    })
    .await;
}

fn pod(namespace: &str, name: &str, uid: &str, node: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_listed_for_this_node_only() {
    scenario(async {
        let server = FakeApiServer::start().await;
        server.apply(&pod("edge", "agent-a", "uid-a", NODE));
        server.apply(&pod("edge", "agent-b", "uid-b", "some-other-node"));
        let client = kube_client(server.config()).unwrap();
        let pods = pods_on_node(client, NODE, Duration::from_secs(10)).await.unwrap();
        assert_eq!(pods.len(), 1, "{pods:?}");
        assert_eq!(pods.get("uid-a").map(String::as_str), Some("edge/agent-a"));
        // Never a cluster-wide Pod list, and from the watch cache (its nodeName index),
        // not etcd: resourceVersion=0, and no limit that would make kube-core drop it.
        let requests = server.requests_for(Kind::Pod);
        assert!(!requests.is_empty());
        for request in &requests {
            assert_eq!(
                query_param(request, "resourceVersion").as_deref(),
                Some("0"),
                "{request}"
            );
            assert_eq!(query_param(request, "limit"), None, "{request}");
        }
        assert!(
            requests
                .iter()
                .all(|r| query_param(r, "fieldSelector").as_deref()
                    == Some(&format!("spec.nodeName={NODE}")[..])),
            "{requests:?}"
        );
    })
    .await;
}

/// A node whose only NodePort rule is for a port no Service owns: stale once the
/// cluster state says so, and only then.
fn node_with_a_leftover_rule() -> portdrift::heart::observed::Observed {
    // kube-proxy's way in to KUBE-NODEPORTS, and one hand-written rule left there.
    let dump = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-NODEPORTS - [0:0]\n:KUBE-SERVICES - [0:0]\n\
                -A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\n\
                -A KUBE-NODEPORTS -p tcp -m tcp --dport 31999 -j DNAT --to-destination 10.244.9.9:80\nCOMMIT\n";
    let source = portdrift::decode::iptables::parse_save_str(dump, "iptables-nft-save", Default::default());
    portdrift::heart::observed::Observed {
        dumps: vec![source],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_stale_or_missing_verdict_comes_from_an_unsynced_cache() {
    use portdrift::heart::detect::{DetectConfig, detect};
    use portdrift::heart::finding::Kind as FindingKind;
    scenario(async {
        let (server, _) = serve_cluster().await;
        server.hold_lists(true);
        let view = ClusterView::start(server.config(), Some(NODE), options()).unwrap();
        eventually("the lists were asked for", Duration::from_secs(5), || {
            !server.requests_for(Kind::Service).is_empty()
        })
        .await;
        let observed = node_with_a_leftover_rule();
        let judged = |view: &ClusterView| {
            let desired = view.desired_state().ok();
            let config = DetectConfig {
                cluster_state_stale: !view.fresh(),
                ..Default::default()
            };
            detect(desired.as_ref(), &observed, &config)
        };
        // Unsynced: no desired state, so no verdict that needs one.
        let before = judged(&view);
        assert!(
            before.iter().all(|f| !matches!(
                f.kind,
                FindingKind::StaleNodeport
                    | FindingKind::StaleEndpoint
                    | FindingKind::MissingRule
                    | FindingKind::MissingEndpoint
            )),
            "{before:?}"
        );
        server.hold_lists(false);
        tokio::time::timeout(Duration::from_secs(10), view.wait_synced())
            .await
            .expect("syncs");
        let after = judged(&view);
        assert!(
            after
                .iter()
                .any(|f| f.kind == FindingKind::StaleNodeport && f.port == Some(31999)),
            "{after:?}"
        );
        // The API then fails: the last good state stays, and what rests on it is marked.
        server.set_failure(Failure::Status(500));
        server.drop_connections();
        eventually("the view notices", Duration::from_secs(20), || !view.fresh()).await;
        let stale = judged(&view);
        let leftover = stale
            .iter()
            .find(|f| f.kind == FindingKind::StaleNodeport)
            .expect("still judged");
        assert!(leftover.on_stale_cluster_state, "{leftover:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_that_can_move_node_ports_are_signalled_and_others_are_not() {
    scenario(async {
        let (server, _) = serve_cluster().await;
        // Watches renewed rarely, so that no renewal (or a relist after one, which
        // counts as a change) falls inside the test.
        let view = ClusterView::start(
            server.config(),
            Some(NODE),
            WatchOptions {
                staleness: Duration::from_secs(60),
                watch_timeout: Duration::from_secs(30),
                ..WatchOptions::default()
            },
        )
        .expect("the view starts");
        tokio::time::timeout(Duration::from_secs(20), view.wait_synced())
            .await
            .expect("the view syncs");
        let mut changes = view.changes();
        // The sync may still be settling (a watch starting after its list): wait until
        // nothing has been signalled for a while before saying what comes next does.
        let quiet = async {
            loop {
                changes.mark_unchanged();
                if tokio::time::timeout(Duration::from_millis(700), changes.changed())
                    .await
                    .is_err()
                {
                    break;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), quiet)
            .await
            .expect("the view goes quiet after its sync");
        let before = view.status();

        // A ClusterIP-only Service and its endpoints churning: nothing on this node's
        // NodePorts can move.
        let mut internal = objects::service("shop", "internal", "10.96.0.30", 30099);
        for port in internal.spec.as_mut().unwrap().ports.iter_mut().flatten() {
            port.node_port = None;
        }
        internal.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        server.apply(&internal);
        server.apply(&objects::slice(
            "shop",
            "internal",
            "internal-1",
            &[("10.244.1.50", NODE, true)],
        ));
        eventually(
            "the ClusterIP Service is in the view",
            Duration::from_secs(10),
            || {
                let now = view.status();
                now.services.objects > before.services.objects
                    && now.endpoint_slices.objects > before.endpoint_slices.objects
            },
        )
        .await;
        // Give a late signal time to arrive before saying there was none.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !changes.has_changed().unwrap(),
            "a ClusterIP-only change was signalled"
        );

        // An endpoint of a NodePort Service changes: signalled.
        server.apply(&objects::slice(
            "shop",
            "web",
            "web-1",
            &[("10.244.1.77", NODE, true)],
        ));
        tokio::time::timeout(Duration::from_secs(10), changes.changed())
            .await
            .expect("a NodePort Service's endpoint change is signalled")
            .unwrap();

        // A NodePort Service deleted: signalled.
        changes.mark_unchanged();
        server.delete::<Service>(Some("shop"), "web");
        tokio::time::timeout(Duration::from_secs(10), changes.changed())
            .await
            .expect("a NodePort Service's deletion is signalled")
            .unwrap();
    })
    .await;
}

/// What a request to a watched collection asks of the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Read {
    /// A streaming list from the watch cache: `watch=true&sendInitialEvents=true&
    /// resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true`.
    StreamingList,
    /// A list from the watch cache: `resourceVersion=0&resourceVersionMatch=NotOlderThan`,
    /// whole (no `limit`, no `continue`).
    CachedList,
    /// A watch resumed from a resourceVersion already seen (no initial state).
    WatchFrom(u64),
    /// Anything else: a consistent list (no resourceVersion) goes to etcd.
    Other(String),
}

fn read_of(request: &str) -> Read {
    let param = |key: &str| query_param(request, key);
    let is = |key: &str, value: &str| param(key).as_deref() == Some(value);
    if is("watch", "true") {
        if param("sendInitialEvents").is_some() {
            let streaming = is("sendInitialEvents", "true")
                && is("resourceVersion", "0")
                && is("resourceVersionMatch", "NotOlderThan")
                && is("allowWatchBookmarks", "true");
            return if streaming {
                Read::StreamingList
            } else {
                Read::Other(request.to_string())
            };
        }
        return match param("resourceVersion").and_then(|rv| rv.parse().ok()) {
            Some(rv) if rv > 0 && param("resourceVersionMatch").is_none() => Read::WatchFrom(rv),
            _ => Read::Other(request.to_string()),
        };
    }
    let cached = is("resourceVersion", "0")
        && is("resourceVersionMatch", "NotOlderThan")
        && param("limit").is_none()
        && param("continue").is_none();
    if cached {
        Read::CachedList
    } else {
        Read::Other(request.to_string())
    }
}

const WATCHED: [Kind; 3] = [Kind::Service, Kind::EndpointSlice, Kind::Node];

/// The reads of each watched collection from the `from[kind]`-th request on.
fn reads_since(server: &FakeApiServer, from: &[usize; 3]) -> Vec<(Kind, Vec<Read>)> {
    WATCHED
        .iter()
        .zip(from)
        .map(|(kind, from)| {
            let requests = server.requests_for(*kind);
            (*kind, requests[*from..].iter().map(|r| read_of(r)).collect())
        })
        .collect()
}

/// Response body bytes of Service lists and watches so far, every phase, from the
/// server's traffic count.
fn service_bytes(server: &FakeApiServer) -> u64 {
    let served = server.traffic().into_iter().filter(|t| {
        let mut words = t.signature.split(' ');
        words.next() == Some("services") && matches!(words.next(), Some("list" | "watch"))
    });
    served.map(|t| t.bytes).sum()
}

fn request_counts(server: &FakeApiServer) -> [usize; 3] {
    WATCHED.map(|kind| server.requests_for(kind).len())
}

/// The desired state computed afresh from what the server stores (kube-proxy's
/// selection), as a new agent would see it.
fn desired_from_server(server: &FakeApiServer) -> DesiredState {
    let parse = |kind| -> Vec<serde_json::Value> { server.stored(kind) };
    let services: Vec<Service> = parse(Kind::Service)
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    let slices: Vec<EndpointSlice> = parse(Kind::EndpointSlice)
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    desired_state(&selected(&services), &selected(&slices), Some(NODE), Some(ZONE))
}

/// Starts a view against a server answering streaming lists as `mode`, checks every
/// read of Services, EndpointSlices and the Node at start-up, then changes the
/// cluster, forces a `410 Gone` and checks the relist's reads and that the view
/// converges on the state (and findings) a fresh computation gives. Returns the
/// start-up and relist reads.
async fn reads_at_start_up_and_relist(
    mode: StreamingLists,
) -> (Vec<(Kind, Vec<Read>)>, Vec<(Kind, Vec<Read>)>) {
    use portdrift::heart::detect::{DetectConfig, detect};
    let (server, expected) = serve_cluster().await;
    server.set_streaming_lists(mode);
    let view = synced_view(&server).await;
    eventually("the watches are open", Duration::from_secs(10), || {
        server.open_watches() >= 3
    })
    .await;
    assert_same(&view.desired_state().unwrap(), &expected);
    let start_up = reads_since(&server, &[0; 3]);
    let bytes_at_start = service_bytes(&server);
    assert!(bytes_at_start > 0);

    let mark = request_counts(&server);
    server.force_gone();
    // Changed while no watch is open: only the relist can bring these.
    server.delete::<Service>(Some("shop"), "web");
    server.apply(&objects::service("shop", "new", "10.96.0.20", 30090));
    server.apply(&objects::slice(
        "shop",
        "new",
        "new-1",
        &[("10.244.1.30", NODE, true)],
    ));
    let fresh = desired_from_server(&server);
    eventually("the relist brings the changes", Duration::from_secs(20), || {
        let state = view.desired_state().unwrap();
        !has_service(&state, "shop", "web") && has_service(&state, "shop", "new")
    })
    .await;
    eventually("the watches are open again", Duration::from_secs(10), || {
        server.open_watches() >= 3 && view.fresh()
    })
    .await;
    let state = view.desired_state().unwrap();
    assert_same(&state, &fresh);
    let observed = node_with_a_leftover_rule();
    let config = DetectConfig::default();
    let findings = detect(Some(&state), &observed, &config);
    assert_eq!(findings, detect(Some(&fresh), &observed, &config));
    assert!(findings.iter().any(|f| f.port == Some(31999)), "{findings:#?}");
    assert!(service_bytes(&server) > bytes_at_start, "the relist was served");
    (start_up, reads_since(&server, &mark))
}

fn assert_no_quorum_read(reads: &[(Kind, Vec<Read>)]) {
    for (kind, reads) in reads {
        for read in reads {
            assert!(
                !matches!(read, Read::Other(_)),
                "{kind:?}: {read:?} in {reads:#?}"
            );
        }
    }
}

fn count(reads: &[Read], wanted: &Read) -> usize {
    reads.iter().filter(|r| *r == wanted).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_are_streamed_from_the_watch_cache_at_start_up_and_relist() {
    scenario(async {
        let (start_up, relist) = reads_at_start_up_and_relist(StreamingLists::Supported).await;
        for reads in [&start_up, &relist] {
            assert_no_quorum_read(reads);
            for (kind, reads) in reads {
                // One streaming list each, then only resumed watches: no list at all.
                assert_eq!(reads.first(), Some(&Read::StreamingList), "{kind:?}: {reads:#?}");
                assert_eq!(count(reads, &Read::StreamingList), 1, "{kind:?}: {reads:#?}");
                assert_eq!(count(reads, &Read::CachedList), 0, "{kind:?}: {reads:#?}");
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_streaming_lists_is_listed_from_its_cache_and_not_asked_again() {
    scenario(async {
        let (start_up, relist) = reads_at_start_up_and_relist(StreamingLists::Refused).await;
        assert_no_quorum_read(&start_up);
        assert_no_quorum_read(&relist);
        for (kind, reads) in &start_up {
            // Asked once, refused (422), then a list from the cache and a watch from it.
            assert_eq!(
                reads.get(..2),
                Some(&[Read::StreamingList, Read::CachedList][..]),
                "{kind:?}: {reads:#?}"
            );
            assert_eq!(count(reads, &Read::StreamingList), 1, "{kind:?}: {reads:#?}");
            assert!(
                matches!(reads.get(2), Some(Read::WatchFrom(_))),
                "{kind:?}: {reads:#?}"
            );
        }
        for (kind, reads) in &relist {
            // The choice is kept: the relist lists from the cache at once.
            assert_eq!(reads.first(), Some(&Read::CachedList), "{kind:?}: {reads:#?}");
            assert_eq!(count(reads, &Read::StreamingList), 0, "{kind:?}: {reads:#?}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_list_that_never_ends_falls_back_to_a_cached_list() {
    scenario(async {
        // The server takes the streaming watch as a plain one from 0: every object,
        // then no closing bookmark; it ends the watch at timeoutSeconds (2 s here).
        let (server, expected) = serve_cluster().await;
        server.set_streaming_lists(StreamingLists::Ignored);
        let started = Instant::now();
        let view = ClusterView::start(server.config(), Some(NODE), options()).unwrap();
        tokio::time::timeout(Duration::from_secs(20), view.wait_synced())
            .await
            .expect("syncs from a cached list");
        assert!(
            started.elapsed() >= Duration::from_secs(2),
            "after the watch ended"
        );
        assert_same(&view.desired_state().unwrap(), &expected);
        let reads = reads_since(&server, &[0; 3]);
        assert_no_quorum_read(&reads);
        for (kind, reads) in &reads {
            // kube-runtime opens the next streaming watch before it reports the restart
            // that shows the first one unfinished; that one is dropped at once. Then
            // lists from the cache, for good.
            let streaming = [Read::StreamingList, Read::StreamingList, Read::CachedList];
            assert_eq!(reads.get(..3), Some(&streaming[..]), "{kind:?}: {reads:#?}");
            assert_eq!(count(reads, &Read::StreamingList), 2, "{kind:?}: {reads:#?}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_request_waits_for_the_start_delay() {
    scenario(async {
        let (server, expected) = serve_cluster().await;
        for delay in [Duration::from_millis(1500), Duration::ZERO] {
            let started = Instant::now();
            let options = WatchOptions {
                start_delay: delay,
                ..options()
            };
            let view = ClusterView::start(server.config(), Some(NODE), options).unwrap();
            tokio::time::timeout(Duration::from_secs(20), view.wait_synced())
                .await
                .expect("syncs");
            assert_same(&view.desired_state().unwrap(), &expected);
            let first = server
                .requests_at()
                .into_iter()
                .filter(|(at, request)| {
                    *at >= started && WATCHED.iter().any(|k| request.starts_with(k.path()))
                })
                .map(|(at, _)| at - started)
                .min()
                .expect("requests");
            assert!(
                first >= delay && first < delay + Duration::from_millis(1000),
                "first request {first:?} after a delay of {delay:?}"
            );
            drop(view);
        }
    })
    .await;
}

/// The options of a view that reads with lists from the cache from the start, as
/// against a server without streaming lists once it has refused one.
fn cached_list_options() -> WatchOptions {
    WatchOptions {
        streaming_lists: false,
        ..options()
    }
}

async fn synced_cached_list_view(server: &FakeApiServer) -> ClusterView {
    server.set_streaming_lists(StreamingLists::Refused);
    let view =
        ClusterView::start(server.config(), Some(NODE), cached_list_options()).expect("the view starts");
    tokio::time::timeout(Duration::from_secs(20), view.wait_synced())
        .await
        .expect("the view syncs");
    eventually("the watches are open", Duration::from_secs(10), || {
        server.open_watches() >= 3 && view.fresh()
    })
    .await;
    view
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_lists_carry_the_selectors_and_the_watch_resumes_from_them() {
    scenario(async {
        let (server, expected) = serve_cluster().await;
        let view = synced_cached_list_view(&server).await;
        assert_same(&view.desired_state().unwrap(), &expected);
        let listed_at = server.resource_version();
        for (kind, selector, wanted) in [
            (Kind::Service, "labelSelector", KUBE_PROXY_LABEL_SELECTOR),
            (Kind::EndpointSlice, "labelSelector", KUBE_PROXY_LABEL_SELECTOR),
            (Kind::Node, "fieldSelector", "metadata.name=worker-1"),
        ] {
            let requests = server.requests_for(kind);
            let reads: Vec<Read> = requests.iter().map(|r| read_of(r)).collect();
            // One list from the cache, then watches from where it ended.
            assert_eq!(reads.first(), Some(&Read::CachedList), "{kind:?}: {requests:#?}");
            assert_eq!(count(&reads, &Read::CachedList), 1, "{kind:?}: {requests:#?}");
            assert_eq!(
                reads.get(1),
                Some(&Read::WatchFrom(listed_at)),
                "{kind:?}: {requests:#?}"
            );
            for request in &requests {
                assert_eq!(
                    query_param(request, selector).as_deref(),
                    Some(wanted),
                    "{request}"
                );
            }
            for watch in requests.iter().skip(1) {
                assert_eq!(
                    query_param(watch, "allowWatchBookmarks").as_deref(),
                    Some("true"),
                    "{watch}"
                );
                assert_eq!(
                    query_param(watch, "timeoutSeconds").as_deref(),
                    Some("2"),
                    "{watch}"
                );
            }
        }

        // Changes arrive on the watch; a watch that ends at its timeout is reopened
        // from the last resourceVersion seen (the bookmarks' included), not relisted.
        server.delete::<Service>(Some("shop"), "web");
        server.apply(&objects::service("shop", "new", "10.96.0.20", 30090));
        eventually("the watch brings the changes", Duration::from_secs(10), || {
            let state = view.desired_state().unwrap();
            !has_service(&state, "shop", "web") && has_service(&state, "shop", "new")
        })
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let reads: Vec<Read> = server
            .requests_for(Kind::Service)
            .iter()
            .map(|r| read_of(r))
            .collect();
        assert_eq!(count(&reads, &Read::CachedList), 1, "{reads:#?}");
        let resumed: Vec<u64> = reads
            .iter()
            .filter_map(|r| match r {
                Read::WatchFrom(rv) => Some(*rv),
                _ => None,
            })
            .collect();
        assert!(resumed.len() >= 2, "reopened: {reads:#?}");
        assert!(resumed.windows(2).all(|w| w[0] <= w[1]), "{reads:#?}");
        assert!(*resumed.last().unwrap() > listed_at, "moved on: {reads:#?}");
        assert_eq!(view.status().services.relists, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_cached_list_a_410_on_the_watch_relists_from_the_cache() {
    scenario(async {
        let (server, _) = serve_cluster().await;
        let view = synced_cached_list_view(&server).await;
        let mark = request_counts(&server);

        // An ERROR event with 410 on the open watches.
        gone_with_changes(&server, &view).await;
        // The Node too (each watch retries after its own jittered backoff).
        eventually(
            "fresh again, every watch relisted",
            Duration::from_secs(10),
            || {
                let status = view.status();
                view.fresh()
                    && status
                        .node
                        .is_some_and(|n| n.relists >= 1 && n.synced && !n.relisting)
            },
        )
        .await;
        assert_same(&view.desired_state().unwrap(), &desired_from_server(&server));
        assert_services_relisted_after_gone(&view);
        for (kind, reads) in reads_since(&server, &mark) {
            assert_eq!(reads.first(), Some(&Read::CachedList), "{kind:?}: {reads:#?}");
            assert_no_quorum_read(&[(kind, reads)]);
        }

        // A watch reopened from a resourceVersion the server has compacted away.
        let mark = request_counts(&server);
        server.compact();
        server.drop_connections();
        server.apply(&objects::service("shop", "newer", "10.96.0.21", 30091));
        eventually(
            "the second relist brings the change",
            Duration::from_secs(15),
            || has_service(&view.desired_state().unwrap(), "shop", "newer"),
        )
        .await;
        let services = &reads_since(&server, &mark)[0].1;
        assert!(services.contains(&Read::CachedList), "{services:#?}");
        assert!(view.status().services.relists >= 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_cached_list_keeps_the_last_good_state_and_recovers() {
    scenario(async {
        let (server, expected) = serve_cluster().await;
        let view = synced_cached_list_view(&server).await;
        let relists = view.status().services.relists;

        // Every answer is a 200 whose body breaks off in an object; the watches are cut
        // and forced to relist, which gets it.
        server.set_failure(Failure::Malformed);
        server.force_gone();
        eventually("failing", Duration::from_secs(10), || {
            view.status().services.errors_by_kind.contains_key("list")
        })
        .await;
        let status = view.status();
        let error = status.services.last_error.clone().unwrap_or_default();
        assert!(error.contains("the list ends early"), "{status:#?}");
        assert!(!view.fresh() && view.synced(), "{status:#?}");
        assert_same(&view.desired_state().expect("the last good state"), &expected);

        // Then a 500 with the API's Status: kube's error, as kube-runtime reports it.
        server.set_failure(Failure::Status(500));
        eventually("the Status is reported", Duration::from_secs(10), || {
            view.status()
                .services
                .last_error
                .is_some_and(|e| e.contains("the fake API server is failing on purpose"))
        })
        .await;
        assert_same(&view.desired_state().unwrap(), &expected);

        server.delete::<Service>(Some("shop"), "web");
        server.set_failure(Failure::None);
        eventually("fresh again, with the change", Duration::from_secs(40), || {
            view.fresh() && !has_service(&view.desired_state().unwrap(), "shop", "web")
        })
        .await;
        assert_same(&view.desired_state().unwrap(), &desired_from_server(&server));
        let status = view.status();
        assert!(!status.services.failing, "{status:#?}");
        assert!(status.services.relists > relists, "{status:#?}");
    })
    .await;
}
