//! Netlink message headers: one message split off a datagram, and the messages of a
//! recorded sequence.

use super::{DecodeError, NFGENMSG_LEN, NFNL_SUBSYS_NFTABLES, NLMSG_HDRLEN, align4};

/// A message's header fields that matter here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
}

impl Header {
    /// The nf_tables message type (`NFT_MSG_*`); None for another subsystem's message.
    pub fn nft_message(&self) -> Option<u8> {
        (self.kind >> 8 == NFNL_SUBSYS_NFTABLES).then_some((self.kind & 0xff) as u8)
    }
}

/// The first message of a datagram: its header, its payload, and the rest.
pub(crate) fn split_message(data: &[u8]) -> Result<(Header, &[u8], &[u8]), DecodeError> {
    let short = || DecodeError::Malformed(format!("a message header cut short ({} bytes)", data.len()));
    let head = data.get(..NLMSG_HDRLEN).ok_or_else(short)?;
    let len = u32::from_ne_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len < NLMSG_HDRLEN || len > data.len() {
        return Err(DecodeError::Malformed(format!(
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

/// The attributes of an nf_tables message's payload (past its `nfgenmsg`).
pub(crate) fn nft_attrs(payload: &[u8]) -> Result<&[u8], DecodeError> {
    payload
        .get(NFGENMSG_LEN..)
        .ok_or_else(|| DecodeError::Malformed("a message shorter than its header".into()))
}

/// One nf_tables message of a recorded sequence.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// Its type (`NFT_MSG_*`).
    pub kind: u8,
    /// Its `nfgenmsg` family (`NFPROTO_*`).
    pub family: u8,
    pub attrs: &'a [u8],
}

/// The nf_tables messages of a recorded sequence, in order.
pub fn messages(data: &[u8]) -> impl Iterator<Item = Result<Message<'_>, DecodeError>> {
    let mut rest = data;
    std::iter::from_fn(move || {
        while !rest.is_empty() {
            let (header, payload, next) = match split_message(rest) {
                Ok(split) => split,
                Err(e) => {
                    rest = &[];
                    return Some(Err(e));
                }
            };
            rest = next;
            if let Some(kind) = header.nft_message() {
                return Some(nft_attrs(payload).map(|attrs| Message {
                    kind,
                    family: payload[0],
                    attrs,
                }));
            }
        }
        None
    })
}
