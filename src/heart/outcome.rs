//! One scan: the result the CLI prints and the agent serves.

use serde::{Deserialize, Serialize};

use crate::heart::coverage::{self, Coverage, CoverageInput};
use crate::heart::desired::DesiredState;
use crate::heart::detect::{DetectConfig, examine};
use crate::heart::finding::{Finding, Severity};
use crate::heart::model::{Backend, Family};
use crate::heart::observed::{KubeProxyHealth, Observed};

/// The source name of a cluster state read from the API server (a live scan, the agent).
pub const API_SOURCE: &str = "cluster (API server)";

/// How reading one source went. "Absent", "empty" and "error" are different answers:
/// a node without iptables-legacy is fine, a failed read is not. A source in any state
/// but `ok`/`partial`/`empty` says nothing about what the node holds, and a failed,
/// timed-out or too large dump that was still read is never trusted for "missing"
/// decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceState {
    /// Read and understood.
    Ok,
    /// Read, but some of it could not be understood or it looks truncated: findings
    /// that need proof of absence are not drawn from it.
    Partial,
    /// Not present (no file in the bundle, tool not installed).
    Absent,
    /// Read fine, and it holds nothing (a backend without tables).
    Empty,
    /// Present but unreadable.
    Error,
    /// The tool ran and exited with an error (its complaint is in the notes).
    Failed,
    /// The tool did not finish within its time limit and was killed.
    TimedOut,
    /// The tool printed more than the output limit allows; reading stopped there.
    TooLarge,
}

impl SourceState {
    /// The state as the report and the JSON print it.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceState::Ok => "ok",
            SourceState::Partial => "partial",
            SourceState::Absent => "absent",
            SourceState::Empty => "empty",
            SourceState::Error => "error",
            SourceState::Failed => "failed",
            SourceState::TimedOut => "timed-out",
            SourceState::TooLarge => "too-large",
        }
    }

    /// The source could not be read (as opposed to holding nothing, or being absent
    /// on a node that does not use it): what the agent counts as a scan error and a
    /// source that is down.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            SourceState::Error | SourceState::Failed | SourceState::TimedOut | SourceState::TooLarge
        )
    }
}

impl std::fmt::Display for SourceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The status of one input, for the report and `/findings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceStatus {
    /// The file or command (`iptables-nft-save.txt`, `proc/net/tcp`, `cluster.json`).
    pub source: String,
    pub status: SourceState,
    /// Where it was really read from when that is not the bundle file `source` names:
    /// the command or path on a live node (`iptables-nft-save`, `/proc/net/tcp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<Family>,
    /// NodePort rules read (rule sources), listeners (socket files), Service ports
    /// (cluster state).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<usize>,
    /// Lines or objects that could not be understood.
    pub unparsed: usize,
    /// What went wrong or what the source itself said.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl SourceStatus {
    /// Records what a cluster state holds: its Service ports, and the objects that
    /// could not be read (which make the source partial).
    pub fn describe_cluster_state(&mut self, desired: &DesiredState) {
        self.items = Some(desired.ports.len());
        self.unparsed = desired.problems.len();
        if !desired.problems.is_empty() && self.status == SourceState::Ok {
            self.status = SourceState::Partial;
        }
        self.notes = desired
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.object, p.problem))
            .collect();
    }

    pub fn new(source: impl Into<String>, status: SourceState) -> SourceStatus {
        SourceStatus {
            source: source.into(),
            status,
            origin: None,
            backend: None,
            family: None,
            items: None,
            unparsed: 0,
            notes: Vec::new(),
        }
    }
}

/// Counts of findings by severity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub critical: usize,
    pub warning: usize,
    pub info: usize,
}

/// Everything one scan produced: the JSON of `scan --format json` and `GET /findings`.
#[derive(Debug, Clone, Serialize)]
pub struct ScanReport {
    pub node: Option<String>,
    pub summary: Summary,
    pub findings: Vec<Finding>,
    pub sources: Vec<SourceStatus>,
    /// What could be checked, and what not.
    pub coverage: Coverage,
    /// What kube-proxy's `/healthz` said, for the agent's metrics. Not in the JSON:
    /// the `kube-proxy-healthz.json` source's notes already say it for people.
    #[serde(skip)]
    pub kube_proxy: Option<KubeProxyHealth>,
}

/// What one scan reads: desired and observed state plus how reading went.
#[derive(Debug, Default)]
pub struct ScanInput {
    pub node: Option<String>,
    pub desired: Option<DesiredState>,
    pub observed: Observed,
    pub sources: Vec<SourceStatus>,
}

/// Runs the detector over what was read.
pub fn run_scan(input: ScanInput, config: &DetectConfig) -> ScanReport {
    run_scan_keeping_inputs(input, config).0
}

/// [`run_scan`], handing back the rule sources and the desired state it read, for a
/// caller that keeps them for the next scan (the agent's
/// [`crate::scan::input::RuleCache`]) rather than copying or rebuilding them.
pub fn run_scan_keeping_inputs(
    mut input: ScanInput,
    config: &DetectConfig,
) -> (
    ScanReport,
    Vec<crate::heart::model::RuleSource>,
    Option<DesiredState>,
) {
    let detection = examine(input.desired.as_ref(), &input.observed, config);
    let coverage = coverage::assess(&CoverageInput {
        sources: &input.sources,
        observed: &input.observed,
        desired: input.desired.as_ref(),
        proxy: &detection.proxy,
        cluster_state_stale: config.cluster_state_stale,
    });
    let findings = detection.findings;
    let rules = std::mem::take(&mut input.observed.sources);
    let mut summary = Summary::default();
    for f in &findings {
        match f.severity {
            Severity::Critical => summary.critical += 1,
            Severity::Warning => summary.warning += 1,
            Severity::Info => summary.info += 1,
        }
    }
    let report = ScanReport {
        node: input.node,
        summary,
        findings,
        sources: input.sources,
        coverage,
        kube_proxy: input.observed.kube_proxy_health,
    };
    (report, rules, input.desired)
}

impl ScanReport {
    /// `scan`'s exit status: 1 when anything is a warning or worse; else 3 when the
    /// check was incomplete (nothing found is not "nothing wrong"); else 0.
    pub fn exit_code(&self) -> u8 {
        if self.summary.critical + self.summary.warning > 0 {
            1
        } else if !self.coverage.complete {
            3
        } else {
            0
        }
    }
}
