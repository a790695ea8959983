//! The kernel's announcements of nf_tables changes: what lets the agent skip reading
//! an unchanged ruleset and rescan soon after one changes.
//!
//! Every nf_tables transaction (iptables-nft or nftables) is multicast to the
//! namespace's `NFNLGRP_NFTABLES` group, which costs nothing to join while a large
//! node's dump is expensive to read. The legacy backend announces nothing, so its
//! dumps are read every scan. Each notification names the table and the chain or set it
//! changed; the [`ChangeJournal`] gathers those names so a reader re-reads only them.
//! netlink-sys, not nftnl: the messages are walked, not built.

use std::io;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use netlink_sys::protocols::NETLINK_NETFILTER;
use netlink_sys::{AsyncSocket, AsyncSocketExt, TokioSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::decode::netlink::changes::{Changes, TableChanges};
use crate::heart::input::{Input, IptablesBackend};
use crate::heart::model::Family;
use crate::sources::netlink::{Conn, NetlinkLimits};

mod quiet;
use quiet::Quiet;

/// `NFNLGRP_NFTABLES` from `linux/netfilter/nfnetlink.h`.
const NFNLGRP_NFTABLES: u32 = 7;

/// The rule dumps whose every change the kernel announces on the nf_tables netlink
/// group: iptables-nft's and kube-proxy's nftables tables. The legacy backend's are not
/// among them and are read every time.
pub const NF_TABLES_DUMPS: [Input; 3] = [
    Input::iptables(Some(IptablesBackend::Nft), Family::Ipv4),
    Input::iptables(Some(IptablesBackend::Nft), Family::Ipv6),
    Input::NftJson,
];

/// Room for a burst of notifications: a kube-proxy sync that rewrites KUBE-NODEPORTS
/// at 10,000 Services notifies about 10,000 datagrams, 30 MB, at once
/// (docs/performance.md#the-agent-under-churn, "Hearing the syncs"). Kernel memory, and
/// only while a burst waits. An overflow loses the names of what changed, so the next
/// read is whole.
const RECEIVE_BUFFER: usize = 32 << 20;
/// Without CAP_NET_ADMIN the buffer is capped by `net.core.rmem_max`; this is asked
/// for then.
const RECEIVE_BUFFER_UNPRIVILEGED: usize = 4 << 20;

/// A running subscription: a counter that moves on every announced change, whose
/// sender is gone once listening failed. Dropping it stops listening.
#[derive(Debug)]
pub struct RuleChanges {
    counter: watch::Receiver<u64>,
    journal: ChangeJournal,
    task: JoinHandle<()>,
}

impl Drop for RuleChanges {
    fn drop(&mut self) {
        self.task.abort();
        // The filter's copy of the socket would keep it in the group, its buffer
        // filling with nobody to read it.
        self.journal.lock().quiet = None;
    }
}

impl RuleChanges {
    /// Joins the group in the current network namespace. Fails without CAP_NET_ADMIN
    /// or on a kernel without nf_tables; the caller then reads every dump every scan.
    /// Must be called inside a Tokio runtime.
    pub fn subscribe() -> io::Result<RuleChanges> {
        let mut socket = TokioSocket::new(NETLINK_NETFILTER)?;
        socket.socket_mut().bind_auto()?;
        socket.socket_ref().add_membership(NFNLGRP_NFTABLES)?;
        // Best effort: a smaller buffer overflows sooner, which only means more whole
        // reads.
        if rustix::net::sockopt::set_socket_recv_buffer_size_force(socket.socket_ref(), RECEIVE_BUFFER)
            .is_err()
        {
            let _ = socket.socket_ref().set_rx_buf_sz(RECEIVE_BUFFER_UNPRIVILEGED);
        }
        // The generation now, asked after joining: every commit after it is heard.
        let limits = NetlinkLimits {
            timeout: Duration::from_secs(5),
            max_bytes: 1 << 20,
        };
        let generation = Conn::open(limits, Instant::now() + limits.timeout, None)
            .and_then(|mut conn| conn.generation())
            .map_err(|e| io::Error::other(e.to_string()))?;
        let journal = ChangeJournal::starting_at(generation);
        match Quiet::new(socket.socket_ref().as_fd()) {
            Ok(quiet) => journal.lock().quiet = Some(quiet),
            // Only costlier: every datagram is received.
            Err(e) => tracing::warn!(error = %e, "cannot filter nf_tables change notifications"),
        }
        let (tx, counter) = watch::channel(0u64);
        let task = tokio::spawn(listen(socket, tx, journal.clone()));
        Ok(RuleChanges {
            counter,
            journal,
            task,
        })
    }

    /// The names of what changed, for the readers that re-read only those.
    pub fn journal(&self) -> ChangeJournal {
        self.journal.clone()
    }

    /// A receiver of the change counter. `has_changed()` errs once listening failed:
    /// from then on nothing can be known unchanged.
    pub fn receiver(&self) -> watch::Receiver<u64> {
        self.counter.clone()
    }
}

/// How long the listener lets notifications gather between drains. A kube-proxy sync
/// at 10,000 Services notifies about 10,000 datagrams
/// (docs/performance.md#the-agent-under-churn); waking for each cost more than reading
/// them. The buffer holds far more than this much of a burst.
const GATHER: Duration = Duration::from_millis(50);

async fn listen(socket: TokioSocket, tx: watch::Sender<u64>, journal: ChangeJournal) {
    let mut buf = Vec::with_capacity(64 << 10);
    loop {
        // Wait for the first datagram of a burst, then take every one queued without
        // waiting again.
        buf.clear();
        let mut outcome = socket.recv(&mut buf).await.map(|()| buf.len());
        loop {
            match outcome {
                Ok(_) => journal.note_datagram(&buf),
                // ENOBUFS: notifications were dropped because the buffer was full.
                // They were changes, but which is no longer known.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => journal.note_lost(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // Anything else would repeat at once: stop rather than spin.
                    // Dropping the sender tells every receiver that changes are no
                    // longer known.
                    tracing::warn!(error = %e, "nf_tables change notifications failed; every scan now reads every dump");
                    journal.note_stopped();
                    return;
                }
            }
            buf.clear();
            outcome = socket.socket_ref().recv(&mut buf, libc::MSG_DONTWAIT);
        }
        tx.send_modify(|n| *n = n.wrapping_add(1));
        tokio::time::sleep(GATHER).await;
    }
}

/// The names of the tables, chains and sets the kernel announced changed, gathered by
/// the listener and taken by each reader for its own tables.
#[derive(Debug, Clone)]
pub struct ChangeJournal(Arc<Mutex<Journal>>);

#[derive(Debug)]
struct Journal {
    changes: Changes,
    /// The generation of the last commit heard (or the one at the start).
    generation: u32,
    /// Bumped whenever changes went unnamed (an overflow, a message not understood):
    /// a reader that saw another value must read everything.
    lost: u64,
    listening: bool,
    /// The listener socket's filter of datagrams that would name nothing new.
    quiet: Option<Quiet>,
    /// Datagrams received.
    datagrams: u64,
}

impl Journal {
    /// The filter could not be changed: it is removed, or if even that fails, nothing
    /// can be known unchanged any more (every read is whole).
    fn quiet_failed(&mut self, error: &io::Error) {
        let Some(quiet) = self.quiet.take() else { return };
        match quiet.detach() {
            Ok(()) => {
                tracing::warn!(%error, "cannot filter nf_tables change notifications; each is received")
            }
            Err(e) => {
                tracing::warn!(%error, detach = %e, "cannot change the filter of nf_tables change notifications; every scan now reads every dump");
                self.listening = false;
            }
        }
    }
}

/// Why a reader must read everything rather than only what changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unnamed {
    /// Notifications were dropped (the socket's buffer overflowed) or not understood.
    Lost,
    /// The listener stopped.
    NotListening,
    /// The listener had not heard the current generation's commit in time.
    Behind,
}

impl Unnamed {
    pub fn as_str(self) -> &'static str {
        match self {
            Unnamed::Lost => "nf_tables notifications were lost or not understood",
            Unnamed::NotListening => "nf_tables notifications are no longer heard",
            Unnamed::Behind => "the nf_tables notifications had not caught up with the kernel",
        }
    }
}

/// How long a reader waits for the listener to hear the commits the kernel has made.
/// The kernel queues a commit's notifications before it answers the next request, so
/// only the listener's own delay is waited for.
const CATCH_UP: Duration = Duration::from_secs(1);

impl ChangeJournal {
    /// A journal that has heard everything up to `generation`.
    pub fn starting_at(generation: u32) -> ChangeJournal {
        ChangeJournal(Arc::new(Mutex::new(Journal {
            changes: Changes::default(),
            generation,
            lost: 0,
            listening: true,
            quiet: None,
            datagrams: 0,
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Journal> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes one received datagram's messages.
    pub fn note_datagram(&self, data: &[u8]) {
        let mut journal = self.lock();
        journal.datagrams += 1;
        let unplaced = journal.changes.unplaced();
        let only = journal.changes.note_datagram(data);
        if journal.changes.unplaced() != unplaced {
            journal.lost += 1;
        }
        if let Some(generation) = journal.changes.generation() {
            journal.generation = generation;
        }
        // The chain is named in the changes now: its datagrams may be dropped until
        // they are taken.
        if let (Some(chain), Some(quiet)) = (only, journal.quiet.as_mut())
            && let Err(e) = quiet.heard(chain)
        {
            journal.quiet_failed(&e);
        }
    }

    /// Datagrams received since the start.
    pub fn datagrams(&self) -> u64 {
        self.lock().datagrams
    }

    /// The chains the listener's socket filter drops datagrams of now, as (family,
    /// table, chain).
    pub fn filtered(&self) -> Vec<(u8, String, String)> {
        let journal = self.lock();
        let filtered = journal.quiet.as_ref().map(Quiet::filtered).unwrap_or_default();
        filtered
            .iter()
            .map(|c| (c.family, c.table.to_string(), c.chain.to_string()))
            .collect()
    }

    /// Notes that notifications were dropped.
    pub fn note_lost(&self) {
        self.lock().lost += 1;
    }

    fn note_stopped(&self) {
        let mut journal = self.lock();
        journal.listening = false;
        journal.quiet = None;
    }

    /// The loss count now: a reader keeps the value of its last read and hands it back
    /// to [`ChangeJournal::take`].
    pub fn lost(&self) -> u64 {
        self.lock().lost
    }

    /// Takes what changed in `family`'s `tables` through the kernel's `generation`
    /// (read just before), once the listener has heard that commit (or a later one).
    /// `lost_seen` is the loss count of the reader's last read; on success it is the
    /// current one.
    pub fn take(
        &self,
        generation: u32,
        family: u8,
        tables: &[&str],
        lost_seen: &mut u64,
    ) -> Result<Vec<(String, TableChanges)>, Unnamed> {
        let deadline = Instant::now() + CATCH_UP;
        loop {
            {
                let mut journal = self.lock();
                if !journal.listening {
                    return Err(Unnamed::NotListening);
                }
                // Heard past it (a later commit came since): what is taken then names
                // more than that commit's changes, which only reads more, and the
                // reader's generation check after the read starts it again.
                let heard = journal.generation.wrapping_sub(generation) as i32 >= 0;
                if heard {
                    let taken = journal.changes.take(family, tables);
                    // Before the reader reads: a change after this is heard again.
                    if let Some(Err(e)) = journal.quiet.as_mut().map(|q| q.taken(family, tables)) {
                        journal.quiet_failed(&e);
                    }
                    if journal.lost != *lost_seen {
                        *lost_seen = journal.lost;
                        return Err(Unnamed::Lost);
                    }
                    return Ok(taken);
                }
            }
            if Instant::now() >= deadline {
                return Err(Unnamed::Behind);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether anything is noted for these tables (not yet taken).
    pub fn any(&self, family: u8, tables: &[&str]) -> bool {
        self.lock().changes.any(family, tables)
    }
}

#[cfg(test)]
mod tests;
