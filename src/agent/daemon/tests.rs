use std::time::{Duration, Instant};

use super::scan_loop::{MAX_DEFER, MIN_GAP, PendingChange, RULE_SETTLE, SETTLE};

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
    let mut pending = PendingChange::default();
    pending.note(t0, RULE_SETTLE);
    let last_scan_end = t0;
    assert_eq!(pending.due(Some(last_scan_end)), Some(t0 + MIN_GAP));
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
