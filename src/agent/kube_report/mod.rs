//! Findings reported to the Kubernetes API, for `portdrift run --events` and
//! `--node-condition`: a Kubernetes Event per new finding, and a `NodePortDrift`
//! condition on this Node (as node-problem-detector reports problems: a temporary one is
//! an Event, a lasting one a condition).
//!
//! The agent calls [`KubeReporter::after_scan`] with each scan's findings; it decides
//! (in [`events`] and [`condition`], without I/O) and hands the writes to two tasks of
//! their own (`publish`), so a slow or failing API server never holds up a scan.

pub mod condition;
pub mod events;
mod publish;

use std::time::{Duration, Instant};

use kube::Client;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::agent::metrics::labels::ResultLabel;
use crate::heart::finding::Finding;
use condition::ConditionSummary;
use events::{EventDraft, EventGate, TokenBucket};

/// What to report, and how fast.
#[derive(Debug, Clone)]
pub struct ReportConfig {
    /// This node's name: `reportingInstance`, and the Node of node-wide findings and of
    /// the condition.
    pub node: String,
    /// Write Events (`--events`).
    pub events: Option<EventsConfig>,
    /// Keep the `NodePortDrift` condition (`--node-condition`).
    pub condition: Option<ConditionConfig>,
    /// The longest one API request may take before it counts as failed.
    pub request_timeout: Duration,
}

impl ReportConfig {
    /// The agent's defaults for `--events` and `--node-condition`; `None` when neither
    /// is asked for.
    pub fn for_flags(node: &str, events: bool, node_condition: bool) -> Option<ReportConfig> {
        (events || node_condition).then(|| ReportConfig {
            node: node.to_string(),
            events: events.then(EventsConfig::default),
            condition: node_condition.then(ConditionConfig::default),
            request_timeout: Duration::from_secs(10),
        })
    }
}

/// The Event rate limit: a token bucket.
#[derive(Debug, Clone)]
pub struct EventsConfig {
    /// Events at once.
    pub burst: u32,
    /// Then one per this.
    pub refill_every: Duration,
}

impl Default for EventsConfig {
    /// 25 at once (client-go's per-object burst), then 6 a minute.
    fn default() -> Self {
        EventsConfig {
            burst: 25,
            refill_every: Duration::from_secs(10),
        }
    }
}

/// How the condition is kept.
#[derive(Debug, Clone)]
pub struct ConditionConfig {
    /// Patch at least this often, even unchanged (node-problem-detector: 5 min).
    pub heartbeat: Duration,
    /// Retries after a failed patch wait 1 s, 2 s, 4 s, ... up to this.
    pub max_backoff: Duration,
}

impl Default for ConditionConfig {
    fn default() -> Self {
        ConditionConfig {
            heartbeat: Duration::from_secs(300),
            max_backoff: Duration::from_secs(60),
        }
    }
}

/// Counters of what reached the API (`portdrift_events_total{result}`,
/// `portdrift_node_condition_patches_total{result}`).
#[derive(Debug, Clone, Default)]
pub struct ReportMetrics {
    pub events: Family<ResultLabel, Counter>,
    pub condition_patches: Family<ResultLabel, Counter>,
}

/// `result` of `portdrift_events_total`: written, dropped by the rate limit, or
/// refused by the API (after retries).
pub const EVENT_RESULTS: [&str; 3] = ["sent", "dropped", "failed"];
/// `result` of `portdrift_node_condition_patches_total`.
pub const PATCH_RESULTS: [&str; 2] = ["ok", "failed"];

impl ReportMetrics {
    /// Registers the counters (every result at 0, so that dashboards see them).
    pub fn register(registry: &mut Registry) -> ReportMetrics {
        let metrics = ReportMetrics::default();
        for result in EVENT_RESULTS {
            metrics.events.get_or_create_owned(&ResultLabel { result });
        }
        for result in PATCH_RESULTS {
            metrics
                .condition_patches
                .get_or_create_owned(&ResultLabel { result });
        }
        registry.register(
            "events",
            "Kubernetes Events for new findings, by result",
            metrics.events.clone(),
        );
        registry.register(
            "node_condition_patches",
            "Patches of the NodePortDrift Node condition, by result",
            metrics.condition_patches.clone(),
        );
        metrics
    }

    /// `portdrift_events_total{result}` now.
    pub fn events(&self, result: &'static str) -> u64 {
        self.events.get_or_create(&ResultLabel { result }).get()
    }

    /// `portdrift_node_condition_patches_total{result}` now.
    pub fn condition_patches(&self, result: &'static str) -> u64 {
        self.condition_patches
            .get_or_create(&ResultLabel { result })
            .get()
    }

    fn count_events(&self, result: &'static str, n: u64) {
        self.events.get_or_create(&ResultLabel { result }).inc_by(n);
    }

    fn count_patch(&self, result: &'static str) {
        self.condition_patches
            .get_or_create(&ResultLabel { result })
            .inc();
    }
}

/// Why a write to the API failed. Every variant has a bounded
/// [`metric_label`](Self::metric_label).
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot {what}: {source}")]
    Api {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("cannot {what}: no answer within {after:?}")]
    Timeout { what: &'static str, after: Duration },
}

impl ReportError {
    /// A short, bounded label for logs and metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReportError::Api {
                source: kube::Error::Api(status),
                ..
            } => match status.code {
                403 => "forbidden",
                404 => "not-found",
                409 => "conflict",
                422 => "invalid",
                429 => "throttled",
                500..=599 => "server",
                _ => "refused",
            },
            ReportError::Api { .. } => "transport",
            ReportError::Timeout { .. } => "timeout",
        }
    }

    /// Whether trying again may help: the server was busy, broken or unreachable, not
    /// refusing the request itself.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.metric_label(),
            "throttled" | "server" | "transport" | "timeout"
        )
    }

    /// The API server answered 404.
    pub fn is_not_found(&self) -> bool {
        self.metric_label() == "not-found"
    }
}

/// Writes Events and the condition for the agent. Stops its tasks when dropped.
pub struct KubeReporter {
    events: Option<EventFeed>,
    condition: Option<watch::Sender<Option<ConditionSummary>>>,
    tasks: Vec<JoinHandle<()>>,
}

struct EventFeed {
    gate: EventGate,
    tx: mpsc::Sender<EventDraft>,
    metrics: ReportMetrics,
}

impl Drop for KubeReporter {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl KubeReporter {
    /// Starts the writers `config` asks for. Must be called inside a Tokio runtime.
    pub fn start(client: Client, config: ReportConfig, metrics: ReportMetrics) -> KubeReporter {
        let mut reporter = KubeReporter {
            events: None,
            condition: None,
            tasks: Vec::new(),
        };
        if let Some(events) = &config.events {
            // The bucket bounds what one scan sends; the queue holds a full burst.
            let (tx, rx) = mpsc::channel(events.burst.max(1) as usize);
            let writer = publish::EventWriter::new(client.clone(), &config, metrics.clone());
            reporter.tasks.push(tokio::spawn(writer.run(rx)));
            reporter.events = Some(EventFeed {
                gate: EventGate::new(TokenBucket::new(
                    events.burst,
                    events.refill_every,
                    Instant::now(),
                )),
                tx,
                metrics: metrics.clone(),
            });
        }
        if let Some(condition) = &config.condition {
            let (tx, rx) = watch::channel(None);
            let keeper = publish::ConditionKeeper::new(client, &config, condition.clone(), metrics);
            reporter.tasks.push(tokio::spawn(keeper.run(rx)));
            reporter.condition = Some(tx);
        }
        reporter
    }

    /// Reports one scan's findings: Events for those that newly qualify, and the
    /// condition's new value. Never waits for the API.
    pub fn after_scan(&mut self, findings: &[Finding]) {
        if let Some(feed) = &mut self.events {
            feed.admit(findings);
        }
        if let Some(condition) = &self.condition {
            condition.send_replace(Some(condition::summarize(findings)));
        }
    }
}

impl KubeReporter {
    /// Records a repair cycle's actions that changed (or failed to change) the node as
    /// Events on the Node. Repair caps its actions per cycle, so these bypass the
    /// findings' rate limit: an audit record is not dropped. Never waits for the API.
    pub fn after_repair(&mut self, outcome: &crate::agent::repair::CycleOutcome) {
        let Some(feed) = &mut self.events else { return };
        for draft in outcome.actions.iter().filter_map(events::repair_draft) {
            if let Err(e) = feed.tx.try_send(draft) {
                tracing::warn!(
                    reason = e.into_inner().reason,
                    "Event queue full: a repair Event was dropped"
                );
                feed.metrics.count_events("dropped", 1);
            }
        }
    }
}

impl EventFeed {
    fn admit(&mut self, findings: &[Finding]) {
        let admitted = self.gate.admit(findings, Instant::now());
        if admitted.drops_began {
            tracing::warn!(
                "Event rate limit reached: Events for new findings are dropped (and counted) until it refills"
            );
        }
        if let Some(dropped) = admitted.drops_ended {
            tracing::info!(
                dropped,
                "Event rate limit refilled: Events for new findings are written again"
            );
        }
        let mut dropped = admitted.dropped;
        for draft in admitted.events {
            if let Err(e) = self.tx.try_send(draft) {
                // The writer is behind a full burst (a slow API server): same as the limit.
                tracing::debug!(reason = e.into_inner().reason, "Event queue full: dropped");
                dropped += 1;
            }
        }
        self.metrics.count_events("dropped", dropped);
    }
}
