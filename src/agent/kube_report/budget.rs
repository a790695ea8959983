//! The Event budget, decided without I/O: which findings get an Event now, which wait
//! for the token bucket to refill, and when a persisting finding's Event has its
//! `series` (count, last observed) written. Time comes in as arguments.
//!
//! The series mirrors client-go's `tools/events` broadcaster: an Event repeated within
//! 6 minutes (its `finishTime`) joins the earlier one's series instead of making a new
//! Event, the series is written at most every 30 minutes while it goes on (its
//! `refreshTime`, which also renews the Event's TTL, 1 hour by default), and once
//! more when it ends. Unlike client-go, the first repeat is not written at once: an
//! agent repeats every finding every scan, and a count of 2 tells nobody anything.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use crate::agent::kube_report::events::{EventDraft, qualifies};
use crate::heart::finding::{Finding, FindingId, Severity};

/// A token bucket: `capacity` writes at once, then one every `refill_every`.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    capacity: u32,
    refill_every: Duration,
    tokens: u32,
    /// When the last whole token was added (or the bucket was last full).
    refilled_at: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(capacity: u32, refill_every: Duration, now: Instant) -> TokenBucket {
        TokenBucket {
            capacity,
            refill_every,
            tokens: capacity,
            refilled_at: now,
        }
    }

    /// Takes a token if there is one.
    pub fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }

    fn refill(&mut self, now: Instant) {
        if self.tokens >= self.capacity {
            // A full bucket earns nothing: the refill clock starts when one is taken.
            self.refilled_at = now;
            return;
        }
        let elapsed = now.saturating_duration_since(self.refilled_at);
        let earned = match self.refill_every.as_nanos() {
            0 => u128::from(self.capacity),
            every => elapsed.as_nanos() / every,
        };
        if earned == 0 {
            return;
        }
        let room = self.capacity - self.tokens;
        if earned >= u128::from(room) {
            self.tokens = self.capacity;
            self.refilled_at = now;
        } else {
            // `earned < room <= u32::MAX`, so these conversions are exact.
            let earned = earned as u32;
            self.tokens += earned;
            self.refilled_at += self.refill_every * earned;
        }
    }
}

/// A write for the Event writer. `id` names one Event across its writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventOp {
    /// A new Event.
    Create { id: u64, draft: EventDraft },
    /// The Event's series: `count` scans found the finding, the last at
    /// `last_observed`. The draft recreates the Event if it is gone.
    Series {
        id: u64,
        draft: EventDraft,
        count: u32,
        last_observed: Timestamp,
    },
    /// An Event of its own, never a series (a repair action's).
    Single { draft: EventDraft },
}

/// What one scan gave the Event writer.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Admitted {
    /// Writes to make, within the budget, creates first.
    pub ops: Vec<EventOp>,
    /// Findings that newly went over the budget in this scan: they wait.
    pub deferred: u64,
    /// Findings waiting for their Event now.
    pub pending: usize,
    /// This scan began a run of deferred findings (none were waiting before): how
    /// many wait now. The moment to log it, once.
    pub run_began: Option<usize>,
    /// A run ended (none wait any more): how many findings it deferred.
    pub run_ended: Option<u64>,
}

/// An Event written, and its series.
#[derive(Debug)]
struct Record {
    id: u64,
    draft: EventDraft,
    /// Scans that found it, and how many of them the API has.
    count: u32,
    written: u32,
    written_at: Instant,
    last_seen: Instant,
    last_seen_wall: Timestamp,
}

/// A finding waiting for a token: most severe first, then oldest.
#[derive(Debug)]
struct Pending {
    rank: (bool, u64),
}

/// The budget: one Event per finding while it persists, written within a token bucket
/// that bounds every Event write (creates and series updates) of this agent.
#[derive(Debug)]
pub struct EventGate {
    bucket: TokenBucket,
    series_every: Duration,
    window: Duration,
    records: BTreeMap<FindingId, Record>,
    pending: BTreeMap<FindingId, Pending>,
    next_id: u64,
    next_seq: u64,
    /// Findings deferred since the current run began.
    run: u64,
}

impl EventGate {
    /// A gate over `bucket`; series written at most every `series_every`, and a
    /// finding gone for `window` ends its series.
    pub fn new(bucket: TokenBucket, series_every: Duration, window: Duration) -> EventGate {
        EventGate {
            bucket,
            series_every,
            window,
            records: BTreeMap::new(),
            pending: BTreeMap::new(),
            next_id: 0,
            next_seq: 0,
            run: 0,
        }
    }

    /// The writes one scan's findings call for, at most `room` of them (what the
    /// writer's queue can take now: the rest waits, as for the bucket).
    pub fn admit(&mut self, findings: &[Finding], room: usize, now: Instant, wall: Timestamp) -> Admitted {
        let mut current: BTreeMap<FindingId, &Finding> = BTreeMap::new();
        for f in findings.iter().filter(|f| qualifies(f)) {
            // Findings differing only in what the identity leaves out are one: the first counts.
            current.entry(f.identity()).or_insert(f);
        }
        let waiting_before = !self.pending.is_empty();
        let mut admitted = Admitted::default();
        let mut new = Vec::new();
        for (identity, f) in &current {
            if let Some(record) = self.records.get_mut(identity) {
                record.count = record.count.saturating_add(1);
                record.last_seen = now;
                record.last_seen_wall = wall;
            } else if !self.pending.contains_key(identity) {
                let critical = f.severity == Severity::Critical;
                self.pending.insert(
                    identity.clone(),
                    Pending {
                        rank: (!critical, self.next_seq),
                    },
                );
                self.next_seq += 1;
                new.push(identity);
            }
        }
        // Cleared before its Event: nothing to report any more.
        self.pending.retain(|identity, _| current.contains_key(identity));

        let mut room = room;
        let mut order: Vec<(&(bool, u64), &FindingId)> =
            self.pending.iter().map(|(id, p)| (&p.rank, id)).collect();
        order.sort();
        let mut created = Vec::new();
        for (_, identity) in order {
            // Every finding that qualifies has a draft (see `qualifies`).
            let Some(draft) = current.get(identity).and_then(|f| EventDraft::of(f)) else {
                continue;
            };
            if room == 0 || !self.bucket.try_take(now) {
                break;
            }
            room -= 1;
            created.push(identity.clone());
            let id = self.next_id;
            self.next_id += 1;
            admitted.ops.push(EventOp::Create {
                id,
                draft: draft.clone(),
            });
            self.records.insert(
                identity.clone(),
                Record {
                    id,
                    draft,
                    count: 1,
                    written: 1,
                    written_at: now,
                    last_seen: now,
                    last_seen_wall: wall,
                },
            );
        }
        for identity in &created {
            self.pending.remove(identity);
        }
        // New findings created in this scan were never over the budget.
        admitted.deferred = new.iter().filter(|id| self.pending.contains_key(**id)).count() as u64;
        self.series(&mut admitted, room, now);

        // A series ends once its finding has been gone for the window and its count is
        // written, or after a further period if the budget never allowed that write.
        let (window, every) = (self.window, self.series_every);
        self.records.retain(|_, r| {
            let gone = now.saturating_duration_since(r.last_seen);
            gone < window || (r.count > r.written && gone < window + every)
        });

        self.run += admitted.deferred;
        admitted.pending = self.pending.len();
        if !waiting_before && !self.pending.is_empty() {
            admitted.run_began = Some(self.pending.len());
        }
        if waiting_before && self.pending.is_empty() {
            admitted.run_ended = Some(std::mem::take(&mut self.run));
        }
        admitted
    }

    /// Series writes due: a persisting finding's every `series_every`, an ended one's
    /// once; longest unwritten first.
    fn series(&mut self, admitted: &mut Admitted, mut room: usize, now: Instant) {
        let (window, every) = (self.window, self.series_every);
        let mut due: Vec<&mut Record> = self
            .records
            .values_mut()
            .filter(|r| {
                let ended = now.saturating_duration_since(r.last_seen) >= window;
                r.count > r.written && (ended || now.saturating_duration_since(r.written_at) >= every)
            })
            .collect();
        due.sort_by_key(|r| r.written_at);
        for r in due {
            if room == 0 || !self.bucket.try_take(now) {
                break;
            }
            room -= 1;
            r.written = r.count;
            r.written_at = now;
            admitted.ops.push(EventOp::Series {
                id: r.id,
                draft: r.draft.clone(),
                count: r.count,
                last_observed: r.last_seen_wall,
            });
        }
    }
}

#[cfg(test)]
mod tests;
