//! The change signal the daemon waits on: a counter that moves whenever something that
//! can change this node's NodePorts changes after the initial lists.

use tokio::sync::watch;

/// Counts relevant changes; each subscriber sees the counter move.
#[derive(Debug)]
pub(super) struct ChangeSignal {
    counter: watch::Sender<u64>,
}

impl ChangeSignal {
    pub(super) fn new() -> Self {
        ChangeSignal {
            counter: watch::Sender::new(0u64),
        }
    }

    /// Tells every subscriber that something changed.
    pub(super) fn notify(&self) {
        self.counter.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees each later [`notify`](Self::notify).
    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        self.counter.subscribe()
    }
}
