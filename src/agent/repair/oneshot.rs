//! `portdrift scan --repair`: one repair pass on this node.
//!
//! A finding must be seen twice before it is acted on: the pass scans, waits
//! `--repair-confirm`, scans again, and repairs only what both scans found (and what is
//! outside the grace window). When it nudged a live kube-proxy, it waits
//! `--repair-nudge-wait`, scans again, and removes directly only what survived. After
//! any change it scans a last time, and prints that report: the node as repair left it.

use std::io::Write;
use std::time::Instant;

use crate::cli::{Format, ScanArgs, detect_config, read_live};
use crate::heart::outcome::{ScanReport, run_scan};
use crate::heart::render::render_text;

use crate::agent::repair::{ApiState, CycleInput, CycleOutcome, RepairConfig, RepairResult, Repairer};

/// One scan, with what repair needs from it besides the report.
struct Scanned {
    report: ScanReport,
    desired: Option<crate::heart::desired::DesiredState>,
    kube_proxy: Option<crate::heart::observed::KubeProxyHealth>,
    api: ApiState,
}

fn scan_once(args: &ScanArgs) -> anyhow::Result<Scanned> {
    let (input, listed) = read_live(args)?;
    // A file is as current as whoever wrote it: only trusted when the caller says so.
    let current = listed && (args.cluster_state.is_none() || args.repair.trust_cluster_state);
    let desired = input.desired.clone();
    let kube_proxy = input.observed.kube_proxy_health.clone();
    let report = run_scan(input, &detect_config(args));
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

/// Runs the pass and prints the report and what repair did. Exit status as `scan`.
pub fn scan_and_repair(args: &ScanArgs) -> anyhow::Result<u8> {
    let r = &args.repair;
    let mut repairer = Repairer::new(RepairConfig {
        max_actions: r.repair_max,
        min_scans: 2,
        min_age: r.repair_confirm,
        nudge_wait: r.repair_nudge_wait,
        grace: args.grace,
        dry_run: r.dry_run,
        limits: args.live.config(None).limits,
    });
    let first = scan_once(args)?;
    repairer.observe(&first.report, Instant::now());
    std::thread::sleep(r.repair_confirm);
    let mut last = scan_once(args)?;
    let mut outcomes = vec![cycle(&mut repairer, &last)];
    if outcomes[0].nudged() {
        std::thread::sleep(r.repair_nudge_wait);
        last = scan_once(args)?;
        outcomes.push(cycle(&mut repairer, &last));
    }
    if outcomes.iter().any(|o| o.applied() > 0) {
        last = scan_once(args)?;
    }
    let mut stdout = std::io::stdout().lock();
    match args.format {
        Format::Text => {
            stdout.write_all(render_text(&last.report).as_bytes())?;
            stdout.write_all(render_outcomes(&outcomes, r.dry_run).as_bytes())?;
        }
        Format::Json => {
            let mut json = serde_json::to_value(&last.report)?;
            json["repair"] = outcomes_json(&outcomes, r.dry_run);
            serde_json::to_writer_pretty(&mut stdout, &json)?;
            stdout.write_all(b"\n")?;
        }
    }
    stdout.flush()?;
    let failed = outcomes.iter().any(CycleOutcome::failed);
    Ok(if failed { 1 } else { last.report.exit_code() })
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
