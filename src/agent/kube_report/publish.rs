//! The writers: one task writes Events, one keeps the Node condition. Each API call has
//! a deadline; failures are logged with a bounded label and counted, and never reach
//! the scan loop.
//!
//! Events are written directly, not through kube-runtime's `Recorder`: it folds Events
//! with the same reason about one object into a series that keeps only the first note,
//! losing a second stale endpoint's address. What is written when is
//! [`crate::agent::kube_report::budget::EventGate`]'s; a series here is one finding's.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Service};
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use tokio::sync::{mpsc, watch};

use crate::agent::kube_report::budget::EventOp;
use crate::agent::kube_report::condition::{ConditionSummary, ConditionTracker};
use crate::agent::kube_report::events::{EventDraft, Regarding, k8s_event, node_reference};
use crate::agent::kube_report::{ConditionConfig, ReportConfig, ReportError, ReportMetrics};

/// Attempts at writing one Event (the first and two retries), for transient failures.
const EVENT_ATTEMPTS: u32 = 3;
/// The wait before the first retry of an Event; doubled for the next.
const EVENT_RETRY: Duration = Duration::from_millis(500);
/// The wait before the first retry of a failed condition patch.
const PATCH_RETRY: Duration = Duration::from_secs(1);

/// `fut` within `after`, its error labelled with `what` was being done.
async fn timed<T>(
    what: &'static str,
    after: Duration,
    fut: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, ReportError> {
    match tokio::time::timeout(after, fut).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(ReportError::Api { what, source }),
        Err(_) => Err(ReportError::Timeout { what, after }),
    }
}

/// `wait` plus up to a quarter more, at random (client-go's `wait.Jitter(d, 0.25)`), so
/// that agents that failed together do not retry together.
fn jittered(wait: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // A randomly keyed hasher (std's) is random enough to spread retries.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    wait + wait.mul_f64((random % 1000) as f64 / 4000.0)
}

// === Events ===

/// How many Events' names the writer keeps for their series; past it, the oldest is
/// forgotten, and its next series write creates the Event anew (as after its TTL).
const NAMES_KEPT: usize = 4096;

/// `f` tried up to [`EVENT_ATTEMPTS`] times while it fails transiently.
async fn with_retries<T, F, Fut>(mut f: F) -> Result<T, ReportError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ReportError>>,
{
    let mut wait = EVENT_RETRY;
    let mut attempt = 1;
    loop {
        match f().await {
            Err(e) if e.is_transient() && attempt < EVENT_ATTEMPTS => {
                tracing::debug!(error = %e, attempt, "retrying an Event write");
                tokio::time::sleep(jittered(wait)).await;
                wait *= 2;
                attempt += 1;
            }
            result => return result,
        }
    }
}

pub(super) struct EventWriter {
    client: Client,
    node: String,
    timeout: Duration,
    metrics: ReportMetrics,
    /// The last `eventTime` used, so that two Events never share a name.
    last_stamp: Option<Timestamp>,
    /// Each Event's namespace and name, by the budget's id, for its series.
    names: BTreeMap<u64, (String, String)>,
}

impl EventWriter {
    pub(super) fn new(client: Client, config: &ReportConfig, metrics: ReportMetrics) -> EventWriter {
        EventWriter {
            client,
            node: config.node.clone(),
            timeout: config.request_timeout,
            metrics,
            last_stamp: None,
            names: BTreeMap::new(),
        }
    }

    /// Makes the queued writes one at a time until the queue closes.
    pub(super) async fn run(mut self, mut queue: mpsc::Receiver<EventOp>) {
        while let Some(op) = queue.recv().await {
            match op {
                EventOp::Create { id, draft } => {
                    let created = self.create(&draft, None).await;
                    if let Ok(name) = &created {
                        self.remember(id, name.clone());
                    }
                    self.count_create(&draft, created.map(drop));
                }
                EventOp::Single { draft } => {
                    let created = self.create(&draft, None).await;
                    self.count_create(&draft, created.map(drop));
                }
                EventOp::Series {
                    id,
                    draft,
                    count,
                    last_observed,
                } => {
                    let series = EventSeries {
                        count: i32::try_from(count).unwrap_or(i32::MAX),
                        last_observed_time: MicroTime(last_observed),
                    };
                    match self.series(id, &draft, series).await {
                        Ok(()) => {
                            tracing::debug!(reason = draft.reason, count, "Event series written");
                            self.metrics.count_series("ok");
                        }
                        Err(error) => {
                            tracing::warn!(
                                %error,
                                error_kind = error.metric_label(),
                                reason = draft.reason,
                                "cannot write a Kubernetes Event's series"
                            );
                            self.metrics.count_series("failed");
                        }
                    }
                }
            }
        }
    }

    fn count_create(&self, draft: &EventDraft, result: Result<(), ReportError>) {
        match result {
            Ok(()) => {
                tracing::debug!(reason = draft.reason, "Event written");
                self.metrics.count_events("sent", 1);
            }
            Err(error) => {
                tracing::warn!(
                    %error,
                    error_kind = error.metric_label(),
                    reason = draft.reason,
                    "cannot write a Kubernetes Event"
                );
                self.metrics.count_events("failed", 1);
            }
        }
    }

    fn remember(&mut self, id: u64, name: (String, String)) {
        self.names.insert(id, name);
        while self.names.len() > NAMES_KEPT {
            self.names.pop_first();
        }
    }

    /// Creates the Event for `draft` (with `series` when it recreates one): its
    /// namespace and name.
    async fn create(
        &mut self,
        draft: &EventDraft,
        series: Option<EventSeries>,
    ) -> Result<(String, String), ReportError> {
        let (regarding, related) = self.references(&draft.regarding).await;
        let stamp = self.stamp();
        let mut event = k8s_event(draft, regarding, related, &self.node, stamp);
        event.series = series;
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let name = event.metadata.name.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let params = PostParams::default();
        with_retries(|| timed("create an Event", self.timeout, api.create(&params, &event))).await?;
        Ok((namespace, name))
    }

    /// Writes an Event's series: a strategic merge patch of `series` alone, as
    /// client-go's `tools/events` sends it; an Event that is gone (its TTL passed) or
    /// was never written is created with the series.
    async fn series(&mut self, id: u64, draft: &EventDraft, series: EventSeries) -> Result<(), ReportError> {
        if let Some((namespace, name)) = self.names.get(&id) {
            let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
            let patch = Patch::Strategic(serde_json::json!({ "series": series }));
            let params = PatchParams::default();
            let patched = with_retries(|| {
                timed(
                    "patch an Event's series",
                    self.timeout,
                    api.patch(name, &params, &patch),
                )
            })
            .await;
            match patched {
                Err(e) if e.is_not_found() => {}
                other => return other.map(drop),
            }
        }
        let name = self.create(draft, Some(series)).await?;
        self.remember(id, name);
        Ok(())
    }

    /// The Event's `regarding` and `related` objects. A Service is looked up for its
    /// UID, without which `kubectl describe service` hides the Event; a deleted Service
    /// hands the Event to the Node.
    async fn references(&self, regarding: &Regarding) -> (ObjectReference, Option<ObjectReference>) {
        let node = node_reference(&self.node);
        let Regarding::Service { namespace, name } = regarding else {
            return (node, None);
        };
        let api: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        match timed("look up a Service", self.timeout, api.get(name)).await {
            Ok(service) => (service.object_ref(&()), Some(node)),
            Err(e) if e.is_not_found() => (node, None),
            Err(error) => {
                tracing::debug!(%error, namespace, name, "the Event refers to the Service by name only");
                let by_name = ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Service".into()),
                    namespace: Some(namespace.clone()),
                    name: Some(name.clone()),
                    ..ObjectReference::default()
                };
                (by_name, Some(node))
            }
        }
    }

    /// Now, or just after the last stamp when the clock has not moved on.
    fn stamp(&mut self) -> Timestamp {
        let mut now = Timestamp::now();
        if let Some(last) = self.last_stamp
            && now <= last
        {
            now = last + jiff::SignedDuration::from_nanos(1);
        }
        self.last_stamp = Some(now);
        now
    }
}

// === The Node condition ===

pub(super) struct ConditionKeeper {
    api: Api<Node>,
    node: String,
    timeout: Duration,
    config: ConditionConfig,
    metrics: ReportMetrics,
    tracker: ConditionTracker,
}

impl ConditionKeeper {
    pub(super) fn new(
        client: Client,
        report: &ReportConfig,
        config: ConditionConfig,
        metrics: ReportMetrics,
    ) -> ConditionKeeper {
        ConditionKeeper {
            api: Api::all(client),
            node: report.node.clone(),
            timeout: report.request_timeout,
            config,
            metrics,
            tracker: ConditionTracker::default(),
        }
    }

    /// Patches the condition whenever its status (and so its reason) changes, retrying
    /// a failure with a growing, jittered wait, until the sender is dropped. Nothing is
    /// patched while the status holds: 5,000 agents re-patching unchanged conditions
    /// would be load on the API server for nothing.
    pub(super) async fn run(mut self, mut wanted: watch::Receiver<Option<ConditionSummary>>) {
        self.seed().await;
        let mut retry = PATCH_RETRY;
        let mut wait: Option<Duration> = None;
        // After a failure, no patch before this, even when a scan asks sooner.
        let mut retry_at: Option<tokio::time::Instant> = None;
        loop {
            let woke = match wait {
                Some(wait) => tokio::select! {
                    changed = wanted.changed() => changed,
                    () = tokio::time::sleep(wait) => Ok(()),
                },
                None => wanted.changed().await,
            };
            if woke.is_err() {
                return;
            }
            let Some(want) = wanted.borrow_and_update().clone() else {
                continue;
            };
            let Some(condition) = self.tracker.due(&want, Timestamp::now()) else {
                // Back to what the API holds: nothing left to retry.
                retry = PATCH_RETRY;
                retry_at = None;
                wait = None;
                continue;
            };
            if let Some(at) = retry_at {
                let now = tokio::time::Instant::now();
                if now < at {
                    wait = Some(at - now);
                    continue;
                }
            }
            match self.patch(&condition).await {
                Ok(()) => {
                    tracing::info!(status = want.status(), condition_message = %want.message, "NodePortDrift condition set");
                    self.tracker.accepted(&want, &condition);
                    self.metrics.count_patch("ok");
                    retry = PATCH_RETRY;
                    retry_at = None;
                    wait = None;
                }
                Err(error) => {
                    let retry_in = jittered(retry);
                    tracing::warn!(%error, error_kind = error.metric_label(), ?retry_in, "cannot patch the NodePortDrift condition");
                    self.metrics.count_patch("failed");
                    wait = Some(retry_in);
                    retry_at = Some(tokio::time::Instant::now() + retry_in);
                    retry = (retry * 2).min(self.config.max_backoff.max(PATCH_RETRY));
                }
            }
        }
    }

    /// Starts from the condition the Node carries, if it can be read.
    async fn seed(&mut self) {
        match timed("read this Node", self.timeout, self.api.get(&self.node)).await {
            Ok(node) => {
                let conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
                self.tracker.seed(&conditions);
            }
            Err(error) => {
                tracing::debug!(%error, "the NodePortDrift condition starts without the Node's current one")
            }
        }
    }

    /// `PATCH nodes/<node>/status`, a strategic merge patch: conditions merge by
    /// `type`, so the kubelet's own conditions are left alone.
    async fn patch(&self, condition: &k8s_openapi::api::core::v1::NodeCondition) -> Result<(), ReportError> {
        let patch = serde_json::json!({"status": {"conditions": [condition]}});
        let params = PatchParams::default();
        timed(
            "patch the Node's status",
            self.timeout,
            self.api
                .patch_status(&self.node, &params, &Patch::Strategic(patch)),
        )
        .await
        .map(drop)
    }
}
