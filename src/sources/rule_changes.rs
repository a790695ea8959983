//! The kernel's announcements of nf_tables changes: what lets the agent skip reading
//! an unchanged ruleset and rescan soon after one changes.
//!
//! Every nf_tables transaction (iptables-nft or nftables) is multicast to the
//! namespace's `NFNLGRP_NFTABLES` group, which costs nothing to join while a large
//! node's dump is expensive to read. The legacy backend announces nothing, so its
//! dumps are read every scan. netlink-sys, not nftnl: only the fact of a change matters.

use std::io;

use netlink_sys::protocols::NETLINK_NETFILTER;
use netlink_sys::{AsyncSocket, AsyncSocketExt, TokioSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// `NFNLGRP_NFTABLES` from `linux/netfilter/nfnetlink.h`.
const NFNLGRP_NFTABLES: u32 = 7;

/// Room for a burst of notifications (a kube-proxy full sync writes tens of thousands
/// of objects at once). An overflow is not lost information: it is reported as a
/// change, which is all a notification says anyway.
const RECEIVE_BUFFER: usize = 4 << 20;

/// A running subscription: a counter that moves on every announced change, whose
/// sender is gone once listening failed. Dropping it stops listening.
#[derive(Debug)]
pub struct RuleChanges {
    counter: watch::Receiver<u64>,
    task: JoinHandle<()>,
}

impl Drop for RuleChanges {
    fn drop(&mut self) {
        self.task.abort();
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
        // Best effort: without it the default buffer overflows sooner, which only
        // means more "something changed" errors.
        let _ = socket.socket_ref().set_rx_buf_sz(RECEIVE_BUFFER);
        let (tx, counter) = watch::channel(0u64);
        let task = tokio::spawn(listen(socket, tx));
        Ok(RuleChanges { counter, task })
    }

    /// A receiver of the change counter. `has_changed()` errs once listening failed:
    /// from then on nothing can be known unchanged.
    pub fn receiver(&self) -> watch::Receiver<u64> {
        self.counter.clone()
    }
}

async fn listen(socket: TokioSocket, tx: watch::Sender<u64>) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let outcome = socket.recv(&mut &mut buf[..]).await;
        match outcome {
            Ok(()) => {}
            // ENOBUFS: notifications were dropped because the buffer was full. They
            // were changes; that is all that needs saying.
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
            Err(e) => {
                // Anything else would repeat at once: stop rather than spin. Dropping
                // the sender tells every receiver that changes are no longer known.
                tracing::warn!(error = %e, "nf_tables change notifications failed; every scan now reads every dump");
                return;
            }
        }
        tx.send_modify(|n| *n = n.wrapping_add(1));
    }
}
