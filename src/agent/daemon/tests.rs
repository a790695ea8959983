use std::time::{Duration, Instant};

use super::scan::ScanError;
use super::scan_loop::{
    COST_RATIO, Change, LastScan, MAX_DEFER, MIN_GAP, PendingChange, RULE_SETTLE, SETTLE, Scheduler, Trigger,
};
use crate::agent::metrics::SCAN_ERROR_SOURCES;

#[test]
fn a_burst_of_changes_makes_one_scan_after_it_settles() {
    let t0 = Instant::now();
    let mut pending = PendingChange::default();
    assert_eq!(pending.due(None), None, "no change, no change-driven scan");
    pending.note(t0, SETTLE);
    pending.note(t0 + Duration::from_millis(500), SETTLE);
    assert_eq!(pending.due(None), Some(t0 + Duration::from_millis(500) + SETTLE));
    // A rule change after an API change does not cut the API change's quiet time.
    pending.note(t0 + Duration::from_millis(600), RULE_SETTLE);
    assert_eq!(pending.due(None), Some(t0 + Duration::from_millis(500) + SETTLE));
}

#[test]
fn a_rule_change_is_scanned_for_within_a_second() {
    let t0 = Instant::now();
    let mut pending = PendingChange::default();
    pending.note(t0, RULE_SETTLE);
    let due = pending.due(None).unwrap();
    assert!(due - t0 < Duration::from_secs(1), "{:?}", due - t0);
}

#[test]
fn a_change_stream_that_never_settles_still_gets_a_scan() {
    let t0 = Instant::now();
    let mut pending = PendingChange::default();
    for i in 0..100 {
        pending.note(t0 + Duration::from_millis(500 * i), SETTLE);
    }
    assert_eq!(pending.due(None), Some(t0 + MAX_DEFER));
}

#[test]
fn change_driven_scans_keep_a_minimum_gap() {
    let t0 = Instant::now();
    let interval = Duration::from_secs(30);
    // Whatever triggered the changes (API or kernel) and however often they come.
    for settle in [SETTLE, RULE_SETTLE] {
        let mut pending = PendingChange::default();
        for i in 0..20 {
            pending.note(t0 + Duration::from_millis(100 * i), settle);
        }
        let last = LastScan::new(t0, Duration::from_millis(50), interval);
        assert_eq!(pending.due(Some(last)), Some(t0 + MIN_GAP));
    }
}

#[test]
fn the_gap_grows_with_what_a_scan_costs_up_to_the_interval_and_shrinks_again() {
    let t0 = Instant::now();
    let interval = Duration::from_secs(30);
    let gap = |took: Duration| LastScan::new(t0, took, interval).gap;
    assert_eq!(gap(Duration::from_millis(100)), MIN_GAP);
    assert_eq!(
        gap(Duration::from_millis(500)),
        Duration::from_millis(500) * COST_RATIO
    );
    assert_eq!(gap(Duration::from_secs(3)), interval);
    assert_eq!(
        gap(Duration::from_millis(100)),
        MIN_GAP,
        "a cheap scan brings the gap back"
    );
    // An interval shorter than the minimum gap does not shrink it.
    assert_eq!(
        LastScan::new(t0, Duration::from_secs(1), Duration::from_secs(2)).gap,
        MIN_GAP
    );
    let mut pending = PendingChange::default();
    pending.note(t0, RULE_SETTLE);
    let costly = LastScan::new(t0, Duration::from_millis(700), interval);
    assert_eq!(
        pending.due(Some(costly)),
        Some(t0 + Duration::from_millis(700) * COST_RATIO)
    );
}

#[test]
fn the_startup_delay_is_drawn_within_the_jitter_and_spread_over_it() {
    assert_eq!(super::startup_delay(Duration::ZERO), Duration::ZERO);
    let jitter = Duration::from_secs(30);
    let draws: Vec<Duration> = (0..1000).map(|_| super::startup_delay(jitter)).collect();
    assert!(draws.iter().all(|d| *d < jitter), "{draws:?}");
    // Uniform over the range: a thousand draws reach both ends' quarters (a failure
    // here has odds of 2 × 0.75^1000).
    let (min, max) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
    assert!(*min < jitter / 4 && *max > jitter * 3 / 4, "{min:?} .. {max:?}");
}

#[test]
fn the_scheduler_scans_at_once_and_then_every_interval() {
    let t0 = Instant::now();
    let interval = Duration::from_secs(30);
    let mut scheduler = Scheduler::new(interval, t0);
    assert_eq!(scheduler.due(), (t0, Trigger::Interval));
    scheduler.scan_begins();
    let end = t0 + Duration::from_secs(1);
    scheduler.after_scan(end, Duration::from_millis(10));
    assert_eq!(scheduler.due(), (end + interval, Trigger::Interval));
}

#[test]
fn the_scheduler_scans_for_a_change_after_its_quiet_time_and_the_gap() {
    let t0 = Instant::now();
    let interval = Duration::from_secs(30);
    let mut scheduler = Scheduler::new(interval, t0);
    scheduler.scan_begins();
    scheduler.after_scan(t0, Duration::from_millis(10));
    // Right after a scan the gap holds a rule change back.
    scheduler.on_rule_change(t0 + Duration::from_millis(100));
    assert_eq!(scheduler.due(), (t0 + MIN_GAP, Trigger::Change));
    // Once the scan begins, the changes are in it.
    scheduler.scan_begins();
    let end = t0 + MIN_GAP + Duration::from_secs(1);
    scheduler.after_scan(end, Duration::from_millis(10));
    assert_eq!(scheduler.due(), (end + interval, Trigger::Interval));
    // Past the gap, only the change's own quiet time; an API change's is longer.
    let later = end + Duration::from_secs(20);
    scheduler.on_change(Change::Api, later);
    assert_eq!(scheduler.due(), (later + SETTLE, Trigger::Change));
}

#[test]
fn a_change_due_after_the_interval_waits_for_the_interval_scan() {
    let t0 = Instant::now();
    let interval = Duration::from_secs(3);
    let mut scheduler = Scheduler::new(interval, t0);
    scheduler.after_scan(t0, Duration::from_millis(10));
    scheduler.on_acceptances_change(t0 + Duration::from_secs(2));
    // The gap (MIN_GAP, above the interval) puts the change after the next tick.
    assert_eq!(scheduler.due(), (t0 + interval, Trigger::Interval));
}

#[test]
fn the_scheduler_looks_again_soon_while_the_api_has_not_synced() {
    let t0 = Instant::now();
    let mut scheduler = Scheduler::new(Duration::from_secs(30), t0);
    scheduler.not_synced(t0);
    let (due, trigger) = scheduler.due();
    assert_eq!(trigger, Trigger::Interval);
    assert!(due > t0 && due - t0 < Duration::from_secs(1), "{:?}", due - t0);
}

#[test]
fn scan_errors_are_counted_under_the_sources_registered_for_them() {
    let errors = [
        ScanError::Desired("no cluster state".into()),
        ScanError::ReadNode(crate::scan::bundle_error::SnapshotError::NotFound("/x".into())),
    ];
    for error in &errors {
        assert!(SCAN_ERROR_SOURCES.contains(&error.metric_label()), "{error}");
    }
    assert_eq!(errors[0].to_string(), "no cluster state");
    assert_eq!(errors.map(|e| e.metric_label()), ["cluster", "node"]);
}
