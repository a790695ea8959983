//! One scan: the result the CLI prints and the agent serves.

use serde::Serialize;

use crate::heart::coverage::{self, Coverage, CoverageInput};
use crate::heart::desired::DesiredState;
use crate::heart::detect::{DetectConfig, examine};
use crate::heart::finding::{Finding, Severity};
use crate::heart::observed::{KubeProxyAnswered, KubeProxyHealth, Observed};
pub use crate::heart::source_status::{SourceState, SourceStatus};

/// The source name of a cluster state read from the API server (a live scan, the agent).
pub const API_SOURCE: &str = "cluster (API server)";

/// The source name of the acceptances file (`--accept`).
pub const ACCEPTANCES_SOURCE: &str = "acceptances";

/// Counts of findings by severity; accepted ones are counted apart, in none of these.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub critical: usize,
    pub warning: usize,
    pub info: usize,
    pub accepted: usize,
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
    /// Which of kube-proxy's endpoints answered, for the agent's metrics. Not in the
    /// JSON either: the sources' states say it.
    #[serde(skip)]
    pub kube_proxy_answered: KubeProxyAnswered,
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
    let mut findings = detection.findings;
    let mut sources = input.sources;
    if let Some((accepted, now)) = &config.acceptances {
        let expired = accepted.apply(&mut findings, *now);
        // Said where the file is listed, so an exception that lapsed is noticed.
        if let Some(status) = sources.iter_mut().find(|s| s.source == ACCEPTANCES_SOURCE) {
            status.notes.extend(expired);
        }
    }
    let rules = std::mem::take(&mut input.observed.sources);
    let mut summary = Summary::default();
    for f in &findings {
        if f.accepted.is_some() {
            summary.accepted += 1;
            continue;
        }
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
        sources,
        coverage,
        kube_proxy: input.observed.kube_proxy_health,
        kube_proxy_answered: input.observed.kube_proxy_answered,
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
