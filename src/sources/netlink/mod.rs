//! The nfnetlink transport shared by the readers of nf_tables over netlink (kube-proxy's
//! nftables tables, iptables-nft's tables): one socket, requests, dumps read one
//! datagram at a time within a deadline and a byte budget, and bounds-checked
//! attribute walking.
//!
//! Why hand-written over `netlink-sys` rather than a crate: the nf_tables messages are
//! a fixed 20-byte header and TLV attributes, a few dozen lines to walk with bounds
//! checks; `netlink-packet-netfilter` models nflog and conntrack but no nf_tables
//! messages, and `nftnl`/`rustables` bind libnftnl (C) for building rules and would
//! still leave expressions to decode. `netlink-sys` (already here for the change
//! notifications) gives the socket; every byte is read with checked slicing, so a
//! malformed message is an error, never a panic.

use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};

use netlink_sys::Socket;
use netlink_sys::protocols::NETLINK_NETFILTER;

pub(crate) mod blocks;
pub mod iptables;
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

/// Bounds on one read of both tables.
#[derive(Debug, Clone, Copy)]
pub struct NetlinkLimits {
    pub timeout: Duration,
    pub max_bytes: u64,
}

// linux/netlink.h
// linux/netlink.h
pub(crate) const NLMSG_HDRLEN: usize = 16;
pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
pub(crate) const NLM_F_REQUEST: u16 = 1;
pub(crate) const NLM_F_ACK: u16 = 4;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
pub(crate) const NLM_F_DUMP_INTR: u16 = 0x10;
pub(crate) const NLA_TYPE_MASK: u16 = 0x3fff;
// linux/netfilter/nfnetlink.h, linux/netfilter.h
pub(crate) const NFNL_SUBSYS_NFTABLES: u16 = 10;
pub(crate) const NFGENMSG_LEN: usize = 4;
pub(crate) const NFPROTO_IPV4: u8 = 2;
pub(crate) const NFPROTO_IPV6: u8 = 10;
pub(crate) const NFT_MSG_GETGEN: u8 = 16;
const NFTA_GEN_ID: u16 = 1;
pub(crate) const NFTA_DATA_VALUE: u16 = 1;
pub(crate) const NFTA_DATA_VERDICT: u16 = 2;
pub(crate) const NFTA_VERDICT_CODE: u16 = 1;
pub(crate) const NFTA_VERDICT_CHAIN: u16 = 2;
pub(crate) const NFTA_LIST_ELEM: u16 = 1;
/// Marks a nested attribute (linux/netlink.h), as libnftnl sets it.
pub(crate) const NLA_F_NESTED: u16 = 0x8000;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;

/// Larger than any datagram the kernel sends for a dump (at most 32 KiB).
pub(crate) const RECV_BUFFER: usize = 64 << 10;

pub(crate) struct Conn {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
    pub(crate) bytes: u64,
    limits: NetlinkLimits,
    deadline: Instant,
}

impl Conn {
    pub(crate) fn open(limits: NetlinkLimits, deadline: Instant) -> Result<Conn, NetlinkError> {
        let mut socket = Socket::new(NETLINK_NETFILTER).map_err(NetlinkError::Socket)?;
        socket.bind_auto().map_err(NetlinkError::Socket)?;
        // Each receive waits at most this long, so a kernel that never answers cannot
        // hold the scan past its deadline by more than one wait.
        rustix::net::sockopt::set_socket_timeout(
            &socket,
            rustix::net::sockopt::Timeout::Recv,
            Some(limits.timeout.max(Duration::from_millis(1))),
        )
        .map_err(|e| NetlinkError::Socket(e.into()))?;
        Ok(Conn {
            socket,
            seq: 0,
            buf: vec![0; RECV_BUFFER],
            bytes: 0,
            limits,
            deadline,
        })
    }

    /// The ruleset's generation: it moves with every committed change.
    pub(crate) fn generation(&mut self) -> Result<u32, NetlinkError> {
        let mut id = None;
        self.exchange("the generation", NFT_MSG_GETGEN, false, 0, &[], |attrs| {
            for attr in Attrs::new(attrs) {
                let (kind, value) = attr?;
                if kind == NFTA_GEN_ID {
                    id = Some(be32(value)?);
                }
            }
            Ok(())
        })?;
        id.ok_or_else(|| NetlinkError::Malformed("a generation message without an id".into()))
    }

    /// Sends one request and hands the attributes of every answer to `each`, until the
    /// end of the dump (or the single answer of a plain request).
    pub(crate) fn exchange(
        &mut self,
        what: &'static str,
        message: u8,
        dump: bool,
        family: u8,
        attrs: &[(u16, &[u8])],
        each: impl FnMut(&[u8]) -> Result<(), NetlinkError>,
    ) -> Result<(), NetlinkError> {
        let answer = if dump { Answer::Dump } else { Answer::One };
        self.request(what, message, answer, family, attrs, each)
    }

    /// Sends a plain request that the kernel answers with any number of messages, and
    /// hands each to `each` until the kernel's acknowledgement closes the answer (a
    /// refusal ends it as an error, after the messages sent before it).
    pub(crate) fn exchange_acked(
        &mut self,
        what: &'static str,
        message: u8,
        family: u8,
        attrs: &[(u16, &[u8])],
        each: impl FnMut(&[u8]) -> Result<(), NetlinkError>,
    ) -> Result<(), NetlinkError> {
        self.request(what, message, Answer::UntilAck, family, attrs, each)
    }

    fn request(
        &mut self,
        what: &'static str,
        message: u8,
        answer: Answer,
        family: u8,
        attrs: &[(u16, &[u8])],
        mut each: impl FnMut(&[u8]) -> Result<(), NetlinkError>,
    ) -> Result<(), NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let flags = NLM_F_REQUEST
            | match answer {
                Answer::Dump => NLM_F_DUMP,
                Answer::One => 0,
                Answer::UntilAck => NLM_F_ACK,
            };
        let request = encode_request(message, flags, family, self.seq, attrs);
        self.socket.send(&request, 0).map_err(NetlinkError::Io)?;
        loop {
            let n = self.receive()?;
            let mut datagram = &self.buf[..n];
            while !datagram.is_empty() {
                let (header, payload, rest) = split_message(datagram)?;
                datagram = rest;
                if header.seq != self.seq {
                    continue; // A late answer to an earlier, abandoned request.
                }
                match header.kind {
                    NLMSG_DONE => return Ok(()),
                    NLMSG_ERROR => {
                        let code = payload
                            .get(..4)
                            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                            .ok_or_else(|| NetlinkError::Malformed("a short error message".into()))?;
                        if code == 0 {
                            return Ok(());
                        }
                        return Err(NetlinkError::Refused {
                            what,
                            source: io::Error::from_raw_os_error(code.saturating_neg()),
                        });
                    }
                    _ => {}
                }
                if header.flags & NLM_F_DUMP_INTR != 0 {
                    return Err(NetlinkError::Unstable(1));
                }
                let attrs = payload
                    .get(NFGENMSG_LEN..)
                    .ok_or_else(|| NetlinkError::Malformed("a message shorter than its header".into()))?;
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

/// How the kernel answers a request.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// A dump: messages until `NLMSG_DONE`.
    Dump,
    /// One message (or a refusal).
    One,
    /// Messages until the acknowledgement the request asked for.
    UntilAck,
}

/// One attribute as the kernel reads it: length, type, value, padded to four bytes.
pub(crate) fn push_attr(buf: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = 4 + value.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(value);
    buf.resize(buf.len() + (align4(len) - len), 0);
}

pub(crate) fn encode_request(
    message: u8,
    flags: u16,
    family: u8,
    seq: u32,
    attrs: &[(u16, &[u8])],
) -> Vec<u8> {
    let mut buf = Vec::with_capacity(64);
    buf.extend_from_slice(&0u32.to_ne_bytes()); // the length, set below
    buf.extend_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | u16::from(message)).to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
    buf.extend_from_slice(&[family, 0, 0, 0]); // nfgenmsg: family, version 0, res_id
    for (kind, value) in attrs {
        push_attr(&mut buf, *kind, value);
    }
    let total = buf.len() as u32;
    buf[..4].copy_from_slice(&total.to_ne_bytes());
    buf
}

pub(crate) fn align4(n: usize) -> usize {
    (n + 3) & !3
}

pub(crate) struct Header {
    pub(crate) kind: u16,
    pub(crate) flags: u16,
    pub(crate) seq: u32,
}

/// The first message of a datagram: its header, its payload, and the rest.
pub(crate) fn split_message(data: &[u8]) -> Result<(Header, &[u8], &[u8]), NetlinkError> {
    let short = || NetlinkError::Malformed(format!("a message header cut short ({} bytes)", data.len()));
    let head = data.get(..NLMSG_HDRLEN).ok_or_else(short)?;
    let len = u32::from_ne_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len < NLMSG_HDRLEN || len > data.len() {
        return Err(NetlinkError::Malformed(format!(
            "a message length of {len} in a {}-byte datagram",
            data.len()
        )));
    }
    let header = Header {
        kind: u16::from_ne_bytes([head[4], head[5]]),
        flags: u16::from_ne_bytes([head[6], head[7]]),
        seq: u32::from_ne_bytes([head[8], head[9], head[10], head[11]]),
    };
    let rest = data.get(align4(len)..).unwrap_or_default();
    Ok((header, &data[NLMSG_HDRLEN..len], rest))
}

// ------------------------------------------------------------------ attributes

/// The attributes in a buffer, as (type, value); a malformed one ends the walk with
/// an error.
pub(crate) struct Attrs<'b> {
    data: &'b [u8],
}

impl<'b> Attrs<'b> {
    pub(crate) fn new(data: &'b [u8]) -> Self {
        Attrs { data }
    }
}

impl<'b> Iterator for Attrs<'b> {
    type Item = Result<(u16, &'b [u8]), NetlinkError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.data.is_empty() {
            return None;
        }
        let data = std::mem::take(&mut self.data);
        let Some(head) = data.get(..4) else {
            return Some(Err(NetlinkError::Malformed(
                "an attribute header cut short".into(),
            )));
        };
        let len = usize::from(u16::from_ne_bytes([head[0], head[1]]));
        if len < 4 || len > data.len() {
            return Some(Err(NetlinkError::Malformed(format!(
                "an attribute length of {len} with {} bytes left",
                data.len()
            ))));
        }
        let kind = u16::from_ne_bytes([head[2], head[3]]) & NLA_TYPE_MASK;
        self.data = data.get(align4(len)..).unwrap_or_default();
        Some(Ok((kind, &data[4..len])))
    }
}

pub(crate) fn be32(value: &[u8]) -> Result<u32, NetlinkError> {
    value
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| NetlinkError::Malformed("a 32-bit attribute cut short".into()))
}

pub(crate) fn be64(value: &[u8]) -> Result<u64, NetlinkError> {
    let b: [u8; 8] = value
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| NetlinkError::Malformed("a 64-bit attribute cut short".into()))?;
    Ok(u64::from_be_bytes(b))
}

/// A NUL-terminated name.
pub(crate) fn name(value: &[u8]) -> Result<&str, NetlinkError> {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    std::str::from_utf8(&value[..end]).map_err(|_| NetlinkError::Malformed("a name that is not UTF-8".into()))
}

/// The bytes of an `NFTA_DATA_VALUE`.
pub(crate) fn data_value(nested: &[u8]) -> Result<&[u8], NetlinkError> {
    for attr in Attrs::new(nested) {
        if let (NFTA_DATA_VALUE, value) = attr? {
            return Ok(value);
        }
    }
    Err(NetlinkError::Malformed("data without a value".into()))
}

pub(crate) fn read_verdict(nested: &[u8]) -> Result<(i32, Option<String>), NetlinkError> {
    let mut code = None;
    let mut chain = None;
    for attr in Attrs::new(nested) {
        match attr? {
            (NFTA_VERDICT_CODE, v) => code = Some(be32(v)? as i32),
            (NFTA_VERDICT_CHAIN, v) => chain = Some(name(v)?.to_string()),
            _ => {}
        }
    }
    let code = code.ok_or_else(|| NetlinkError::Malformed("a verdict without a code".into()))?;
    Ok((code, chain))
}

/// An expression's attributes by type (each appears once).
pub(crate) fn attr_map(data: &[u8]) -> Result<HashMap<u16, &[u8]>, NetlinkError> {
    Attrs::new(data).collect()
}

/// A rule's expressions (`NFTA_RULE_EXPRESSIONS`), each as its name and its data.
pub(crate) fn expressions(list: &[u8]) -> impl Iterator<Item = Result<(&str, &[u8]), NetlinkError>> {
    Attrs::new(list).filter_map(|item| {
        let (kind, element) = match item {
            Ok(item) => item,
            Err(e) => return Some(Err(e)),
        };
        if kind != NFTA_LIST_ELEM {
            return None;
        }
        let mut expr_name = "";
        let mut data: &[u8] = &[];
        for attr in Attrs::new(element) {
            match attr {
                Ok((NFTA_EXPR_NAME, v)) => match name(v) {
                    Ok(n) => expr_name = n,
                    Err(e) => return Some(Err(e)),
                },
                Ok((NFTA_EXPR_DATA, v)) => data = v,
                Ok(_) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok((expr_name, data)))
    })
}

/// The length of the prefix a mask keeps (its leading one bits); None when its ones are
/// not all leading.
pub(crate) fn prefix_len(mask: &[u8]) -> Option<u32> {
    let mut ones = 0;
    let mut seen_zero = false;
    for bit in mask
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1 == 1))
    {
        match (bit, seen_zero) {
            (true, true) => return None,
            (true, false) => ones += 1,
            (false, _) => seen_zero = true,
        }
    }
    Some(ones)
}

#[cfg(test)]
mod tests;
