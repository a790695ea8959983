//! One scan: the result the CLI prints and the agent serves.

use serde::Serialize;

use crate::heart::acceptance::{ANNOTATION_ACCEPT, Acceptance, AcceptanceInput};
use crate::heart::coverage::{self, Coverage, CoverageInput};
use crate::heart::desired::DesiredState;
use crate::heart::detect::{DetectConfig, examine};
use crate::heart::finding::{Finding, Severity};
use crate::heart::input::Input;
pub use crate::heart::input_status::{InputState, InputStatus};
use crate::heart::observed::{KubeProxyAnswered, KubeProxyHealth, Observed};
use crate::heart::words::count_of;

/// Counts of findings by severity; accepted ones are counted apart, in none of these.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Summary {
    pub critical: usize,
    pub warning: usize,
    pub info: usize,
    pub accepted: usize,
}

impl Summary {
    fn count(&mut self, f: &Finding) {
        match (&f.accepted, f.severity) {
            (Some(_), _) => self.accepted += 1,
            (None, Severity::Critical) => self.critical += 1,
            (None, Severity::Warning) => self.warning += 1,
            (None, Severity::Info) => self.info += 1,
        }
    }
}

/// Everything one scan produced: the JSON of `scan --format json` and `GET /findings`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ScanReport {
    /// In the JSON, the envelope's `node` ([`crate::heart::document::Document`]).
    #[serde(skip)]
    pub node: Option<String>,
    pub summary: Summary,
    pub findings: Vec<Finding>,
    pub sources: Vec<InputStatus>,
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
    /// Every acceptance applied, with whether it accepted a finding, for the agent's
    /// memory of idle ones. Not in the JSON: the acceptances source's notes say it.
    #[serde(skip)]
    pub acceptance_use: Vec<(Acceptance, bool)>,
}

/// What one scan reads: desired and observed state plus how reading went.
#[derive(Debug, Default)]
pub struct ScanInput {
    pub node: Option<String>,
    pub desired: Option<DesiredState>,
    pub observed: Observed,
    pub sources: Vec<InputStatus>,
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
    Vec<crate::heart::model::RuleDump>,
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
    let acceptance_use = match &config.acceptances {
        Some(accept) => apply_acceptances(accept, input.desired.as_ref(), &mut findings, &mut sources),
        None => Vec::new(),
    };
    let rules = std::mem::take(&mut input.observed.dumps);
    let mut summary = Summary::default();
    for f in &findings {
        summary.count(f);
    }
    let report = ScanReport {
        node: input.node,
        summary,
        findings,
        sources,
        coverage,
        kube_proxy: input.observed.kube_proxy_health,
        kube_proxy_answered: input.observed.kube_proxy_answered,
        acceptance_use,
    };
    (report, rules, input.desired)
}

/// Applies the file's acceptances and the Services' own, in that order (a file entry
/// wins), on this node's labels; says in the acceptances source what lapsed, what
/// could not be applied and what accepted nothing. Returns each acceptance with
/// whether it accepted anything.
fn apply_acceptances(
    accept: &AcceptanceInput,
    desired: Option<&DesiredState>,
    findings: &mut [Finding],
    sources: &mut Vec<InputStatus>,
) -> Vec<(Acceptance, bool)> {
    let mut all = accept.file.clone();
    if let Some(desired) = desired {
        all.accept.extend(desired.accepted_by_services.iter().cloned());
    }
    let labels = desired.and_then(|d| d.node_labels.as_ref());
    let applied = all.apply(findings, accept.now, labels);
    let problems = desired.map_or(&[][..], |d| &d.acceptance_problems[..]);
    if all.accept.is_empty() && problems.is_empty() {
        return Vec::new();
    }
    // Said where the acceptances are listed, so an exception that lapsed or never
    // took is noticed.
    let at = match sources.iter().position(|s| s.source == Input::Acceptances) {
        Some(at) => at,
        None => {
            sources.push(InputStatus::new(Input::Acceptances, InputState::Ok));
            sources.len() - 1
        }
    };
    let status = &mut sources[at];
    let by_services = desired.map_or(0, |d| d.accepted_by_services.len());
    if by_services > 0 {
        status.notes.push(format!(
            "{} stated by Services' {ANNOTATION_ACCEPT} annotations",
            count_of(by_services, "acceptance")
        ));
    }
    status.notes.extend(applied.expired);
    status.notes.extend(applied.notes);
    status
        .notes
        .extend(problems.iter().map(|p| format!("{}: {}", p.object, p.problem)));
    let idle: Vec<String> = all
        .accept
        .iter()
        .zip(&applied.matched)
        .filter(|(a, matched)| !**matched && !a.expired_by(accept.now))
        .map(|(a, _)| a.origin.to_string())
        .collect();
    if !idle.is_empty() {
        status
            .notes
            .push(format!("accepted nothing in this scan: {}", idle.join(", ")));
    }
    all.accept.into_iter().zip(applied.matched).collect()
}

impl ScanReport {
    /// Adds a finding found after the scan (the agent's idle acceptances), counted.
    pub fn push_finding(&mut self, finding: Finding) {
        self.summary.count(&finding);
        self.findings.push(finding);
    }

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
