//! The listener's socket filter, kept in step with the journal: once a chain's rules
//! fill datagram after datagram, the kernel is told to drop datagrams made only of
//! that chain's rules (`decode::netlink::changes::filter`) until a reader takes its
//! changes. The journal already names the chain, so nothing is lost, and a sync that
//! rewrites a 19,000-rule chain costs the agent a few datagrams instead of thousands
//! (`tests/rule_churn.rs` hears a `KUBE-NODEPORTS` rewrite in 396, the next in 1:
//! docs/performance.md#the-agent-under-churn).
//!
//! Safe only if every chain filtered is named in the journal, untaken, or is being
//! taken by a reader that reads it after: so the journal updates the filter under its
//! lock, after it notes a chain and before a take returns.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use socket2::{SockFilter, SockRef};

use crate::decode::netlink::changes::filter::{KnownChain, program};

/// Datagrams of one chain heard before it is filtered: one rewrite of a large chain
/// fills thousands; a small chain's change, a few.
const HOT: u32 = 8;
/// Chains filtered at once: kube-proxy rewrites a few dispatch chains per table and
/// family each sync, and each costs the filter instructions per message.
const MAX_FILTERED: usize = 4;

#[derive(Debug)]
pub(super) struct Quiet {
    socket: OwnedFd,
    /// Datagrams heard of chains not filtered, since their changes were last taken.
    heat: Vec<(KnownChain, u32)>,
    /// The chains the installed filter drops.
    filtered: Vec<KnownChain>,
}

impl Quiet {
    pub(super) fn new(socket: BorrowedFd<'_>) -> io::Result<Quiet> {
        Ok(Quiet {
            socket: socket.try_clone_to_owned()?,
            heat: Vec::new(),
            filtered: Vec::new(),
        })
    }

    /// The chains filtered now.
    pub(super) fn filtered(&self) -> &[KnownChain] {
        &self.filtered
    }

    /// A datagram of `chain`'s rules only was noted in the journal.
    pub(super) fn heard(&mut self, chain: KnownChain) -> io::Result<()> {
        if self.filtered.len() >= MAX_FILTERED || self.filtered.contains(&chain) {
            return Ok(());
        }
        let at = match self.heat.iter().position(|(c, _)| *c == chain) {
            Some(at) => at,
            None => {
                self.heat.push((chain, 0));
                self.heat.len() - 1
            }
        };
        self.heat[at].1 += 1;
        if self.heat[at].1 < HOT {
            return Ok(());
        }
        let (chain, _) = self.heat.swap_remove(at);
        self.filtered.push(chain);
        self.install()
    }

    /// The changes of `family`'s `tables` were taken: their chains are heard again.
    pub(super) fn taken(&mut self, family: u8, tables: &[&str]) -> io::Result<()> {
        let ours = |c: &KnownChain| c.family == family && tables.contains(&&*c.table);
        self.heat.retain(|(c, _)| !ours(c));
        let before = self.filtered.len();
        self.filtered.retain(|c| !ours(c));
        if self.filtered.len() == before {
            return Ok(());
        }
        self.install()
    }

    fn install(&self) -> io::Result<()> {
        match program(&self.filtered) {
            Some(insns) => {
                let insns: Vec<SockFilter> = insns
                    .iter()
                    .map(|i| SockFilter::new(i.code, i.jt, i.jf, i.k))
                    .collect();
                SockRef::from(&self.socket).attach_filter(&insns)
            }
            None => self.detach(),
        }
    }

    /// Removes the filter: every datagram is received again.
    pub(super) fn detach(&self) -> io::Result<()> {
        match SockRef::from(&self.socket).detach_filter() {
            // None was attached.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            other => other,
        }
    }
}
