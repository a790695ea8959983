//! The protocol of a read that follows the kernel's change notifications, shared by the
//! readers of iptables-nft's tables and of kube-proxy's nftables tables: the generation
//! before, the changes the listener heard through it, an update of what was kept (or
//! a whole read), and the generation after, which must not have moved.

use crate::decode::netlink::changes::TableChanges;
use crate::sources::netlink::{Conn, NetlinkError};
use crate::sources::rule_changes::{ChangeJournal, Unnamed};

/// How often a read is retried when the ruleset changed while it was read.
pub(crate) const ATTEMPTS: u32 = 3;

/// How a following read read the tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadKind {
    /// Every chain, and why (no earlier read kept, the periodic whole read, or why the
    /// notifications could not say what changed).
    Whole(String),
    /// Only what the notifications named: this many chains read of the total.
    Changed { chains: usize, of: usize },
}

/// Why kept tables cannot be brought up to date from what the notifications named.
#[derive(Debug)]
pub(crate) enum Stale {
    /// Read them whole: the sentence says why.
    Whole(String),
    Failed(NetlinkError),
}

impl From<NetlinkError> for Stale {
    fn from(e: NetlinkError) -> Self {
        Stale::Failed(e)
    }
}

/// What the notifications named, by (`NFPROTO_*` family, table).
pub(crate) type Named = Vec<(u8, String, TableChanges)>;

/// The generation kept tables were read at, and the notifications' loss count then.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stamp {
    pub(crate) generation: u32,
    pub(crate) lost_seen: u64,
}

/// What a reader keeps between reads.
pub(crate) trait Kept {
    fn stamp(&mut self) -> &mut Stamp;
}

/// The tables a following read ended with, and how it got them.
pub(crate) struct Followed<K> {
    pub(crate) state: K,
    /// Why they were read whole; None: only what changed was read.
    why: Option<String>,
    chains_read: usize,
    /// False when the listener cannot vouch for the next read.
    keepable: bool,
}

impl<K> Followed<K> {
    /// How the tables were read (`of`: their chains), keeping them for the next read.
    pub(crate) fn finish(self, kept: &mut Option<K>, of: usize) -> ReadKind {
        if self.keepable {
            *kept = Some(self.state);
        }
        match self.why {
            Some(why) => ReadKind::Whole(why),
            None => ReadKind::Changed {
                chains: self.chains_read,
                of,
            },
        }
    }
}

/// One following read of the tables `scopes` names. `update` brings kept tables up to
/// date with what was named (returning the chains it read); `read_whole` reads them
/// afresh. The result is what a whole read at one generation gives.
pub(crate) fn follow<K: Kept>(
    conn: &mut Conn,
    journal: &ChangeJournal,
    scopes: &[(u8, &[&str])],
    kept: &mut Option<K>,
    whole: &mut bool,
    update: &mut dyn FnMut(&mut Conn, &mut K, &Named) -> Result<usize, Stale>,
    read_whole: &mut dyn FnMut(&mut Conn) -> Result<K, NetlinkError>,
) -> Result<Followed<K>, NetlinkError> {
    // Taken out: a read that fails keeps nothing, and the next reads whole.
    let mut progress = Progress::start(kept.take(), journal, *whole);
    for attempt in 0..ATTEMPTS {
        let before = conn.generation()?;
        progress.take_named(journal, before, scopes);
        if let Attempt::Retry = progress.update(conn, update)? {
            continue;
        }
        if let Attempt::Retry = progress.read_whole(conn, read_whole, attempt, whole)? {
            continue;
        }
        if conn.generation()? != before {
            continue;
        }
        let Some(done) = progress.state.take() else {
            continue;
        };
        return Ok(progress.followed(done, before));
    }
    Err(NetlinkError::Unstable(ATTEMPTS))
}

/// Whether an attempt goes on to its next step or starts again.
enum Attempt {
    GoOn,
    Retry,
}

/// What a following read has over its attempts.
struct Progress<K> {
    /// The tables being brought up to date, or read whole; None: to read whole.
    state: Option<K>,
    /// The kept tables, brought up to date instead when the periodic whole read
    /// cannot complete.
    fallback: Option<K>,
    /// Why the tables are read whole; None: only what changed is read.
    why: Option<String>,
    /// What the notifications named, over every attempt: an attempt cut short by a
    /// commit re-reads all of it, so nothing read before that commit is left unread.
    named: Named,
    keepable: bool,
    chains_read: usize,
    lost_seen: u64,
}

impl<K: Kept> Progress<K> {
    /// The periodic whole read (`whole`) is a check, not a need: when churn keeps it
    /// from completing, the kept tables are brought up to date instead and it waits.
    fn start(mut previous: Option<K>, journal: &ChangeJournal, whole: bool) -> Self {
        let lost_seen = previous
            .as_mut()
            .map_or_else(|| journal.lost(), |s| s.stamp().lost_seen);
        let (state, fallback) = if whole { (None, previous) } else { (previous, None) };
        let why = match (&state, &fallback) {
            (Some(_), _) => None,
            (None, Some(_)) => Some("the periodic whole read".to_string()),
            (None, None) => Some("no earlier read kept".to_string()),
        };
        Progress {
            state,
            fallback,
            why,
            named: Vec::new(),
            keepable: true,
            chains_read: 0,
            lost_seen,
        }
    }

    /// Adds what the notifications named up to generation `before`; when they cannot
    /// say, the tables are to be read whole.
    fn take_named(&mut self, journal: &ChangeJournal, before: u32, scopes: &[(u8, &[&str])]) {
        for &(nfproto, tables) in scopes {
            match journal.take(before, nfproto, tables, &mut self.lost_seen) {
                Ok(taken) => merge_named(&mut self.named, nfproto, taken),
                Err(unnamed) => {
                    // Whatever was read is read again whole; a listener that is behind
                    // or gone cannot vouch for the next read either.
                    self.state = None;
                    self.why = Some(unnamed.as_str().to_string());
                    self.keepable &= unnamed == Unnamed::Lost;
                    // Only a whole read knows what changed now.
                    self.fallback = None;
                }
            }
        }
    }

    /// Brings the tables being followed up to date with what was named.
    fn update(
        &mut self,
        conn: &mut Conn,
        update: &mut dyn FnMut(&mut Conn, &mut K, &Named) -> Result<usize, Stale>,
    ) -> Result<Attempt, NetlinkError> {
        let Some(state) = self.state.as_mut() else {
            return Ok(Attempt::GoOn);
        };
        match update(conn, state, &self.named) {
            Ok(read) => self.chains_read += read,
            Err(Stale::Whole(reason)) => {
                self.state = None;
                self.why = Some(reason);
            }
            // A dump cut short by a commit. What was named is kept over attempts and
            // read again in the next, so a partial update is completed there, that
            // commit's changes with it.
            Err(Stale::Failed(NetlinkError::Unstable(_))) => return Ok(Attempt::Retry),
            Err(Stale::Failed(e)) => return Err(e),
        }
        Ok(Attempt::GoOn)
    }

    /// Reads the tables whole when nothing is being followed. Before the last attempt,
    /// a periodic whole read that churn cut short gives way to the kept tables.
    fn read_whole(
        &mut self,
        conn: &mut Conn,
        read_whole: &mut dyn FnMut(&mut Conn) -> Result<K, NetlinkError>,
        attempt: u32,
        whole: &mut bool,
    ) -> Result<Attempt, NetlinkError> {
        if self.state.is_some() {
            return Ok(Attempt::GoOn);
        }
        match read_whole(conn) {
            Err(NetlinkError::Unstable(_)) => {
                if attempt + 2 == ATTEMPTS
                    && let Some(previous) = self.fallback.take()
                {
                    self.state = Some(previous);
                    self.why = None;
                }
                Ok(Attempt::Retry)
            }
            Err(e) => Err(e),
            Ok(read) => {
                *whole = false;
                self.state = Some(read);
                Ok(Attempt::GoOn)
            }
        }
    }

    /// The tables read at generation `before`, stamped with it.
    fn followed(self, mut done: K, before: u32) -> Followed<K> {
        *done.stamp() = Stamp {
            generation: before,
            lost_seen: self.lost_seen,
        };
        Followed {
            state: done,
            why: self.why,
            chains_read: self.chains_read,
            keepable: self.keepable,
        }
    }
}

fn merge_named(named: &mut Named, nfproto: u8, taken: Vec<(String, TableChanges)>) {
    for (table, changes) in taken {
        match named.iter_mut().find(|(f, t, _)| *f == nfproto && *t == table) {
            Some((_, _, have)) => have.merge(changes),
            None => named.push((nfproto, table, changes)),
        }
    }
}
