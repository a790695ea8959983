use super::*;

use crate::agent::watch::initial_list::ListMode;

fn selected() -> watcher::Config {
    watcher::Config::default()
        .labels("!service.kubernetes.io/headless")
        .fields("metadata.name=worker-1")
        .timeout(120)
}

#[test]
fn the_list_is_read_from_the_cache_whole_with_the_selectors() {
    let config = ListMode::Cached.config(&selected());
    let params = list_params(&config, None);
    assert_eq!(
        params.label_selector.as_deref(),
        Some("!service.kubernetes.io/headless")
    );
    assert_eq!(params.field_selector.as_deref(), Some("metadata.name=worker-1"));
    assert_eq!(params.resource_version.as_deref(), Some("0"));
    assert_eq!(params.version_match, Some(VersionMatch::NotOlderThan));
    // A limit would make kube-core drop resourceVersion=0: a read from etcd.
    assert_eq!(params.limit, None);
    assert_eq!(params.continue_token, None);

    // A page after the first (should a server page it anyway): its token and the
    // selectors, without the version match the API server forbids with a token.
    let next = list_params(&config, Some("c1".to_string()));
    assert_eq!(next.continue_token.as_deref(), Some("c1"));
    assert_eq!(next.label_selector, params.label_selector);
    assert_eq!(next.field_selector, params.field_selector);
    assert_eq!((next.resource_version, next.version_match), (None, None));
}

#[test]
fn the_watch_has_the_selectors_timeout_and_bookmarks() {
    let params = watch_params(&ListMode::Cached.config(&selected()));
    assert_eq!(
        params.label_selector.as_deref(),
        Some("!service.kubernetes.io/headless")
    );
    assert_eq!(params.field_selector.as_deref(), Some("metadata.name=worker-1"));
    assert_eq!(params.timeout, Some(120));
    assert!(params.bookmarks);
    assert!(!params.send_initial_events);
}
