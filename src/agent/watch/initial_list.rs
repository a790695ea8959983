//! How a reflector reads its initial state, at start-up and at every relist: from the
//! API server's watch cache, never a consistent (quorum) read that goes to etcd.
//!
//! First a streaming list: a watch with `sendInitialEvents=true`,
//! `resourceVersionMatch=NotOlderThan` and `resourceVersion=0`, whose initial events
//! end at a bookmark annotated `k8s.io/initial-events-end` (the `WatchList` feature, on
//! by default since Kubernetes 1.32). A server without it refuses the watch with a
//! `422 Invalid`; then, and when a server accepts the watch but ends it without that
//! bookmark, the reflector lists with `resourceVersion=0&resourceVersionMatch=NotOlderThan`
//! instead, for the rest of its life. kube-runtime does not fall back by itself: it would
//! retry the refused watch for ever.

use std::fmt;
use std::time::Duration;

use kube::runtime::watcher;
use tokio::time::Instant;

/// How a reflector reads its initial state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListMode {
    /// A streaming list (a watch with `sendInitialEvents=true`).
    Streaming,
    /// A list with `resourceVersion=0`, served whole from the watch cache.
    Cached,
}

impl ListMode {
    /// `base` (selectors, watch timeout) reading the initial state this way.
    pub(super) fn config(self, base: &watcher::Config) -> watcher::Config {
        match self {
            ListMode::Streaming => base.clone().streaming_lists(),
            ListMode::Cached => {
                let mut config = base.clone().any_semantic();
                // kube-core drops `resourceVersion=0` from a list that has a `limit`, which
                // would make it a quorum read; the watch cache ignores `limit` on such a
                // list anyway (it serves it whole), so none is sent.
                config.page_size = None;
                config
            }
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            ListMode::Streaming => "streaming",
            ListMode::Cached => "cached list",
        }
    }
}

/// Why a reflector gave up streaming lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Fallback {
    /// The API server refused the streaming watch (`422 Invalid`): no `WatchList`.
    Refused(String),
    /// The streaming watch ended without the bookmark that ends its initial events.
    Unfinished,
    /// The initial events went on this long without that bookmark.
    TooLong(Duration),
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fallback::Refused(message) => write!(f, "the API server refused a streaming list: {message}"),
            Fallback::Unfinished => f.write_str(
                "the API server ended a streaming list without the bookmark that ends its initial events",
            ),
            Fallback::TooLong(limit) => write!(
                f,
                "a streaming list sent no bookmark ending its initial events within {limit:?}"
            ),
        }
    }
}

/// One reflector's [`ListMode`], and the watch on a streaming list under way.
#[derive(Debug)]
pub(super) struct InitialList {
    mode: ListMode,
    /// When the streaming list under way began (its `Init`); None once it is done.
    streaming_since: Option<Instant>,
    /// An error arrived since that `Init`: the next `Init` is a retry after it, not the
    /// sign of a stream that ended unfinished.
    erred: bool,
    /// How long the initial events of a streaming list may take.
    limit: Duration,
}

impl InitialList {
    /// Streaming lists first when `streaming`, cached lists otherwise. A streaming list
    /// that has not ended within `limit` never will: the API server ends every watch at
    /// its `timeoutSeconds`, so `limit` is that plus slack.
    pub(super) fn new(streaming: bool, limit: Duration) -> Self {
        InitialList {
            mode: if streaming {
                ListMode::Streaming
            } else {
                ListMode::Cached
            },
            streaming_since: None,
            erred: false,
            limit,
        }
    }

    pub(super) fn mode(&self) -> ListMode {
        self.mode
    }

    /// When the streaming list under way must have ended, if one is.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.streaming_since.map(|since| since + self.limit)
    }

    /// Notes an item of the watcher stream (before it is applied). `Some` when the
    /// reflector must drop this stream and start again with cached lists, which
    /// [`mode`](Self::mode) now says; the item is then to be dropped too.
    pub(super) fn observe<K>(
        &mut self,
        item: &Result<watcher::Event<K>, watcher::Error>,
        now: Instant,
    ) -> Option<Fallback> {
        if self.mode != ListMode::Streaming {
            return None;
        }
        match item {
            Ok(watcher::Event::Init) => {
                // kube-runtime starts a streaming list again, without an error, only when
                // the last one ended before its bookmark.
                if self.streaming_since.is_some() && !self.erred {
                    return Some(self.fall_back(Fallback::Unfinished));
                }
                self.streaming_since = Some(now);
                self.erred = false;
                None
            }
            Ok(watcher::Event::InitDone) => {
                self.streaming_since = None;
                None
            }
            Ok(_) => None,
            // Only the streaming watch carries parameters a server can find invalid.
            Err(watcher::Error::WatchStartFailed(kube::Error::Api(status))) if status.code == 422 => {
                Some(self.fall_back(Fallback::Refused(status.message.clone())))
            }
            Err(_) => {
                self.erred = true;
                None
            }
        }
    }

    /// The deadline passed: cached lists from now on.
    pub(super) fn timed_out(&mut self) -> Fallback {
        let limit = self.limit;
        self.fall_back(Fallback::TooLong(limit))
    }

    fn fall_back(&mut self, why: Fallback) -> Fallback {
        self.mode = ListMode::Cached;
        self.streaming_since = None;
        self.erred = false;
        why
    }
}

#[cfg(test)]
mod tests;
