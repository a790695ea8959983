//! What is known about each watch: synced, relisting, failing, when it was last heard
//! from, and its errors; the view's [`ViewStatus`] for `/readyz`, metrics and logs.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kube::runtime::watcher;
use tokio::time::Instant;

use crate::sources::kube_client::{WatchActivity, WatchedResource};

/// A bounded label for an error of a watcher stream (kube-runtime retries them all).
pub fn watcher_error_label(error: &watcher::Error) -> &'static str {
    match error {
        watcher::Error::WatchError(status) if status.code == 410 => "gone",
        watcher::Error::InitialListFailed(kube::Error::Api(status)) if status.code == 410 => "gone",
        // Lists from the cache relist on it (kube-runtime's watcher retries the watch).
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) if status.code == 410 => "gone",
        watcher::Error::InitialListFailed(_) => "list",
        watcher::Error::WatchStartFailed(_) => "watch-start",
        watcher::Error::WatchError(_) => "watch-event",
        watcher::Error::WatchFailed(_) => "watch-stream",
        watcher::Error::NoResourceVersion => "no-resource-version",
    }
}

/// What is known about each watch.
#[derive(Debug)]
pub(super) struct ViewHealth {
    pub(super) services: Health,
    pub(super) slices: Health,
    pub(super) node: Option<Health>,
}

impl ViewHealth {
    pub(super) fn get(&self, resource: WatchedResource) -> Option<&Health> {
        match resource {
            WatchedResource::Services => Some(&self.services),
            WatchedResource::EndpointSlices => Some(&self.slices),
            WatchedResource::Node => self.node.as_ref(),
            WatchedResource::Pods => None,
        }
    }

    pub(super) fn all(&self) -> impl Iterator<Item = (WatchedResource, &Health)> {
        [
            (WatchedResource::Services, Some(&self.services)),
            (WatchedResource::EndpointSlices, Some(&self.slices)),
            (WatchedResource::Node, self.node.as_ref()),
        ]
        .into_iter()
        .filter_map(|(r, h)| Some((r, h?)))
    }
}

impl WatchActivity for ViewHealth {
    fn watches(&self, resource: WatchedResource) -> bool {
        self.get(resource).is_some()
    }

    /// A response arrived for this watch's collection: the API server is there.
    fn on_response(&self, resource: WatchedResource, status: http::StatusCode) {
        if let Some(health) = self.get(resource) {
            health.lock().on_response(status);
        }
    }

    /// Bytes arrived on a list or watch response: events and bookmarks alike (the
    /// watcher consumes bookmarks without telling its consumer, so they are seen here).
    fn on_data(&self, resource: WatchedResource) {
        if let Some(health) = self.get(resource) {
            health.lock().on_data();
        }
    }
}

#[derive(Debug)]
pub(super) struct Health {
    state: Mutex<HealthState>,
    /// Becomes true once `state.synced` is, which is after the store has the list:
    /// what [`ClusterView::wait_synced`](super::ClusterView::wait_synced) waits on,
    /// so that `synced()` and the objects are there when the wait returns.
    synced: tokio::sync::watch::Sender<bool>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            state: Mutex::default(),
            synced: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl Health {
    pub(super) fn lock(&self) -> MutexGuard<'_, HealthState> {
        // The state is plain counters and flags, valid whatever a panicking holder did.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn on_event(&self, seen: Seen) {
        let synced = {
            let mut state = self.lock();
            state.on_event(seen);
            state.synced
        };
        if synced && !*self.synced.borrow() {
            self.synced.send_replace(true);
        }
    }

    pub(super) async fn wait_synced(&self) {
        let mut synced = self.synced.subscribe();
        // An error means the sender is gone, which cannot happen while `self` lives.
        let _ = synced.wait_for(|s| *s).await;
    }
}

/// What a watcher event means for health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// `Init`: a list starts.
    ListStart,
    /// `InitDone`: a list is complete and applied.
    ListDone,
    /// An object (listed, added, changed or deleted).
    Object,
}

impl Seen {
    pub(super) fn of<K>(event: &watcher::Event<K>) -> Seen {
        match event {
            watcher::Event::Init => Seen::ListStart,
            watcher::Event::InitDone => Seen::ListDone,
            _ => Seen::Object,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct HealthState {
    /// The first complete list has been applied.
    pub(super) synced: bool,
    /// A relist has begun and not completed: the store holds the state from before.
    relisting: bool,
    /// The last thing the watch reported was an error.
    failing: bool,
    /// The watch stream ended (never expected).
    pub(super) ended: bool,
    last_event: Option<Instant>,
    last_activity: Option<Instant>,
    relists: u64,
    errors: BTreeMap<&'static str, u64>,
    last_error: Option<String>,
}

impl HealthState {
    fn on_event(&mut self, seen: Seen) {
        let now = Instant::now();
        self.last_event = Some(now);
        self.last_activity = Some(now);
        self.failing = false;
        match seen {
            Seen::ListStart if self.synced && !self.relisting => {
                self.relisting = true;
                self.relists += 1;
            }
            Seen::ListDone => {
                self.synced = true;
                self.relisting = false;
            }
            _ => {}
        }
    }

    pub(super) fn on_error(&mut self, label: &'static str, error: &watcher::Error) {
        self.failing = true;
        *self.errors.entry(label).or_default() += 1;
        self.last_error = Some(error.to_string());
    }

    /// A response arrived for this watch's collection: the API server is there.
    fn on_response(&mut self, status: http::StatusCode) {
        if status.is_success() {
            self.last_activity = Some(Instant::now());
            self.failing = false;
        }
    }

    /// Bytes arrived on a list or watch response: events and bookmarks alike (the
    /// watcher consumes bookmarks without telling its consumer, so they are seen here).
    fn on_data(&mut self) {
        self.last_activity = Some(Instant::now());
    }

    pub(super) fn fresh(&self, now: Instant, staleness: Duration) -> bool {
        self.synced
            && !self.failing
            && !self.relisting
            && !self.ended
            && self
                .last_activity
                .is_some_and(|t| now.saturating_duration_since(t) <= staleness)
    }

    pub(super) fn status(&self, now: Instant, staleness: Duration, objects: usize) -> WatchStatus {
        WatchStatus {
            synced: self.synced,
            fresh: self.fresh(now, staleness),
            failing: self.failing,
            relisting: self.relisting,
            objects,
            since_last_event: self.last_event.map(|t| now.saturating_duration_since(t)),
            since_last_activity: self.last_activity.map(|t| now.saturating_duration_since(t)),
            relists: self.relists,
            errors: self.errors.values().sum(),
            errors_by_kind: self.errors.clone(),
            last_error: self.last_error.clone(),
        }
    }
}

/// How the view is doing (for `/readyz`, metrics and logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewStatus {
    /// [`ClusterView::synced`](super::ClusterView::synced).
    pub synced: bool,
    /// [`ClusterView::fresh`](super::ClusterView::fresh).
    pub fresh: bool,
    /// The staleness bound in force.
    pub staleness: Duration,
    pub services: WatchStatus,
    pub endpoint_slices: WatchStatus,
    /// None when the view has no node.
    pub node: Option<WatchStatus>,
}

/// How one watch is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchStatus {
    /// Its first complete list has been applied.
    pub synced: bool,
    /// Synced, not failing, not relisting, and heard from within the staleness bound.
    pub fresh: bool,
    /// The last thing it reported was an error (it is retrying).
    pub failing: bool,
    /// A relist is under way; the store still holds the state from before it.
    pub relisting: bool,
    /// Objects in the store.
    pub objects: usize,
    /// Time since the last event (object added, changed, deleted; list start and end).
    pub since_last_event: Option<Duration>,
    /// Time since anything arrived from the API server for this watch: events,
    /// bookmarks, list pages, a watch request accepted.
    pub since_last_activity: Option<Duration>,
    /// Relists after the first list (after a `410 Gone`, say).
    pub relists: u64,
    /// Errors so far, all kinds.
    pub errors: u64,
    /// Errors so far by [`watcher_error_label`].
    pub errors_by_kind: BTreeMap<&'static str, u64>,
    /// The last error's message.
    pub last_error: Option<String>,
}

#[cfg(test)]
mod tests;
