use super::*;
use crate::heart::finding::Kind;

const SERIES: Duration = Duration::from_secs(1800);
const WINDOW: Duration = Duration::from_secs(360);
const ROOM: usize = usize::MAX;

fn finding(kind: Kind, severity: Severity, port: u16, service: Option<&str>) -> Finding {
    let mut f = Finding::new(kind, severity, format!("{kind} on {port}"));
    f.port = Some(port);
    f.service = service.map(str::to_string);
    f
}

fn gate(burst: u32, every: Duration, now: Instant) -> EventGate {
    EventGate::new(TokenBucket::new(burst, every, now), SERIES, WINDOW)
}

fn wall(seconds: u64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds as i64).unwrap()
}

fn creates(a: &Admitted) -> Vec<&EventDraft> {
    a.ops
        .iter()
        .filter_map(|op| match op {
            EventOp::Create { draft, .. } => Some(draft),
            _ => None,
        })
        .collect()
}

/// `(id, count, last observed)` of the series writes.
fn series(a: &Admitted) -> Vec<(u64, u32, Timestamp)> {
    a.ops
        .iter()
        .filter_map(|op| match op {
            EventOp::Series {
                id,
                count,
                last_observed,
                ..
            } => Some((*id, *count, *last_observed)),
            _ => None,
        })
        .collect()
}

fn many(n: u16) -> Vec<Finding> {
    (0..n)
        .map(|i| finding(Kind::StaleNodeport, Severity::Warning, 30000 + i, None))
        .collect()
}

#[test]
fn a_persisting_finding_makes_one_event_and_one_that_returns_soon_the_same_one() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let mut g = gate(25, Duration::from_secs(10), t0);
    let f = finding(Kind::StaleEndpoint, Severity::Critical, 30080, Some("shop/web"));
    let first = g.admit(std::slice::from_ref(&f), ROOM, t0, wall(0));
    assert_eq!(creates(&first).len(), 1);
    assert_eq!(creates(&first)[0].reason, "StaleEndpointRule");
    assert!(
        g.admit(std::slice::from_ref(&f), ROOM, at(30), wall(30))
            .ops
            .is_empty()
    );
    // Reworded, it is still the same finding.
    let mut reworded = f.clone();
    reworded.message.push_str(" (again)");
    assert!(g.admit(&[reworded], ROOM, at(60), wall(60)).ops.is_empty());
    // Gone for less than the window, then back: the same Event's series.
    assert!(g.admit(&[], ROOM, at(90), wall(90)).ops.is_empty());
    assert!(
        g.admit(std::slice::from_ref(&f), ROOM, at(120), wall(120))
            .ops
            .is_empty()
    );
    // Gone for the window: the series ends with its count written (4 scans found it).
    let ended = g.admit(&[], ROOM, at(480), wall(480));
    assert_eq!(series(&ended), [(0, 4, wall(120))]);
    // Back after that: a new Event.
    let back = g.admit(&[f], ROOM, at(500), wall(500));
    assert_eq!(creates(&back).len(), 1);
}

#[test]
fn a_persisting_series_is_written_at_most_every_period() {
    let t0 = Instant::now();
    let mut g = gate(25, Duration::from_secs(10), t0);
    let f = [finding(Kind::MissingRule, Severity::Critical, 30080, None)];
    assert_eq!(creates(&g.admit(&f, ROOM, t0, wall(0))).len(), 1);
    let mut written = Vec::new();
    // A scan every 30 s for 65 minutes.
    for s in (30..=3900).step_by(30) {
        let a = g.admit(&f, ROOM, t0 + Duration::from_secs(s), wall(s));
        assert!(creates(&a).is_empty());
        written.extend(series(&a).into_iter().map(|(_, count, last)| (s, count, last)));
    }
    assert_eq!(
        written,
        [(1800, 61, wall(1800)), (3600, 121, wall(3600))],
        "the count is the scans that found it"
    );
}

#[test]
fn a_pending_finding_gets_its_event_when_its_grace_ends() {
    let t0 = Instant::now();
    let mut g = gate(25, Duration::from_secs(10), t0);
    let mut f = finding(Kind::MissingRule, Severity::Info, 30081, Some("shop/api"));
    f.pending_seconds = Some(20);
    assert!(
        g.admit(std::slice::from_ref(&f), ROOM, t0, wall(0))
            .ops
            .is_empty()
    );
    f.pending_seconds = None;
    f.severity = Severity::Critical;
    assert_eq!(creates(&g.admit(&[f], ROOM, t0, wall(0))).len(), 1);
}

#[test]
fn over_the_budget_findings_wait_most_severe_then_oldest_first() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let mut g = gate(3, Duration::from_secs(10), t0);
    let mut all = many(5);
    let a = g.admit(&all, ROOM, t0, wall(0));
    assert_eq!((creates(&a).len(), a.deferred, a.pending), (3, 2, 2));
    assert_eq!(a.run_began, Some(2));
    // They persist: no Event, no new deferral, the run goes on (no new log).
    let b = g.admit(&all, ROOM, at(1), wall(1));
    assert_eq!(
        (b.ops.len(), b.deferred, b.run_began, b.run_ended),
        (0, 0, None, None)
    );
    // A critical one arrives: it goes before the older warnings.
    all.push(finding(
        Kind::StaleEndpoint,
        Severity::Critical,
        30100,
        Some("shop/web"),
    ));
    let c = g.admit(&all, ROOM, at(2), wall(2));
    assert_eq!((c.ops.len(), c.deferred, c.pending), (0, 1, 3));
    let d = g.admit(&all, ROOM, at(12), wall(12));
    assert_eq!(
        creates(&d).iter().map(|e| e.reason).collect::<Vec<_>>(),
        ["StaleEndpointRule"]
    );
    // Then the oldest warning (port 30003, deferred first), then the next.
    let e = g.admit(&all, ROOM, at(22), wall(22));
    assert!(
        creates(&e)[0]
            .note
            .starts_with("stale-nodeport on 30003 [finding ")
    );
    // One that clears while it waits is no longer owed an Event; the run ends when
    // none wait, with how many it deferred.
    all.retain(|f| f.port != Some(30004));
    let f = g.admit(&all, ROOM, at(23), wall(23));
    assert_eq!((f.ops.len(), f.pending, f.run_ended), (0, 0, Some(3)));
}

#[test]
fn the_queues_room_bounds_the_writes_and_the_rest_waits() {
    let t0 = Instant::now();
    let mut g = gate(25, Duration::from_secs(10), t0);
    let all = many(10);
    let a = g.admit(&all, 4, t0, wall(0));
    assert_eq!((a.ops.len(), a.deferred, a.pending), (4, 6, 6));
    // The tokens were not spent on what did not fit.
    let b = g.admit(&all, ROOM, t0, wall(0));
    assert_eq!((b.ops.len(), b.pending, b.run_ended), (6, 0, Some(6)));
}

#[test]
fn series_writes_share_the_bucket_after_creates() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let mut g = gate(2, Duration::from_secs(600), t0);
    let old = many(2);
    assert_eq!(g.admit(&old, ROOM, t0, wall(0)).ops.len(), 2);
    // 30 minutes on, three tokens have come back (capped at two): a new finding's
    // Event first, then one of the two series due; the other waits.
    let mut now = old.clone();
    now.push(finding(Kind::Squatter, Severity::Warning, 31000, None));
    let a = g.admit(&now, ROOM, at(1800), wall(1800));
    assert_eq!((creates(&a).len(), series(&a).len()), (1, 1));
    let b = g.admit(&now, ROOM, at(2400), wall(2400));
    assert_eq!(series(&b).len(), 1);
    assert_ne!(series(&a)[0].0, series(&b)[0].0);
}

#[test]
fn the_bucket_refills_one_token_per_period_up_to_its_capacity() {
    let t0 = Instant::now();
    let mut b = TokenBucket::new(2, Duration::from_secs(10), t0);
    assert!(b.try_take(t0) && b.try_take(t0) && !b.try_take(t0));
    assert!(!b.try_take(t0 + Duration::from_secs(9)));
    assert!(b.try_take(t0 + Duration::from_secs(10)));
    assert!(!b.try_take(t0 + Duration::from_secs(15)));
    // A long quiet time fills it to capacity, not beyond.
    let later = t0 + Duration::from_secs(1000);
    assert!(b.try_take(later) && b.try_take(later) && !b.try_take(later));
}
