//! `portdrift scan --repair`: one repair pass on this node.
//!
//! A finding must be seen twice before it is acted on: the pass scans, waits
//! `--repair-confirm`, scans again, and repairs only what both scans found (and what is
//! outside the grace window). When it nudged a live kube-proxy, it waits
//! `--repair-nudge-wait`, scans again, and removes directly only what survived. After
//! any change it scans a last time, and prints that report: the node as repair left it.

use std::time::Instant;

use crate::heart::outcome::{ScanReport, run_scan};
use crate::heart::render::render_text;
use crate::scan::oneshot::{OneshotConfig, OneshotError, detect_config, read_live};

use crate::agent::repair::{ApiState, CycleInput, CycleOutcome, RepairConfig, RepairResult, Repairer};

/// What one repair pass scans, and how it repairs.
#[derive(Debug, Clone)]
pub struct RepairPassConfig {
    /// The scans' settings (always of this node).
    pub scan: OneshotConfig,
    /// The repair's settings: `min_age` is the time between the two scans a finding
    /// must appear in (`--repair-confirm`).
    pub repair: RepairConfig,
    /// A cluster state file is current: repair may act on it.
    pub trust_cluster_state: bool,
}

/// What a repair pass left: the last scan's report and what each repair cycle did.
#[derive(Debug)]
pub struct RepairPass {
    /// The node as repair left it.
    pub report: ScanReport,
    pub outcomes: Vec<CycleOutcome>,
    pub dry_run: bool,
}

impl RepairPass {
    /// Exit status as `scan`'s, and 1 when a repair action failed.
    pub fn exit_code(&self) -> u8 {
        if self.outcomes.iter().any(CycleOutcome::failed) {
            1
        } else {
            self.report.exit_code()
        }
    }

    /// The report for a terminal, with the repair section after it.
    pub fn render_text(&self) -> String {
        let mut text = render_text(&self.report);
        text.push_str(&render_outcomes(&self.outcomes, self.dry_run));
        text
    }

    /// What repair did, for a terminal (the section after the report).
    pub fn render_actions(&self) -> String {
        render_outcomes(&self.outcomes, self.dry_run)
    }

    /// The JSON report, with what repair did as its `repair` field.
    pub fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        let mut json = serde_json::to_value(&self.report)?;
        json["repair"] = outcomes_json(&self.outcomes, self.dry_run);
        Ok(json)
    }
}

/// One scan, with what repair needs from it besides the report.
struct Scanned {
    report: ScanReport,
    desired: Option<crate::heart::desired::DesiredState>,
    kube_proxy: Option<crate::heart::observed::KubeProxyHealth>,
    api: ApiState,
}

fn scan_once(config: &RepairPassConfig) -> Result<Scanned, OneshotError> {
    let live = read_live(&config.scan)?;
    // A file is as current as whoever wrote it: only trusted when the caller says so.
    let current = live.cluster_listed && (config.scan.cluster_state.is_none() || config.trust_cluster_state);
    let desired = live.input.desired.clone();
    let kube_proxy = live.input.observed.kube_proxy_health.clone();
    let report = run_scan(live.input, &detect_config(&config.scan));
    Ok(Scanned {
        report,
        desired,
        kube_proxy,
        api: ApiState {
            synced: current,
            fresh: current,
        },
    })
}

fn cycle(repairer: &mut Repairer, scanned: &Scanned) -> CycleOutcome {
    repairer.cycle(
        &CycleInput {
            report: &scanned.report,
            desired: scanned.desired.as_ref(),
            api: scanned.api,
            kube_proxy: scanned.kube_proxy.as_ref(),
        },
        Instant::now(),
    )
}

/// Runs the pass: scan, wait, scan again, repair what both scans found, and scan
/// the node as repair left it.
pub fn scan_and_repair(config: &RepairPassConfig) -> Result<RepairPass, OneshotError> {
    let mut repairer = Repairer::new(config.repair.clone());
    let first = scan_once(config)?;
    repairer.observe(&first.report, Instant::now());
    std::thread::sleep(config.repair.min_age);
    let mut last = scan_once(config)?;
    let mut outcomes = vec![cycle(&mut repairer, &last)];
    if outcomes[0].nudged() {
        std::thread::sleep(config.repair.nudge_wait);
        last = scan_once(config)?;
        outcomes.push(cycle(&mut repairer, &last));
    }
    if outcomes.iter().any(|o| o.applied() > 0) {
        last = scan_once(config)?;
    }
    Ok(RepairPass {
        report: last.report,
        outcomes,
        dry_run: config.repair.dry_run,
    })
}

/// The repair section of the text report.
pub fn render_outcomes(outcomes: &[CycleOutcome], dry_run: bool) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nrepair{}:",
        if dry_run {
            " (dry run: nothing changed)"
        } else {
            ""
        }
    );
    let mut any = false;
    for o in outcomes {
        if let Some(why) = &o.blocked {
            let _ = writeln!(s, "  refused: {why}");
            any = true;
        }
        for a in &o.actions {
            any = true;
            let result = match &a.result {
                RepairResult::Applied => "applied".to_string(),
                RepairResult::DryRun => "would run".to_string(),
                RepairResult::Skipped(why) => format!("skipped ({why})"),
                RepairResult::Failed(why) => format!("FAILED ({why})"),
            };
            let _ = writeln!(s, "  {result}: {}", a.action.describe());
            let _ = writeln!(s, "    for: {}", a.action.reasons.join("; "));
            if a.result == RepairResult::DryRun {
                for line in a.action.command_line().lines() {
                    let _ = writeln!(s, "    {line}");
                }
            }
        }
        for r in &o.refused {
            any = true;
            let _ = writeln!(s, "  left alone: {}: {}", r.finding, r.reason);
        }
    }
    if !any {
        s.push_str("  nothing to repair\n");
    }
    s
}

/// The `repair` field of `scan --repair --format json`.
pub fn outcomes_json(outcomes: &[CycleOutcome], dry_run: bool) -> serde_json::Value {
    let cycles: Vec<serde_json::Value> = outcomes
        .iter()
        .map(|o| {
            let actions: Vec<serde_json::Value> = o
                .actions
                .iter()
                .map(|a| {
                    let (result, reason) = match &a.result {
                        RepairResult::Applied => ("applied", None),
                        RepairResult::DryRun => ("dry-run", None),
                        RepairResult::Skipped(w) => ("skipped", Some(w.as_str())),
                        RepairResult::Failed(w) => ("failed", Some(w.as_str())),
                    };
                    let (program, args) = a.action.program();
                    serde_json::json!({
                        "action": a.action.describe(),
                        "backend": a.action.backend,
                        "family": a.action.family,
                        "program": program,
                        "args": args,
                        "script": a.action.script(),
                        "findings": a.action.reasons,
                        "result": result,
                        "reason": reason,
                    })
                })
                .collect();
            let refused: Vec<serde_json::Value> = o
                .refused
                .iter()
                .map(|r| serde_json::json!({"finding": r.finding, "reason": r.reason}))
                .collect();
            serde_json::json!({"blocked": o.blocked, "actions": actions, "left_alone": refused})
        })
        .collect();
    serde_json::json!({"dry_run": dry_run, "cycles": cycles})
}
