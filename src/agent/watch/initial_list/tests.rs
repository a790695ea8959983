use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::core::Status;
use kube::runtime::watcher::{self, Event};
use tokio::time::Instant;

use super::*;

type Item = Result<Event<Service>, watcher::Error>;

const LIMIT: Duration = Duration::from_secs(150);

fn api_error(code: u16, message: &str) -> kube::Error {
    kube::Error::Api(Status::failure(message, "Invalid").with_code(code).boxed())
}

fn refused() -> Item {
    Err(watcher::Error::WatchStartFailed(api_error(
        422,
        "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
    )))
}

fn gone() -> Item {
    Err(watcher::Error::WatchError(
        Status::failure("too old resource version", "Expired")
            .with_code(410)
            .boxed(),
    ))
}

fn init() -> Item {
    Ok(Event::Init)
}

fn done() -> Item {
    Ok(Event::InitDone)
}

fn object() -> Item {
    Ok(Event::InitApply(Service::default()))
}

#[test]
fn the_configs_read_from_the_cache_never_a_quorum_read() {
    let base = watcher::Config::default()
        .labels("a=b")
        .timeout(120)
        .page_size(250);
    let streaming = ListMode::Streaming.config(&base);
    assert_eq!(
        streaming.initial_list_strategy,
        watcher::InitialListStrategy::StreamingList
    );
    let cached = ListMode::Cached.config(&base);
    assert_eq!(
        cached.initial_list_strategy,
        watcher::InitialListStrategy::ListWatch
    );
    assert_eq!(cached.list_semantic, watcher::ListSemantic::Any);
    // A limit would make kube-core drop resourceVersion=0.
    assert_eq!(cached.page_size, None);
    assert_eq!(cached.label_selector.as_deref(), Some("a=b"));
}

#[test]
fn a_streaming_list_that_completes_keeps_streaming_through_relists() {
    let now = Instant::now();
    let mut initial = InitialList::new(true, LIMIT);
    assert_eq!(initial.mode(), ListMode::Streaming);
    assert_eq!(initial.deadline(), None);
    for _ in 0..2 {
        assert_eq!(initial.observe(&init(), now), None);
        assert_eq!(initial.deadline(), Some(now + LIMIT));
        assert_eq!(initial.observe(&object(), now), None);
        assert_eq!(initial.observe(&done(), now), None);
        assert_eq!(initial.deadline(), None);
        // A 410 Gone ends the watch; the relist streams again.
        assert_eq!(initial.observe(&gone(), now), None);
    }
    assert_eq!(initial.mode(), ListMode::Streaming);
}

#[test]
fn a_refused_streaming_watch_falls_back_to_cached_lists_for_good() {
    let mut initial = InitialList::new(true, LIMIT);
    let why = initial.observe(&refused(), Instant::now());
    assert!(
        matches!(&why, Some(Fallback::Refused(m)) if m.contains("WatchList")),
        "{why:?}"
    );
    assert_eq!(initial.mode(), ListMode::Cached);
    // From then on nothing switches it back or falls back again.
    assert_eq!(initial.observe(&init(), Instant::now()), None);
    assert_eq!(initial.observe(&refused(), Instant::now()), None);
    assert_eq!(initial.deadline(), None);
    assert_eq!(initial.mode(), ListMode::Cached);
}

#[test]
fn other_errors_are_retried_not_fallen_back_from() {
    let mut initial = InitialList::new(true, LIMIT);
    let failures = [
        Err(watcher::Error::WatchStartFailed(api_error(500, "broken"))),
        Err(watcher::Error::WatchStartFailed(api_error(403, "forbidden"))),
        gone(),
    ];
    for failure in failures {
        assert_eq!(initial.observe(&failure, Instant::now()), None);
    }
    assert_eq!(initial.mode(), ListMode::Streaming);
}

#[test]
fn a_streaming_watch_that_ends_without_its_bookmark_falls_back() {
    let now = Instant::now();
    let mut initial = InitialList::new(true, LIMIT);
    assert_eq!(initial.observe(&init(), now), None);
    assert_eq!(initial.observe(&object(), now), None);
    // kube-runtime restarts the streaming list: the last one ended unfinished.
    assert_eq!(initial.observe(&init(), now), Some(Fallback::Unfinished));
    assert_eq!(initial.mode(), ListMode::Cached);
}

#[test]
fn a_restart_after_an_error_is_a_retry() {
    let now = Instant::now();
    let mut initial = InitialList::new(true, LIMIT);
    assert_eq!(initial.observe(&init(), now), None);
    let cut: Item = Err(watcher::Error::WatchFailed(api_error(500, "stream cut")));
    assert_eq!(initial.observe(&cut, now), None);
    let later = now + Duration::from_secs(5);
    assert_eq!(initial.observe(&init(), later), None);
    assert_eq!(initial.deadline(), Some(later + LIMIT));
    assert_eq!(initial.mode(), ListMode::Streaming);
}

#[test]
fn a_deadline_passed_falls_back() {
    let mut initial = InitialList::new(true, LIMIT);
    assert_eq!(initial.observe(&init(), Instant::now()), None);
    assert_eq!(initial.timed_out(), Fallback::TooLong(LIMIT));
    assert_eq!(initial.mode(), ListMode::Cached);
    assert_eq!(initial.deadline(), None);
}

#[test]
fn cached_lists_from_the_start_never_stream() {
    let mut initial = InitialList::new(false, LIMIT);
    assert_eq!(initial.mode(), ListMode::Cached);
    assert_eq!(initial.observe(&init(), Instant::now()), None);
    assert_eq!(initial.observe(&init(), Instant::now()), None);
    assert_eq!(initial.deadline(), None);
}
