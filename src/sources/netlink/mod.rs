//! The nfnetlink transport shared by the readers of nf_tables over netlink (kube-proxy's
//! nftables tables, iptables-nft's tables): one socket, requests, and dumps read one
//! datagram at a time within a deadline and a byte budget. The messages are decoded by
//! [`crate::decode::netlink`].
//!
//! `netlink-sys` (already here for the change notifications) gives the socket; the
//! requests are built and the answers taken apart by
//! [`crate::decode::netlink::request`] and [`crate::decode::netlink::reply`].

use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use netlink_sys::Socket;
use netlink_sys::protocols::NETLINK_NETFILTER;

use crate::decode::netlink::DecodeError;
use crate::decode::netlink::reply::{self, Body, split_reply};
use crate::decode::netlink::request::{self, Answer, Request};

pub(crate) mod blocks;
pub mod follow;
pub mod iptables;
pub mod kept;
pub mod nftables;

/// Why the tables could not be read over netlink (the caller falls back to the dump tool).
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    #[error("cannot open a netfilter netlink socket: {0}")]
    Socket(#[source] io::Error),
    #[error("netlink I/O failed: {0}")]
    Io(#[source] io::Error),
    #[error("the kernel refused {what}: {source}")]
    Refused {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("malformed netlink message: {0}")]
    Malformed(String),
    #[error("the ruleset changed during every one of {0} reads")]
    Unstable(u32),
    #[error("more than {0} bytes of netlink messages: reading stopped")]
    TooLarge(u64),
    #[error("{0}")]
    Unsupported(String),
    #[error("no complete answer within {0:?}")]
    TimedOut(Duration),
}

impl From<DecodeError> for NetlinkError {
    fn from(e: DecodeError) -> Self {
        match e {
            DecodeError::Malformed(what) => NetlinkError::Malformed(what),
            DecodeError::Unsupported(what) => NetlinkError::Unsupported(what),
        }
    }
}

/// The raw messages a read handed to its decoders, in the order they arrived (each a
/// whole netlink message, header included): what the decoder fixtures are made of.
#[derive(Debug, Default)]
pub struct Recording(Mutex<Vec<u8>>);

impl Recording {
    /// The messages recorded so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn clear(&self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    fn push(&self, message: &[u8]) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(message);
    }
}

/// Starts an attempt of a recorded read afresh: only the last attempt's messages count.
pub(crate) fn restart(recording: Option<&Arc<Recording>>) {
    if let Some(r) = recording {
        r.clear();
    }
}

/// Bounds on one read of both tables.
#[derive(Debug, Clone, Copy)]
pub struct NetlinkLimits {
    pub timeout: Duration,
    pub max_bytes: u64,
}

/// Larger than any datagram the kernel sends for a dump (at most 32 KiB).
pub(crate) const RECV_BUFFER: usize = 64 << 10;

pub(crate) struct Conn {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
    pub(crate) bytes: u64,
    limits: NetlinkLimits,
    deadline: Instant,
    recording: Option<Arc<Recording>>,
}

impl Conn {
    pub(crate) fn open(
        limits: NetlinkLimits,
        deadline: Instant,
        recording: Option<&Arc<Recording>>,
    ) -> Result<Conn, NetlinkError> {
        Ok(Conn {
            socket: open_socket(limits)?,
            seq: 0,
            buf: vec![0; RECV_BUFFER],
            bytes: 0,
            limits,
            deadline,
            recording: recording.cloned(),
        })
    }

    /// The ruleset's generation: it moves with every committed change.
    pub(crate) fn generation(&mut self) -> Result<u32, NetlinkError> {
        let mut id = None;
        self.exchange("the generation", &request::generation(), |attrs| {
            id = reply::generation(attrs)?;
            Ok(())
        })?;
        id.ok_or_else(|| NetlinkError::Malformed("a generation message without an id".into()))
    }

    /// Sends one request and hands the attributes of every answer to `each`, until the
    /// answer ends as the request asked: the end of a dump, the single answer of a
    /// plain request, or the kernel's acknowledgement (a refusal ends it as an error,
    /// after the messages sent before it).
    pub(crate) fn exchange(
        &mut self,
        what: &'static str,
        request: &Request,
        mut each: impl FnMut(&[u8]) -> Result<(), NetlinkError>,
    ) -> Result<(), NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let answer = request.answer();
        self.socket
            .send(&request.encode(self.seq), 0)
            .map_err(NetlinkError::Io)?;
        let mut interrupted = false;
        let outcome = self.answers(what, answer, &mut each, &mut interrupted);
        match outcome {
            Ok(()) if interrupted => Err(NetlinkError::Unstable(1)),
            Ok(()) => Ok(()),
            Err(e) => {
                // A dump left unfinished keeps its socket busy (the kernel refuses the
                // next dump, EBUSY), and reading it to its end has the kernel walk the
                // rest of it, which for a dump cut short by a commit is wasted: a long
                // chain's dump is quadratic, each part resuming from its first rule.
                // Closing the socket ends the dump; the next request takes a fresh one.
                if answer == Answer::Dump
                    && let Ok(fresh) = open_socket(self.limits)
                {
                    self.socket = fresh;
                }
                Err(e)
            }
        }
    }

    /// Reads the answers to the last request, handing each message's attributes to
    /// `each`, until the answer ends. A dump the kernel marks interrupted (the ruleset
    /// changed under it) ends there as [`NetlinkError::Unstable`]; any other answer so
    /// marked sets `interrupted` and is read to its end.
    fn answers(
        &mut self,
        what: &'static str,
        answer: Answer,
        each: &mut dyn FnMut(&[u8]) -> Result<(), NetlinkError>,
        interrupted: &mut bool,
    ) -> Result<(), NetlinkError> {
        loop {
            let n = self.receive()?;
            let mut datagram = &self.buf[..n];
            while !datagram.is_empty() {
                let (reply, rest) = split_reply(datagram)?;
                datagram = rest;
                if reply.seq != self.seq {
                    continue; // A late answer to an earlier, abandoned request.
                }
                let (interrupted_here, attrs) = match reply.body {
                    Body::Done => return Ok(()),
                    Body::Error(code) => {
                        let code = code?;
                        if code == 0 {
                            return Ok(());
                        }
                        // EBUSY: another dump still runs on this socket; like an
                        // interrupted dump, the read is tried again rather than given up.
                        if code.saturating_neg() == libc::EBUSY {
                            return Err(NetlinkError::Unstable(1));
                        }
                        return Err(NetlinkError::Refused {
                            what,
                            source: io::Error::from_raw_os_error(code.saturating_neg()),
                        });
                    }
                    Body::Message { interrupted, attrs } => (interrupted, attrs),
                };
                if interrupted_here {
                    if answer == Answer::Dump {
                        return Err(NetlinkError::Unstable(1));
                    }
                    *interrupted = true;
                }
                if *interrupted {
                    continue;
                }
                let attrs = attrs?;
                if let Some(recording) = &self.recording {
                    recording.push(reply.message);
                }
                each(attrs)?;
                if answer == Answer::One {
                    return Ok(());
                }
            }
        }
    }

    /// One datagram into the buffer, within the deadline and the byte limit.
    fn receive(&mut self) -> Result<usize, NetlinkError> {
        if Instant::now() >= self.deadline {
            return Err(NetlinkError::TimedOut(self.limits.timeout));
        }
        let n = match self.socket.recv(&mut &mut self.buf[..], libc::MSG_TRUNC) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(NetlinkError::TimedOut(self.limits.timeout));
            }
            Err(e) => return Err(NetlinkError::Io(e)),
        };
        if n > self.buf.len() {
            return Err(NetlinkError::Malformed(format!(
                "a datagram of {n} bytes, larger than the {RECV_BUFFER}-byte buffer"
            )));
        }
        self.bytes += n as u64;
        if self.bytes > self.limits.max_bytes {
            return Err(NetlinkError::TooLarge(self.limits.max_bytes));
        }
        Ok(n)
    }
}

/// A netfilter netlink socket whose every receive waits at most the read's timeout, so
/// a kernel that never answers cannot hold the scan past its deadline by more than one
/// wait.
fn open_socket(limits: NetlinkLimits) -> Result<Socket, NetlinkError> {
    let mut socket = Socket::new(NETLINK_NETFILTER).map_err(NetlinkError::Socket)?;
    socket.bind_auto().map_err(NetlinkError::Socket)?;
    rustix::net::sockopt::set_socket_timeout(
        &socket,
        rustix::net::sockopt::Timeout::Recv,
        Some(limits.timeout.max(Duration::from_millis(1))),
    )
    .map_err(|e| NetlinkError::Socket(e.into()))?;
    Ok(socket)
}

#[cfg(test)]
mod tests;
