//! `--repair`: removing stale kube-proxy rules, carefully.
//!
//! It deletes rules on every node at once, so a [`Repairer`] acts only when the
//! cluster state is synced and fresh; the finding was seen in two scans, past a
//! minimum age and outside the grace window; and the backend was read in full, with
//! a fresh complete read right before acting that still holds the object as planned.
//! At most `max_actions` per cycle, stopping at the first failure. Planning is pure
//! ([`plan`](crate::heart::repair::plan::plan)); the kernel I/O is in [`apply`].
//!
//! Where a healthy kube-proxy writes the backend it is first *nudged* (its
//! `KUBE-PROXY-CANARY` chain is deleted, so it resyncs and removes its own stale
//! rules); only drift that survives `nudge_wait` is removed directly.

pub mod apply;
pub mod oneshot;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::heart::desired::DesiredState;
use crate::heart::finding::{Finding, FindingId, Kind};
use crate::heart::model::{Backend, Family};
use crate::heart::observed::KubeProxyHealth;
use crate::heart::outcome::{InputState, ScanReport};
use crate::sources::tools::ToolLimits;

use crate::heart::repair::{PlanContext, Refusal, RepairAction, RepairRulesets};

/// How repair behaves.
#[derive(Debug, Clone)]
pub struct RepairConfig {
    /// The most actions taken in one cycle (`--repair-max`).
    pub max_actions: usize,
    /// In how many scans a finding must have been seen.
    pub min_scans: u32,
    /// How long a finding must have persisted since it was first seen.
    pub min_age: Duration,
    /// How long a nudged kube-proxy gets to resync before drift in its backend is
    /// removed directly.
    pub nudge_wait: Duration,
    /// The grace window: no finding on a port whose Service (or its EndpointSlices)
    /// changed more recently than this is acted on, whatever its kind.
    pub grace: Duration,
    /// Plan and report the exact commands, change nothing.
    pub dry_run: bool,
    /// Limits on every tool run (dumps and restores).
    pub limits: ToolLimits,
}

/// `--repair-max` default: enough for one stale Service's rule and chains, few enough
/// that a wrong decision repeated on every node stays small.
pub const DEFAULT_MAX_ACTIONS: usize = 5;

impl Default for RepairConfig {
    fn default() -> Self {
        RepairConfig {
            max_actions: DEFAULT_MAX_ACTIONS,
            min_scans: 2,
            min_age: Duration::from_secs(60),
            nudge_wait: Duration::from_secs(60),
            grace: Duration::from_secs(30),
            dry_run: false,
            limits: ToolLimits::default(),
        }
    }
}

/// The API view's state, as the watch (or a one-shot list) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiState {
    /// The caches have been filled once (a one-shot list that succeeded).
    pub synced: bool,
    /// The caches are current (the watch is not failing or silent).
    pub fresh: bool,
}

/// What one repair cycle looks at: the scan just made and the state around it.
#[derive(Debug, Clone, Copy)]
pub struct CycleInput<'a> {
    pub report: &'a ScanReport,
    pub desired: Option<&'a DesiredState>,
    pub api: ApiState,
    /// What kube-proxy's `/healthz` said in this scan; None when it did not answer.
    pub kube_proxy: Option<&'a KubeProxyHealth>,
}

/// How one action ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairResult {
    Applied,
    /// Dry run: the commands were printed, not run.
    DryRun,
    Skipped(String),
    Failed(String),
}

impl RepairResult {
    /// The `result` label of `portdrift_repairs_total`.
    pub fn metric_result(&self) -> &'static str {
        match self {
            RepairResult::Applied => "applied",
            RepairResult::DryRun | RepairResult::Skipped(_) => "skipped",
            RepairResult::Failed(_) => "failed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionOutcome {
    pub action: RepairAction,
    pub result: RepairResult,
}

/// Everything one cycle did and did not do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleOutcome {
    /// The whole cycle was refused (stale API state, ...), and why.
    pub blocked: Option<String>,
    pub actions: Vec<ActionOutcome>,
    /// Findings repair did not act on, and why.
    pub refused: Vec<Refusal>,
}

impl CycleOutcome {
    pub fn applied(&self) -> usize {
        self.actions
            .iter()
            .filter(|a| a.result == RepairResult::Applied)
            .count()
    }

    pub fn failed(&self) -> bool {
        self.actions
            .iter()
            .any(|a| matches!(a.result, RepairResult::Failed(_)))
    }

    /// Whether a nudge was applied in this cycle.
    pub fn nudged(&self) -> bool {
        self.actions
            .iter()
            .any(|a| a.action.is_nudge() && a.result == RepairResult::Applied)
    }
}

/// What repair remembers a finding by across scans: its identity and its rule's text
/// (rather than its line, which moves when other rules come and go). An empty rule is
/// the same as none.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RepairKey {
    finding: FindingId,
    rule: Option<String>,
}

impl RepairKey {
    fn of(f: &Finding) -> RepairKey {
        RepairKey {
            finding: f.identity(),
            rule: f.rule.clone().filter(|rule| !rule.is_empty()),
        }
    }
}

/// One backend in one family: what a ruleset read and a nudge are about.
type BackendKey = (Backend, Family);

#[derive(Debug, Clone, Copy)]
struct Seen {
    first: Instant,
    scans: u32,
}

/// Repair across scans: remembers when each finding was first seen and which backends
/// were nudged, and acts each cycle on what is confirmed.
#[derive(Debug)]
pub struct Repairer {
    config: RepairConfig,
    history: HashMap<RepairKey, Seen>,
    nudged: BTreeMap<(Backend, Family), Instant>,
    /// What the last cycle logged about not acting: the agent cycles every scan, and
    /// the same reason is not worth a log line every time.
    said: BTreeSet<String>,
}

impl Repairer {
    pub fn new(config: RepairConfig) -> Repairer {
        Repairer {
            config,
            history: HashMap::new(),
            nudged: BTreeMap::new(),
            said: BTreeSet::new(),
        }
    }

    pub fn config(&self) -> &RepairConfig {
        &self.config
    }

    /// Records a scan's findings: a finding absent from a scan starts over.
    pub fn observe(&mut self, report: &ScanReport, now: Instant) {
        let mut next = HashMap::with_capacity(report.findings.len());
        for f in report
            .findings
            .iter()
            .filter(|f| crate::heart::repair::plan::REPAIRABLE.contains(&f.kind))
        {
            let key = RepairKey::of(f);
            let seen = match self.history.get(&key) {
                Some(s) => Seen {
                    first: s.first,
                    scans: s.scans + 1,
                },
                None => Seen { first: now, scans: 1 },
            };
            next.insert(key, seen);
        }
        self.history = next;
    }

    /// One cycle: records `input.report`, then repairs what is confirmed.
    pub fn cycle(&mut self, input: &CycleInput<'_>, now: Instant) -> CycleOutcome {
        self.observe(input.report, now);
        self.act(input, now)
    }

    /// Repairs what the history confirms in `input.report` (already observed).
    pub fn act(&mut self, input: &CycleInput<'_>, now: Instant) -> CycleOutcome {
        let mut out = CycleOutcome::default();
        let desired = match current_state(input) {
            Ok(desired) => desired,
            Err(why) => {
                let mut said = BTreeSet::from([why.clone()]);
                std::mem::swap(&mut said, &mut self.said);
                if !said.contains(&why) {
                    tracing::info!(reason = %why, "repair: not acting while this lasts");
                }
                out.blocked = Some(why);
                return out;
            }
        };
        let (eligible, refused) = self.eligible(input.report, desired, now);
        out.refused = refused;
        let backends: BTreeSet<(Backend, Family)> = eligible
            .iter()
            .filter_map(|f| Some((f.backend?, f.family?)))
            .collect();
        // A nudge that did its job leaves no finding behind in its backend.
        self.nudged.retain(|k, _| backends.contains(k));
        if eligible.is_empty() {
            return out;
        }
        let (rulesets, unreadable) = read_rulesets(&backends, self.config.limits);
        let (nudge, waiting) = self.nudge_targets(input, &rulesets, now);
        let mut ready = Vec::new();
        for f in eligible {
            let backend = (
                f.backend.unwrap_or(Backend::IptablesNft),
                f.family.unwrap_or(Family::Ipv4),
            );
            if let Some(why) = unreadable.get(&backend) {
                out.refused
                    .push(refusal(f, format!("could not read the backend again: {why}")));
            } else if let Some(left) = waiting.get(&backend) {
                out.refused.push(refusal(
                    f,
                    format!(
                        "kube-proxy was nudged; waiting {} s more for its resync",
                        left.as_secs()
                    ),
                ));
            } else {
                ready.push(f);
            }
        }
        let planned = crate::heart::repair::plan::plan(
            &ready,
            PlanContext {
                desired,
                rulesets: &rulesets,
                nudge: &nudge,
            },
        );
        let mut said = BTreeSet::new();
        for r in &planned.refused {
            let line = format!("{}: {}", r.finding, r.reason);
            if !self.said.contains(&line) {
                tracing::info!(finding = %r.finding, reason = %r.reason, "repair: left alone");
            }
            said.insert(line);
        }
        self.said = said;
        out.refused.extend(planned.refused);
        out.actions = self.apply_actions(planned.actions, now);
        out
    }

    /// Findings confirmed by the history, and those not (yet), with why.
    fn eligible<'r>(
        &self,
        report: &'r ScanReport,
        desired: &DesiredState,
        now: Instant,
    ) -> (Vec<&'r Finding>, Vec<Refusal>) {
        let wall = jiff::Timestamp::now();
        let mut eligible = Vec::new();
        let mut refused = Vec::new();
        for f in report
            .findings
            .iter()
            .filter(|f| crate::heart::repair::plan::REPAIRABLE.contains(&f.kind))
        {
            let seen = self.history.get(&RepairKey::of(f));
            let age = seen
                .map(|s| now.saturating_duration_since(s.first))
                .unwrap_or_default();
            let scans = seen.map(|s| s.scans).unwrap_or(0);
            let why = if f.on_stale_cluster_state {
                Some("drawn from a cluster state that is not current".to_string())
            } else if let Some(left) = f.pending_seconds {
                Some(format!("inside the grace window ({left} s left)"))
            } else if let Some(ago) = port_changed_within(desired, f, wall, self.config.grace) {
                Some(format!(
                    "the Service owning the port changed {} s ago, inside the grace window",
                    ago.as_secs()
                ))
            } else if scans < self.config.min_scans || age < self.config.min_age {
                Some(format!(
                    "not confirmed yet: seen in {scans} scan(s) over {} s (needs {} over {} s)",
                    age.as_secs(),
                    self.config.min_scans,
                    self.config.min_age.as_secs()
                ))
            } else {
                source_not_ok(report, f)
            };
            match why {
                Some(reason) => refused.push(refusal(f, reason)),
                None => eligible.push(f),
            }
        }
        (eligible, refused)
    }

    /// Which backends to nudge, and which are still waiting after a nudge.
    fn nudge_targets(
        &self,
        input: &CycleInput<'_>,
        rulesets: &RepairRulesets,
        now: Instant,
    ) -> (BTreeSet<BackendKey>, BTreeMap<BackendKey, Duration>) {
        let mut nudge = BTreeSet::new();
        let mut waiting = BTreeMap::new();
        if !input.kube_proxy.is_some_and(kube_proxy_live) {
            return (nudge, waiting);
        }
        // The stale side of a backend split is by definition not what kube-proxy writes.
        let leftover: BTreeSet<(Backend, Family)> = input
            .report
            .findings
            .iter()
            .filter(|f| f.kind == Kind::BackendSplit)
            .filter_map(|f| Some((f.backend?, f.family?)))
            .collect();
        for (&key, rs) in &rulesets.iptables {
            if leftover.contains(&key) || !rs.has_kube_proxy() {
                continue;
            }
            match self.nudged.get(&key) {
                Some(&at) => {
                    let since = now.saturating_duration_since(at);
                    if since < self.config.nudge_wait {
                        waiting.insert(key, self.config.nudge_wait - since);
                    }
                    // Waited long enough, and the drift survived: remove it directly.
                }
                None => {
                    nudge.insert(key);
                }
            }
        }
        (nudge, waiting)
    }

    /// Takes the planned actions in order, up to the cap, stopping at the first failure.
    fn apply_actions(&mut self, actions: Vec<RepairAction>, now: Instant) -> Vec<ActionOutcome> {
        let mut outcomes = Vec::with_capacity(actions.len());
        let mut stop: Option<String> = None;
        for (i, action) in actions.into_iter().enumerate() {
            let result = if let Some(why) = &stop {
                RepairResult::Skipped(why.clone())
            } else if i >= self.config.max_actions {
                RepairResult::Skipped(format!(
                    "over the cap of {} actions per cycle (--repair-max)",
                    self.config.max_actions
                ))
            } else if self.config.dry_run {
                tracing::info!(action = %action.describe(), command = %action.command_line(), "repair (dry run): would run");
                RepairResult::DryRun
            } else {
                self.apply_one(&action, now)
            };
            if let RepairResult::Failed(why) = &result {
                stop = Some(format!("an earlier action failed: {why}"));
            }
            if let RepairResult::Skipped(why) = &result {
                tracing::info!(action = %action.describe(), reason = %why, "repair: skipped");
            }
            outcomes.push(ActionOutcome { action, result });
        }
        outcomes
    }

    fn apply_one(&mut self, action: &RepairAction, now: Instant) -> RepairResult {
        let (program, args) = action.program();
        tracing::warn!(
            action = %action.describe(),
            command = %format!("{program} {}", args.join(" ")),
            script = %action.script(),
            findings = %action.reasons.join("; "),
            "repair: applying"
        );
        match apply::execute(action, self.config.limits) {
            Ok(()) => {
                tracing::warn!(action = %action.describe(), result = "applied", "repair: applied");
                if action.is_nudge() {
                    self.nudged.insert((action.backend, action.family), now);
                }
                RepairResult::Applied
            }
            Err(e) => {
                tracing::error!(action = %action.describe(), result = "failed", error = %e, "repair: failed");
                RepairResult::Failed(e.to_string())
            }
        }
    }
}

fn refusal(f: &Finding, reason: String) -> Refusal {
    Refusal {
        finding: crate::heart::repair::plan::describe_finding(f),
        reason,
    }
}

/// The cluster state to repair against, or why no repair may happen this cycle at all.
fn current_state<'a>(input: &CycleInput<'a>) -> Result<&'a DesiredState, String> {
    if !input.api.synced {
        return Err("the API state is not synced".into());
    }
    if !input.api.fresh {
        return Err("the API state is not fresh (the watch is failing or silent)".into());
    }
    let desired = input.desired.ok_or("there is no cluster state")?;
    if desired.uncertain || !desired.problems.is_empty() {
        return Err("the cluster state has objects that could not be read".into());
    }
    Ok(desired)
}

/// How long ago the Service owning the finding's port changed, when that is within
/// `grace`: kube-proxy may still be applying the change.
fn port_changed_within(
    desired: &DesiredState,
    f: &Finding,
    now: jiff::Timestamp,
    grace: Duration,
) -> Option<Duration> {
    let (protocol, port) = (f.protocol?, f.port?);
    desired
        .ports
        .iter()
        .filter(|p| p.protocol == protocol && p.node_port == port)
        .filter_map(|p| p.last_change)
        .filter_map(|changed| {
            Duration::try_from(now.duration_since(changed))
                .ok()
                .or(Some(Duration::ZERO))
        })
        .find(|ago| *ago < grace)
}

/// The scan must have read the finding's backend in full.
fn source_not_ok(report: &ScanReport, f: &Finding) -> Option<String> {
    let source = report
        .sources
        .iter()
        .find(|s| s.backend == f.backend && s.family == f.family && s.backend.is_some());
    match source {
        Some(s) if s.status == InputState::Ok => None,
        Some(s) => Some(format!("the scan's read of {} was {}", s.source, s.status)),
        None => Some("the scan has no record of reading that backend".into()),
    }
}

/// kube-proxy answered `/healthz` with 200: it has synced recently, so it is alive and
/// will resync when nudged.
fn kube_proxy_live(h: &KubeProxyHealth) -> bool {
    h.healthy
}

/// Reads every backend the findings name, afresh.
fn read_rulesets(
    backends: &BTreeSet<(Backend, Family)>,
    limits: ToolLimits,
) -> (RepairRulesets, BTreeMap<(Backend, Family), String>) {
    let mut rulesets = RepairRulesets::default();
    let mut unreadable = BTreeMap::new();
    for &(backend, family) in backends {
        match backend {
            Backend::Nftables => match apply::read_nftables(family, limits) {
                Ok(Some(t)) => {
                    rulesets.nftables.insert(family, t);
                }
                Ok(None) => {
                    unreadable.insert((backend, family), "the kube-proxy table is gone".to_string());
                }
                Err(e) => {
                    unreadable.insert((backend, family), e.to_string());
                }
            },
            _ => match apply::read_iptables(backend, family, limits) {
                Ok(rs) => {
                    rulesets.iptables.insert((backend, family), rs);
                }
                Err(e) => {
                    unreadable.insert((backend, family), e.to_string());
                }
            },
        }
    }
    (rulesets, unreadable)
}

#[cfg(test)]
mod tests;
