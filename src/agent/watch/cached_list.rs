//! The reflector's stream where the API server has no streaming lists: a list with
//! `resourceVersion=0` from its watch cache, read object by object as the body arrives
//! ([`stream_list`]), then a watch from the list's resourceVersion.
//!
//! kube-runtime's watcher would read that list with `Api::list`, which holds the whole
//! body and then every full object before the first is trimmed: at 10,000 Services
//! and as many EndpointSlices the sync peaked at 220.3 MiB that way, and at 31.1 MiB
//! read as it arrives (docs/performance.md#the-api-watchs-sync). This stream yields the
//! same [`watcher::Event`]s and [`watcher::Error`]s as kube-runtime's watcher in its
//! list-then-watch mode, with the same recovery, so the reflector, its store, health
//! and backoff are unchanged:
//!
//! - `Init`, an `InitApply` per object, `InitDone`; a failed list is
//!   `InitialListFailed` and starts again at `Init` (a continue token, should a server
//!   page the list anyway, is followed);
//! - then `Apply`/`Delete` from a watch at the list's resourceVersion (bookmarks move
//!   it on; a watch that ends or goes silent past its timeout is reopened from it);
//! - a `410 Gone`, as an `ERROR` event or as the watch request's answer, lists again
//!   from scratch; any other error is reported and the watch reopened or read on.
//!
//! The consumer's backoff (`default_backoff`) spaces the retries: this stream only
//! says what failed, on the poll after which it tries again.

use std::fmt;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::{Api, ListParams, VersionMatch, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event, ListSemantic};
use serde::de::DeserializeOwned;

use crate::heart::desired::record::resource_version;
use crate::sources::kube_client::{ListReader, stream_list};

/// kube-runtime's margin over a watch's `timeoutSeconds` before a silent watch counts
/// as dead.
const WATCH_IDLE_MARGIN: Duration = Duration::from_secs(5);

type Item<K> = Result<Event<K>, watcher::Error>;

enum State<K> {
    /// Nothing listed: `Init` comes next.
    Empty,
    /// The list (or its next page) is to be requested.
    List { continue_token: Option<String> },
    /// A list's body is being read.
    Listing { reader: ListReader<K> },
    /// Listed (or watched) up to `resource_version`: a watch from there is to be opened.
    Listed { resource_version: String },
    Watching {
        resource_version: String,
        stream: BoxStream<'static, kube::Result<WatchEvent<K>>>,
    },
}

/// Lists `api`'s objects selected by `config` from the cache, then watches them; see
/// the module's comment. Endless, like kube-runtime's watcher.
pub(super) fn list_then_watch<K>(api: Api<K>, config: watcher::Config) -> impl Stream<Item = Item<K>> + Send
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + 'static,
{
    futures::stream::unfold(
        (api, config, State::Empty),
        |(api, config, mut state)| async move {
            loop {
                let (item, next) = step(&api, &config, state).await;
                state = next;
                if let Some(item) = item {
                    return Some((item, (api, config, state)));
                }
            }
        },
    )
}

/// One step: the item it gives, if any, and the state after it.
async fn step<K>(api: &Api<K>, config: &watcher::Config, state: State<K>) -> (Option<Item<K>>, State<K>)
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + 'static,
{
    match state {
        State::Empty => (Some(Ok(Event::Init)), State::List { continue_token: None }),
        State::List { continue_token } => request_list(api, config, continue_token).await,
        State::Listing { reader } => read_list(reader).await,
        State::Listed { resource_version } => open_watch(api, config, resource_version).await,
        State::Watching {
            resource_version,
            stream,
        } => read_watch(config, resource_version, stream).await,
    }
}

async fn request_list<K>(
    api: &Api<K>,
    config: &watcher::Config,
    continue_token: Option<String>,
) -> (Option<Item<K>>, State<K>)
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + 'static,
{
    match stream_list(api, &list_params(config, continue_token)).await {
        Ok(reader) => (None, State::Listing { reader }),
        Err(error) => (Some(Err(watcher::Error::InitialListFailed(error))), State::Empty),
    }
}

/// The list's next object; at its end, the next page or the watch.
async fn read_list<K>(mut reader: ListReader<K>) -> (Option<Item<K>>, State<K>)
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + 'static,
{
    match reader.next().await {
        Ok(Some(object)) => (Some(Ok(Event::InitApply(object))), State::Listing { reader }),
        Ok(None) => {
            let metadata = reader.metadata();
            let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
            match (
                nonempty(&metadata.continue_),
                nonempty(&metadata.resource_version),
            ) {
                (Some(token), _) => (
                    None,
                    State::List {
                        continue_token: Some(token),
                    },
                ),
                (None, Some(resource_version)) => {
                    (Some(Ok(Event::InitDone)), State::Listed { resource_version })
                }
                (None, None) => (Some(Err(watcher::Error::NoResourceVersion)), State::Empty),
            }
        }
        Err(error) => (Some(Err(watcher::Error::InitialListFailed(error))), State::Empty),
    }
}

async fn open_watch<K>(
    api: &Api<K>,
    config: &watcher::Config,
    resource_version: String,
) -> (Option<Item<K>>, State<K>)
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + 'static,
{
    match api.watch(&watch_params(config), &resource_version).await {
        Ok(stream) => (
            None,
            State::Watching {
                resource_version,
                stream: stream.boxed(),
            },
        ),
        Err(error) => {
            // kube-runtime retries a refused watch from the same version for ever;
            // a version the server no longer has never stops being refused.
            let next = if is_gone(&error) {
                State::Empty
            } else {
                State::Listed { resource_version }
            };
            (Some(Err(watcher::Error::WatchStartFailed(error))), next)
        }
    }
}

/// The watch's next event; a watch that ended or went silent is opened again.
async fn read_watch<K>(
    config: &watcher::Config,
    resource_version: String,
    mut stream: BoxStream<'static, kube::Result<WatchEvent<K>>>,
) -> (Option<Item<K>>, State<K>)
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + 'static,
{
    let Some(event) = next_or_idle(&mut stream, config.timeout).await else {
        return (None, State::Listed { resource_version });
    };
    match event {
        Ok(WatchEvent::Added(object) | WatchEvent::Modified(object)) => watched(object, Event::Apply, stream),
        Ok(WatchEvent::Deleted(object)) => watched(object, Event::Delete, stream),
        Ok(WatchEvent::Bookmark(bookmark)) => (
            None,
            State::Watching {
                resource_version: bookmark.metadata.resource_version,
                stream,
            },
        ),
        Ok(WatchEvent::Error(status)) => {
            let next = if status.code == 410 {
                State::Empty
            } else {
                State::Watching {
                    resource_version,
                    stream,
                }
            };
            (Some(Err(watcher::Error::WatchError(status))), next)
        }
        Err(error) => (
            Some(Err(watcher::Error::WatchFailed(error))),
            State::Watching {
                resource_version,
                stream,
            },
        ),
    }
}

/// An object seen on the watch, which moves the watch's resourceVersion to its own.
fn watched<K: Resource>(
    object: K,
    event: fn(K) -> Event<K>,
    stream: BoxStream<'static, kube::Result<WatchEvent<K>>>,
) -> (Option<Item<K>>, State<K>) {
    match resource_version(object.meta()).map(str::to_string) {
        Some(resource_version) => (
            Some(Ok(event(object))),
            State::Watching {
                resource_version,
                stream,
            },
        ),
        None => (Some(Err(watcher::Error::NoResourceVersion)), State::Empty),
    }
}

/// The watch's next event; None when it ended, or sent nothing (not even a bookmark)
/// for its timeout plus a margin, as kube-runtime gives up on a silent watch.
async fn next_or_idle<S: Stream + Unpin>(stream: &mut S, timeout: Option<u32>) -> Option<S::Item> {
    if timeout == Some(0) {
        return stream.next().await;
    }
    let idle = Duration::from_secs(u64::from(timeout.unwrap_or(290))) + WATCH_IDLE_MARGIN;
    tokio::time::timeout(idle, stream.next()).await.ok().flatten()
}

fn is_gone(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 410)
}

/// The list request of `config`: its selectors, from the cache when its semantic is
/// "any" (`resourceVersion=0`, not older than), its page size if any. The next page of
/// a paged list is asked for by its continue token alone (the API server forbids
/// `resourceVersionMatch` with one).
pub(super) fn list_params(config: &watcher::Config, continue_token: Option<String>) -> ListParams {
    let mut params = ListParams {
        label_selector: config.label_selector.clone(),
        field_selector: config.field_selector.clone(),
        limit: config.page_size,
        ..ListParams::default()
    };
    if continue_token.is_some() {
        params.continue_token = continue_token;
    } else if config.list_semantic == ListSemantic::Any {
        params.resource_version = Some("0".to_string());
        params.version_match = Some(VersionMatch::NotOlderThan);
    }
    params
}

/// The watch request of `config`: its selectors, timeout and bookmarks.
pub(super) fn watch_params(config: &watcher::Config) -> WatchParams {
    let mut params = WatchParams::default();
    params.label_selector.clone_from(&config.label_selector);
    params.field_selector.clone_from(&config.field_selector);
    params.timeout = config.timeout;
    params.bookmarks = config.bookmarks;
    params
}

#[cfg(test)]
mod tests;
