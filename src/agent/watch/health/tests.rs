use std::time::Duration;

use super::*;
use crate::sources::kube_client::WatchError;

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
