//! The writers: one task writes Events, one keeps the Node condition. Each API call has
//! a deadline; failures are logged with a bounded label and counted, and never reach
//! the scan loop.
//!
//! Events are written directly, not through kube-runtime's `Recorder`: it folds Events
//! with the same reason about one object into a series that keeps only the first note,
//! losing a second stale endpoint's address. De-duplication and the rate limit are
//! [`crate::agent::kube_report::events::EventGate`]'s.

use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use tokio::sync::{mpsc, watch};

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

// === Events ===

pub(super) struct EventWriter {
    client: Client,
    node: String,
    timeout: Duration,
    metrics: ReportMetrics,
    /// The last `eventTime` used, so that two Events never share a name.
    last_stamp: Option<Timestamp>,
}

impl EventWriter {
    pub(super) fn new(client: Client, config: &ReportConfig, metrics: ReportMetrics) -> EventWriter {
        EventWriter {
            client,
            node: config.node.clone(),
            timeout: config.request_timeout,
            metrics,
            last_stamp: None,
        }
    }

    /// Writes the queued Events one at a time until the queue closes.
    pub(super) async fn run(mut self, mut queue: mpsc::Receiver<EventDraft>) {
        while let Some(draft) = queue.recv().await {
            match self.write(&draft).await {
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
    }

    async fn write(&mut self, draft: &EventDraft) -> Result<(), ReportError> {
        let (regarding, related) = self.references(&draft.regarding).await;
        let stamp = self.stamp();
        let event = k8s_event(draft, regarding, related, &self.node, stamp);
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let mut wait = EVENT_RETRY;
        let mut attempt = 1;
        loop {
            let result = timed(
                "create an Event",
                self.timeout,
                api.create(&PostParams::default(), &event),
            )
            .await;
            match result {
                Ok(_) => return Ok(()),
                Err(e) if e.is_transient() && attempt < EVENT_ATTEMPTS => {
                    tracing::debug!(error = %e, attempt, "retrying an Event");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
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

    /// Patches the condition whenever the wanted one changes or a heartbeat is due,
    /// retrying failures with a growing wait, until the sender is dropped.
    pub(super) async fn run(mut self, mut wanted: watch::Receiver<Option<ConditionSummary>>) {
        self.seed().await;
        let mut retry = PATCH_RETRY;
        let mut wait: Option<Duration> = None;
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
            let now = Timestamp::now();
            let Some(condition) = self.tracker.due(&want, now, self.config.heartbeat) else {
                wait = Some(self.tracker.until_heartbeat(now, self.config.heartbeat));
                continue;
            };
            match self.patch(&condition).await {
                Ok(()) => {
                    if self.tracker.drift() != Some(want.drift) {
                        tracing::info!(status = want.status(), message = %want.message, "NodePortDrift condition set");
                    }
                    self.tracker.accepted(&want, &condition);
                    self.metrics.count_patch("ok");
                    retry = PATCH_RETRY;
                    wait = Some(self.config.heartbeat);
                }
                Err(error) => {
                    tracing::warn!(%error, error_kind = error.metric_label(), retry_in = ?retry, "cannot patch the NodePortDrift condition");
                    self.metrics.count_patch("failed");
                    wait = Some(retry);
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
