//! The gates of a repair cycle. Each case here stops before any kernel read: they are
//! the reasons repair does not act.

use super::*;
use crate::heart::finding::Severity;
use crate::heart::input::Input;
use crate::heart::model::Protocol;
use crate::heart::outcome::{InputStatus, Summary};

fn stale_rule() -> Finding {
    let mut f = Finding::new(Kind::StaleNodeport, Severity::Warning, "stale");
    f.backend = Some(Backend::IptablesNft);
    f.family = Some(Family::Ipv4);
    f.protocol = Some(Protocol::Tcp);
    f.port = Some(30090);
    f.rule =
        Some("-A KUBE-NODEPORTS -p tcp -m tcp --dport 30090 -j DNAT --to-destination 10.0.0.9:80".into());
    f
}

fn report(findings: Vec<Finding>, status: InputState) -> ScanReport {
    let mut source = InputStatus::new(Input::IPTABLES[0], status);
    source.backend = Some(Backend::IptablesNft);
    source.family = Some(Family::Ipv4);
    ScanReport {
        node: Some("worker-1".into()),
        summary: Summary::default(),
        findings,
        sources: vec![source],
        coverage: crate::heart::coverage::Coverage::full(crate::heart::model::ProxyMode::Iptables),
        kube_proxy: None,
        kube_proxy_answered: Default::default(),
        acceptance_use: Vec::new(),
    }
}

const CURRENT: ApiState = ApiState {
    synced: true,
    fresh: true,
};

fn config() -> RepairConfig {
    RepairConfig {
        min_age: Duration::from_secs(10),
        ..RepairConfig::default()
    }
}

#[test]
fn an_unsynced_or_stale_api_view_blocks_the_whole_cycle() {
    let desired = DesiredState::default();
    let r = report(vec![stale_rule()], InputState::Ok);
    let mut repairer = Repairer::new(config());
    let t0 = Instant::now();
    repairer.observe(&r, t0);
    for api in [
        ApiState {
            synced: false,
            fresh: false,
        },
        ApiState {
            synced: true,
            fresh: false,
        },
    ] {
        let input = CycleInput {
            report: &r,
            desired: Some(&desired),
            api,
            kube_proxy: None,
        };
        let out = repairer.cycle(&input, t0 + Duration::from_secs(60));
        assert!(out.blocked.is_some(), "{out:?}");
        assert!(out.actions.is_empty());
    }
    let input = CycleInput {
        report: &r,
        desired: None,
        api: CURRENT,
        kube_proxy: None,
    };
    assert!(repairer.cycle(&input, t0).blocked.is_some());
    let uncertain = DesiredState {
        uncertain: true,
        ..Default::default()
    };
    let input = CycleInput {
        desired: Some(&uncertain),
        ..input
    };
    assert!(repairer.cycle(&input, t0).blocked.is_some());
}

#[test]
fn a_finding_must_persist_across_two_scans_and_the_minimum_age() {
    let desired = DesiredState::default();
    let r = report(vec![stale_rule()], InputState::Ok);
    let mut repairer = Repairer::new(config());
    let t0 = Instant::now();
    let input = CycleInput {
        report: &r,
        desired: Some(&desired),
        api: CURRENT,
        kube_proxy: None,
    };
    // First sighting.
    let out = repairer.cycle(&input, t0);
    assert!(out.actions.is_empty());
    assert!(
        out.refused[0].reason.contains("not confirmed yet"),
        "{:?}",
        out.refused
    );
    // Second scan, but too soon.
    let out = repairer.cycle(&input, t0 + Duration::from_secs(5));
    assert!(out.refused[0].reason.contains("not confirmed yet"));
    // A scan without it starts the clock over.
    repairer.observe(&report(vec![], InputState::Ok), t0 + Duration::from_secs(20));
    let out = repairer.cycle(&input, t0 + Duration::from_secs(30));
    assert!(
        out.refused[0].reason.contains("seen in 1 scan"),
        "{:?}",
        out.refused
    );
}

#[test]
fn a_finding_is_remembered_by_its_rule_text_not_its_line() {
    let mut repairer = Repairer::new(config());
    let t0 = Instant::now();
    let scans = |r: &Repairer, f: &Finding| r.history.get(&RepairKey::of(f)).map(|s| s.scans);
    let first = stale_rule();
    repairer.observe(&report(vec![first.clone()], InputState::Ok), t0);
    let mut moved = first.clone();
    (moved.rule_source, moved.message) = (
        Some(crate::heart::citation::Citation::line(
            "iptables-nft-save.txt",
            40,
        )),
        "said again".into(),
    );
    repairer.observe(
        &report(vec![moved.clone()], InputState::Ok),
        t0 + Duration::from_secs(1),
    );
    assert_eq!(scans(&repairer, &moved), Some(2));
    let mut rewritten = moved;
    rewritten.rule = Some("-A KUBE-NODEPORTS -p tcp -m tcp --dport 30090 -j KUBE-EXT-X".into());
    repairer.observe(
        &report(vec![rewritten.clone()], InputState::Ok),
        t0 + Duration::from_secs(2),
    );
    assert_eq!(scans(&repairer, &rewritten), Some(1));
    let (mut none, mut empty) = (first.clone(), first);
    (none.rule, empty.rule) = (None, Some(String::new()));
    assert!(RepairKey::of(&none) == RepairKey::of(&empty));
}

#[test]
fn pending_findings_and_partial_reads_are_left_alone() {
    let desired = DesiredState::default();
    let mut pending = stale_rule();
    pending.pending_seconds = Some(12);
    let mut repairer = Repairer::new(config());
    let t0 = Instant::now();
    let r = report(vec![pending], InputState::Ok);
    let input = CycleInput {
        report: &r,
        desired: Some(&desired),
        api: CURRENT,
        kube_proxy: None,
    };
    repairer.observe(&r, t0);
    let out = repairer.cycle(&input, t0 + Duration::from_secs(60));
    assert!(
        out.refused[0].reason.contains("grace window"),
        "{:?}",
        out.refused
    );

    let r = report(vec![stale_rule()], InputState::Partial);
    let input = CycleInput { report: &r, ..input };
    repairer.observe(&r, t0);
    let out = repairer.cycle(&input, t0 + Duration::from_secs(60));
    assert!(out.refused[0].reason.contains("partial"), "{:?}", out.refused);
    assert!(out.actions.is_empty());
}

#[test]
fn dry_runs_count_as_skipped_and_results_name_their_metric() {
    assert_eq!(RepairResult::Applied.metric_result(), "applied");
    assert_eq!(RepairResult::DryRun.metric_result(), "skipped");
    assert_eq!(RepairResult::Skipped("cap".into()).metric_result(), "skipped");
    assert_eq!(RepairResult::Failed("x".into()).metric_result(), "failed");
    for r in ["applied", "skipped", "failed"] {
        assert!(crate::agent::metrics::REPAIR_RESULTS.contains(&r));
    }
}
