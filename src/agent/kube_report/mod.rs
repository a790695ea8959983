//! Findings reported to the Kubernetes API, for `portdrift run --events` and
//! `--node-condition`: a Kubernetes Event per new finding, and a `NodePortDrift`
//! condition on this Node (as node-problem-detector reports problems: a temporary one is
//! an Event, a lasting one a condition).
//!
//! The agent calls [`KubeReporter::after_scan`] with each scan's findings; it decides
//! (in [`events`] and [`condition`], without I/O) and hands the writes to two tasks of
//! their own (`publish`), so a slow or failing API server never holds up a scan.

pub mod budget;
pub mod condition;
pub mod events;
mod publish;

use std::time::{Duration, Instant};

use kube::Client;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::agent::metrics::described::Described;
use crate::agent::metrics::labels::ResultLabel;
use crate::heart::finding::Finding;
use budget::{EventGate, EventOp, TokenBucket};
use condition::ConditionSummary;

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

/// The Event budget: a token bucket over every Event write (creates and series
/// updates), and the series' timing.
#[derive(Debug, Clone)]
pub struct EventsConfig {
    /// Writes at once.
    pub burst: u32,
    /// Then one per this.
    pub refill_every: Duration,
    /// A persisting finding's series is written at most this often.
    pub series_every: Duration,
    /// A finding back within this joins its earlier Event's series; gone this long,
    /// the series ends.
    pub series_window: Duration,
}

impl Default for EventsConfig {
    /// 10 at once, then 3 a minute. With a stale rule for every Service on every node
    /// of a 5,000-node cluster, the API server sees at most 50,000 Events at once (each
    /// agent writes one at a time), then 5,000 / 20 s = 250 Events/s while the deferred
    /// ones drain; one bad rule per node costs one Event per node. The series times are
    /// client-go's `tools/events` ones (`refreshTime`, `finishTime`).
    fn default() -> Self {
        EventsConfig {
            burst: 10,
            refill_every: Duration::from_secs(20),
            series_every: Duration::from_secs(30 * 60),
            series_window: Duration::from_secs(6 * 60),
        }
    }
}

/// How the condition is kept.
#[derive(Debug, Clone)]
pub struct ConditionConfig {
    /// Retries after a failed patch wait about 1 s, 2 s, 4 s, ... up to this.
    pub max_backoff: Duration,
}

impl Default for ConditionConfig {
    fn default() -> Self {
        ConditionConfig {
            max_backoff: Duration::from_secs(60),
        }
    }
}

/// Counters of what reached the API (`portdrift_events_total{result}`,
/// `portdrift_event_series_updates_total{result}`,
/// `portdrift_node_condition_patches_total{result}`) and of the Event budget
/// (`portdrift_events_over_budget_total`, `portdrift_events_pending`).
#[derive(Debug, Clone, Default)]
pub struct ReportMetrics {
    pub events: Family<ResultLabel, Counter>,
    pub series_updates: Family<ResultLabel, Counter>,
    pub condition_patches: Family<ResultLabel, Counter>,
    pub over_budget: Counter,
    pub pending: Gauge,
}

/// `result` of `portdrift_events_total`: written, dropped (a repair's Event when the
/// writer's queue is full), or refused by the API (after retries).
pub const EVENT_RESULTS: [&str; 3] = ["sent", "dropped", "failed"];
/// `result` of `portdrift_node_condition_patches_total` and
/// `portdrift_event_series_updates_total`.
pub const PATCH_RESULTS: [&str; 2] = ["ok", "failed"];

impl ReportMetrics {
    /// Registers the counters (every result at 0, so that dashboards see them).
    pub fn register(registry: &mut Described<'_>) -> ReportMetrics {
        let metrics = ReportMetrics::default();
        for result in EVENT_RESULTS {
            metrics.events.get_or_create_owned(&ResultLabel { result });
        }
        for result in PATCH_RESULTS {
            metrics
                .condition_patches
                .get_or_create_owned(&ResultLabel { result });
            metrics
                .series_updates
                .get_or_create_owned(&ResultLabel { result });
        }
        registry.add(
            "events",
            "Kubernetes Events for new findings, by result",
            None,
            metrics.events.clone(),
        );
        registry.add(
            "event_series_updates",
            "Updates of a persisting finding's Event series (count, last observed), by result",
            None,
            metrics.series_updates.clone(),
        );
        registry.add(
            "events_over_budget",
            "Findings whose Event the Event budget (or a writer behind the API server) deferred, each once; written later if the finding persists",
            None,
            metrics.over_budget.clone(),
        );
        registry.add(
            "events_pending",
            "Findings waiting for their Event, deferred by the Event budget",
            None,
            metrics.pending.clone(),
        );
        registry.add(
            "node_condition_patches",
            "Patches of the NodePortDrift Node condition, by result",
            None,
            metrics.condition_patches.clone(),
        );
        metrics
    }

    /// `portdrift_events_total{result}` now.
    pub fn events(&self, result: &'static str) -> u64 {
        self.events.get_or_create(&ResultLabel { result }).get()
    }

    /// `portdrift_event_series_updates_total{result}` now.
    pub fn series_updates(&self, result: &'static str) -> u64 {
        self.series_updates.get_or_create(&ResultLabel { result }).get()
    }

    /// `portdrift_node_condition_patches_total{result}` now.
    pub fn condition_patches(&self, result: &'static str) -> u64 {
        self.condition_patches
            .get_or_create(&ResultLabel { result })
            .get()
    }

    /// `portdrift_events_over_budget_total` now.
    pub fn over_budget(&self) -> u64 {
        self.over_budget.get()
    }

    /// `portdrift_events_pending` now.
    pub fn pending(&self) -> i64 {
        self.pending.get()
    }

    fn count_events(&self, result: &'static str, n: u64) {
        self.events.get_or_create(&ResultLabel { result }).inc_by(n);
    }

    fn count_series(&self, result: &'static str) {
        self.series_updates.get_or_create(&ResultLabel { result }).inc();
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
    tx: mpsc::Sender<EventOp>,
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
            // The bucket bounds what one scan sends; the queue holds a full burst, and
            // what does not fit waits in the gate.
            let (tx, rx) = mpsc::channel(events.burst.max(1) as usize);
            let writer = publish::EventWriter::new(client.clone(), &config, metrics.clone());
            reporter.tasks.push(tokio::spawn(writer.run(rx)));
            reporter.events = Some(EventFeed {
                gate: EventGate::new(
                    TokenBucket::new(events.burst, events.refill_every, Instant::now()),
                    events.series_every,
                    events.series_window,
                ),
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

    /// Reports one scan's findings: Events within the budget, and the condition's new
    /// value. Never waits for the API.
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
    /// findings' budget: an audit record is not deferred. Never waits for the API.
    pub fn after_repair(&mut self, outcome: &crate::agent::repair::CycleOutcome) {
        let Some(feed) = &mut self.events else { return };
        for draft in outcome.actions.iter().filter_map(events::repair_draft) {
            if let Err(e) = feed.tx.try_send(EventOp::Single { draft }) {
                let reason = match e.into_inner() {
                    EventOp::Create { draft, .. }
                    | EventOp::Series { draft, .. }
                    | EventOp::Single { draft } => draft.reason,
                };
                tracing::warn!(reason, "Event queue full: a repair Event was dropped");
                feed.metrics.count_events("dropped", 1);
            }
        }
    }
}

impl EventFeed {
    fn admit(&mut self, findings: &[Finding]) {
        let room = self.tx.capacity();
        let admitted = self
            .gate
            .admit(findings, room, Instant::now(), jiff::Timestamp::now());
        if let Some(waiting) = admitted.run_began {
            tracing::warn!(
                waiting,
                "Event budget spent: findings wait for their Event, most severe and oldest first, as the budget refills"
            );
        }
        if let Some(deferred) = admitted.run_ended {
            tracing::info!(
                deferred,
                "Event budget: every finding it deferred has its Event now, or has cleared"
            );
        }
        self.metrics.over_budget.inc_by(admitted.deferred);
        self.metrics
            .pending
            .set(i64::try_from(admitted.pending).unwrap_or(i64::MAX));
        for op in admitted.ops {
            // Cannot fail for want of room: only this feed sends, and it asked for at
            // most the room there was. A closed queue (the writer stopped) is logged.
            if self.tx.try_send(op).is_err() {
                tracing::debug!("the Event writer has stopped");
            }
        }
    }
}
