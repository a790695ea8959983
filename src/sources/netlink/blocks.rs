//! Many small dumps spread over several sockets, their results handed on in order.
//!
//! Why: a large node's read is thousands of per-chain (and per-set) dumps, and almost
//! all of its time is the kernel's, spent in the reading task. Each socket's dumps are
//! independent, so two sockets on two threads read at once (on two cores a
//! 10,000-Service nftables read went from 7.6 s to 4.5–4.9 s with them:
//! docs/performance.md#the-live-read), while the caller still sees one result after
//! another, in the order of the items, and holds at most `lookahead` blocks of them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, mpsc};
use std::time::Instant;

use crate::sources::netlink::{Conn, NetlinkError, NetlinkLimits, Recording};

/// Sockets reading at once: one a core of the nodes this is measured on.
pub(crate) const READERS: usize = 2;

/// What the sockets of one read share: its limits, its deadline, and a count of the
/// bytes the extra sockets received.
#[derive(Clone, Copy)]
pub(crate) struct Readers<'a> {
    pub(crate) limits: NetlinkLimits,
    pub(crate) deadline: Instant,
    pub(crate) bytes: &'a AtomicU64,
    /// Where the extra sockets record the messages they read, if anywhere.
    pub(crate) recording: Option<&'a Arc<Recording>>,
}

impl<'a> Readers<'a> {
    pub(crate) fn new(
        limits: NetlinkLimits,
        deadline: Instant,
        bytes: &'a AtomicU64,
        recording: Option<&'a Arc<Recording>>,
    ) -> Readers<'a> {
        Readers {
            limits,
            deadline,
            bytes,
            recording,
        }
    }
}

/// How `items` are cut up and how far the readers may run ahead.
#[derive(Clone, Copy)]
pub(crate) struct ReadPlan {
    /// Items per unit of work.
    pub(crate) block: usize,
    /// Blocks read but not yet handed on, at most.
    pub(crate) lookahead: usize,
    /// Of those, the [`Held::held`] size at most: a reader stops taking blocks once
    /// this much waits for the sink.
    pub(crate) budget: usize,
}

/// The size of a block's result while it waits for the sink, for [`ReadPlan::budget`].
pub(crate) trait Held {
    fn held(&self) -> usize {
        0
    }
}

impl Held for String {
    fn held(&self) -> usize {
        self.len()
    }
}

impl<X> Held for Vec<X> {}

/// Reads every item with `read`, which appends what it gives to a block's `T`, and hands
/// each block's `T` to `sink` in the items' order. When `items` fit in one block they
/// are read on `conn` alone; otherwise [`READERS`] sockets of their own read them at
/// once. `sink` may leave its `T` emptied for reuse (a buffer comes back to the
/// readers rather than being allocated again).
pub(crate) fn read_in_order<I, T>(
    conn: &mut Conn,
    readers: Readers<'_>,
    items: &[I],
    plan: ReadPlan,
    read: &(dyn Fn(&mut Conn, &I, &mut T) -> Result<(), NetlinkError> + Sync),
    sink: &mut dyn FnMut(&mut T) -> Result<(), NetlinkError>,
) -> Result<(), NetlinkError>
where
    I: Sync,
    T: Send + Default + Held,
{
    if items.len() <= plan.block {
        let mut out = T::default();
        for item in items {
            read(conn, item, &mut out)?;
        }
        return sink(&mut out);
    }
    let blocks: Vec<&[I]> = items.chunks(plan.block.max(1)).collect();
    let progress = Mutex::new(Progress::default());
    let moved = Condvar::new();
    let (tx, rx) = mpsc::channel::<(usize, Result<T, NetlinkError>)>();
    std::thread::scope(|s| {
        for _ in 0..READERS {
            let tx = tx.clone();
            let (blocks, progress, moved) = (&blocks, &progress, &moved);
            s.spawn(move || {
                let mut conn = match Conn::open(readers.limits, readers.deadline, readers.recording) {
                    Ok(conn) => conn,
                    Err(e) => return drop(tx.send((0, Err(e)))),
                };
                while let Some((block, mut out)) = Progress::take(progress, moved, blocks.len(), plan) {
                    let result = blocks[block]
                        .iter()
                        .try_for_each(|item| read(&mut conn, item, &mut out))
                        .map(|()| out);
                    if let Ok(out) = &result {
                        // Counted before the sink can see it, so its release never
                        // comes first.
                        let size = out.held();
                        Progress::update(progress, moved, |p| p.held += size);
                    }
                    let failed = result.is_err();
                    if tx.send((block, result)).is_err() || failed {
                        break;
                    }
                }
                readers.bytes.fetch_add(conn.bytes, Ordering::Relaxed);
            });
        }
        drop(tx);
        let result = feed_in_order(&rx, blocks.len(), &progress, &moved, sink);
        Progress::update(&progress, &moved, |p| p.stop = true);
        result
    })
}

/// How far the readers and the sink have got.
struct Progress<T> {
    /// The next block a reader takes.
    next: usize,
    /// Blocks handed to the sink.
    fed: usize,
    /// The read failed or ended: readers take nothing more.
    stop: bool,
    /// The [`Held::held`] size of the blocks read and not yet handed on.
    held: usize,
    /// Buffers the sink is done with, for the readers to fill again.
    spare: Vec<T>,
}

impl<T> Default for Progress<T> {
    fn default() -> Self {
        Progress {
            next: 0,
            fed: 0,
            stop: false,
            held: 0,
            spare: Vec::new(),
        }
    }
}

impl<T: Default> Progress<T> {
    /// The next block for a reader, once it is no more than `lookahead` ahead of the
    /// sink and less than `budget` waits for it, and a buffer for it; None when there is
    /// none left or the read stopped. The block the sink waits for is always taken
    /// before any later one, so the sink keeps moving and the wait ends.
    fn take(progress: &Mutex<Self>, moved: &Condvar, blocks: usize, plan: ReadPlan) -> Option<(usize, T)> {
        let mut p = progress.lock().unwrap_or_else(PoisonError::into_inner);
        while !p.stop
            && p.next < blocks
            && (p.next >= p.fed.saturating_add(plan.lookahead) || p.held >= plan.budget)
        {
            p = moved.wait(p).unwrap_or_else(PoisonError::into_inner);
        }
        if p.stop || p.next >= blocks {
            return None;
        }
        p.next += 1;
        let buffer = p.spare.pop().unwrap_or_default();
        Some((p.next - 1, buffer))
    }

    fn update(progress: &Mutex<Self>, moved: &Condvar, change: impl FnOnce(&mut Self)) {
        change(&mut progress.lock().unwrap_or_else(PoisonError::into_inner));
        moved.notify_all();
    }
}

/// Hands the readers' blocks to `sink` in block order, holding those that come early.
fn feed_in_order<T: Default + Held>(
    rx: &mpsc::Receiver<(usize, Result<T, NetlinkError>)>,
    blocks: usize,
    progress: &Mutex<Progress<T>>,
    moved: &Condvar,
    sink: &mut dyn FnMut(&mut T) -> Result<(), NetlinkError>,
) -> Result<(), NetlinkError> {
    let mut early: BTreeMap<usize, T> = BTreeMap::new();
    for block in 0..blocks {
        let mut out = loop {
            if let Some(out) = early.remove(&block) {
                break out;
            }
            match rx.recv() {
                Ok((_, Err(e))) => return Err(e),
                Ok((i, Ok(out))) => {
                    early.insert(i, out);
                }
                Err(_) => return Err(NetlinkError::Malformed("a reader stopped early".into())),
            }
        };
        let size = out.held();
        sink(&mut out)?;
        Progress::update(progress, moved, |p| {
            p.fed = block + 1;
            p.held = p.held.saturating_sub(size);
            p.spare.push(out);
        });
    }
    Ok(())
}
