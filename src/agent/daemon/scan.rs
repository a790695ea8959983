//! One scan on a blocking thread, and recording its result in the metrics and the
//! report the HTTP server serves.

use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use super::AgentConfig;
use crate::agent::desired_view::DesiredView;
use crate::agent::http::Shared;
use crate::agent::metrics::{ResultLabel, ScanTimes};
use crate::agent::repair::{ApiState, CycleInput, CycleOutcome, Repairer};
use crate::agent::watch;
use crate::heart::acceptance::{AcceptanceInput, Acceptances};
use crate::heart::desired::DesiredState;
use crate::heart::detect::{DetectConfig, Grace};
use crate::heart::outcome::{InputState, InputStatus, ScanReport, run_scan_keeping_inputs};
use crate::scan::bundle_error::SnapshotError;
use crate::scan::input::{RuleCache, read_input_cached};
use crate::sources::live::LiveNode;
use crate::sources::rule_changes::{ChangeJournal, NF_TABLES_DUMPS};

/// Even without any announced change the nf_tables dumps are read again this often, and
/// whole: the notifications are trusted, not blindly. Not more often: a large node's full read is
/// costly enough to be most of the idle agent's cost.
const FULL_READ_EVERY: Duration = Duration::from_secs(1800);

/// What the scan thread reads the node with, moved in and handed back each scan.
pub(super) struct NodeReader {
    live: LiveNode,
    cache: RuleCache,
    /// The last desired state and the API view's change count it was built at: while
    /// nothing that can move this node's NodePorts has changed, it is still the truth,
    /// and building it again would cost a large node time and memory.
    desired: Option<(u64, DesiredState)>,
    /// With `--repair`: its history of findings lives as long as the agent.
    repairer: Option<Repairer>,
    /// When the nf_tables dumps were last read whole.
    last_whole_read: Option<Instant>,
}

impl NodeReader {
    /// With the journal of the kernel's change notifications, iptables-nft's tables are
    /// kept between reads and only what changed is read again.
    pub(super) fn new(config: &AgentConfig, journal: Option<ChangeJournal>) -> NodeReader {
        let mut live = LiveNode::new(config.live.clone()).keeping_constant_maps();
        if let Some(journal) = journal {
            live = live.following(journal);
        }
        NodeReader {
            live,
            cache: RuleCache::keeping(&NF_TABLES_DUMPS),
            desired: None,
            repairer: config.repair.clone().map(Repairer::new),
            last_whole_read: None,
        }
    }

    /// Sets up the next read: the nf_tables dumps kept from the last read are used again
    /// when `unchanged` (the kernel announced no change since that read began), unless
    /// the periodic whole read is due.
    pub(super) fn plan_read(&mut self, unchanged: bool) -> ReadPlan {
        let whole = self
            .last_whole_read
            .is_none_or(|t| t.elapsed() >= FULL_READ_EVERY);
        let reuse_nf_tables = unchanged && !whole;
        self.cache
            .allow_reuse(if reuse_nf_tables { &NF_TABLES_DUMPS } else { &[] });
        if whole {
            self.live.read_whole_next();
            self.last_whole_read = Some(Instant::now());
        }
        ReadPlan {
            reuse_nf_tables,
            whole,
        }
    }
}

/// How the next read goes (for the debug log).
#[derive(Debug, Clone, Copy)]
pub(super) struct ReadPlan {
    pub(super) reuse_nf_tables: bool,
    pub(super) whole: bool,
}

/// What a scan measured besides its report: how long its phases took, and the API
/// watches' state when it finished.
#[derive(Debug)]
pub(super) struct ScanStats {
    times: ScanTimes,
    /// None: the desired state is read from a file.
    api: Option<watch::ViewStatus>,
    /// What the repair cycle after the scan did (with `--repair`).
    pub(super) repair: Option<CycleOutcome>,
}

/// Why a scan gave no report.
#[derive(Debug, thiserror::Error)]
pub(super) enum ScanError {
    /// The desired state could not be built, from the API view or the file.
    #[error("{0}")]
    Desired(String),
    /// The node could not be read.
    #[error(transparent)]
    ReadNode(#[from] SnapshotError),
}

impl ScanError {
    /// The source it is counted under in `portdrift_scan_errors_total` and logged as.
    pub(super) fn metric_label(&self) -> &'static str {
        match self {
            ScanError::Desired(_) => "cluster",
            ScanError::ReadNode(_) => "node",
        }
    }
}

pub(super) type ScanOutcome = Result<(ScanReport, ScanStats), ScanError>;

/// The acceptances file's entries that apply, and the file as a source (None: no
/// `--accept`; the Services' own acceptances apply either way).
pub(super) type FileAcceptances = (Acceptances, Option<InputStatus>);

/// One scan on a blocking thread. The node reader is moved in and handed back.
pub(super) async fn scan_once(
    config: &AgentConfig,
    view: &DesiredView,
    mut node: NodeReader,
    (accepted, accepted_from): FileAcceptances,
) -> Result<(NodeReader, ScanOutcome), tokio::task::JoinError> {
    let job = ScanJob {
        view: view.clone(),
        node_name: config.node.clone(),
        grace: config.grace,
        range: config.nodeport_range.clone(),
        accepted,
        accepted_from,
    };
    tokio::task::spawn_blocking(move || {
        let outcome = job.run(&mut node);
        (node, outcome)
    })
    .await
}

/// What one scan needs besides the node reader, moved to its thread.
struct ScanJob {
    view: DesiredView,
    node_name: String,
    grace: Duration,
    range: RangeInclusive<u16>,
    accepted: Acceptances,
    accepted_from: Option<InputStatus>,
}

impl ScanJob {
    /// Builds the desired state (or keeps the last), reads the node, detects, and with
    /// `--repair` runs a repair cycle on the result.
    fn run(self, node: &mut NodeReader) -> ScanOutcome {
        let started = Instant::now();
        let view = &self.view;
        // Staleness is judged before the read: a view that goes stale during the scan
        // is caught by the next one.
        let stale = !view.fresh();
        // The count first: a change during the build makes the next scan build again.
        let changes = *view.changes().borrow();
        let desired = match node.desired.take() {
            Some((built_at, desired)) if built_at == changes => desired,
            _ => view.desired_state().map_err(ScanError::Desired)?,
        };
        let desired_built = Instant::now();
        let mut input = read_input_cached(&node.live, Some(&self.node_name), &mut node.cache)?;
        let node_read = Instant::now();
        add_cluster_source(&mut input.sources, cluster_source(view, &desired, stale));
        input.sources.extend(self.accepted_from);
        // Repair needs the desired state after the scan, which consumes it.
        let desired_for_repair = node.repairer.is_some().then(|| desired.clone());
        input.desired = Some(desired);
        let now = jiff::Timestamp::now();
        let detect = DetectConfig {
            grace: (!self.grace.is_zero()).then_some(Grace {
                now,
                window: self.grace,
            }),
            cluster_state_stale: stale,
            acceptances: Some(AcceptanceInput {
                file: self.accepted,
                now,
            }),
            nodeport_range: self.range,
        };
        let (report, rules, desired) = run_scan_keeping_inputs(input, &detect);
        node.cache.keep(rules);
        node.desired = desired.map(|d| (changes, d));
        let times = ScanTimes {
            total: started.elapsed(),
            build_desired: desired_built - started,
            read_node: node_read - desired_built,
            detect: node_read.elapsed(),
        };
        let repair = node
            .repairer
            .as_mut()
            .map(|repairer| repair_cycle(repairer, &report, desired_for_repair.as_ref(), view, stale));
        let api = view.watch_status();
        Ok((report, ScanStats { times, api, repair }))
    }
}

/// The desired state as a source of the report: where it came from, what it holds,
/// and whether it was stale.
fn cluster_source(view: &DesiredView, desired: &DesiredState, stale: bool) -> InputStatus {
    let (source, path) = view.source();
    let mut status = InputStatus::new(source, InputState::Ok);
    status.origin = path.map(|p| p.display().to_string());
    status.describe_cluster_state(desired);
    if stale {
        status.notes.push(view.stale_note().into());
    }
    status
}

/// Adds the agent's desired state to the node's sources. The node's own read of
/// cluster.json found none (the agent's comes from here): one source, not an absent
/// one beside it.
fn add_cluster_source(sources: &mut Vec<InputStatus>, cluster: InputStatus) {
    sources.retain(|s| !(s.source == cluster.source && s.status == InputState::Absent));
    sources.push(cluster);
}

/// One repair cycle on a scan's report.
fn repair_cycle(
    repairer: &mut Repairer,
    report: &ScanReport,
    desired: Option<&DesiredState>,
    view: &DesiredView,
    stale: bool,
) -> CycleOutcome {
    let input = CycleInput {
        report,
        desired,
        // Judged now, after the scan: repair acts on the present, and a view that went
        // stale during the scan blocks it.
        api: ApiState {
            synced: view.synced(),
            fresh: view.fresh() && !stale,
        },
        kube_proxy: report.kube_proxy.as_ref(),
    };
    repairer.cycle(&input, Instant::now())
}

pub(super) fn record(shared: &Shared, report: &ScanReport, stats: ScanStats) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    // Counts each failed source as a scan error too.
    shared.metrics.scan_done(report, &stats.times, now);
    if let Some(api) = &stats.api {
        shared.metrics.set_api_watches(api, now);
    }
    if let Some(outcome) = &stats.repair {
        // Each action was logged before and after by the repair module itself.
        for action in &outcome.actions {
            shared
                .metrics
                .repairs()
                .get_or_create(&ResultLabel {
                    result: action.result.metric_result(),
                })
                .inc();
        }
        if let Some(why) = &outcome.blocked {
            tracing::debug!(%why, "repair: not this cycle");
        }
    }
    shared.set_report(report);
    tracing::debug!(findings = report.findings.len(), took = ?stats.times.total, "scan done");
}
