//! The kernel's answers to the readers' requests, taken apart: each message of a
//! datagram as the end of a dump, an acknowledgement or refusal, or an nf_tables
//! message's attributes; and the generation's and a table's answers read.

use super::{Attrs, DecodeError, NFTA_GEN_ID, NFTA_TABLE_HANDLE, NLM_F_DUMP_INTR, NLMSG_DONE, NLMSG_ERROR};
use super::{be32, be64, nft_attrs, split_message};

/// One message of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply<'a> {
    /// The sequence number of the request it answers.
    pub seq: u32,
    /// The whole message, header included (what a recording keeps).
    pub message: &'a [u8],
    pub body: Body<'a>,
}

/// What a message of an answer says. A part that cannot be read is an error only
/// for the caller that looks at it: a late answer to an abandoned request is skipped
/// unread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body<'a> {
    /// The end of a dump.
    Done,
    /// An acknowledgement (0) or a refusal (a negative errno).
    Error(Result<i32, DecodeError>),
    /// An nf_tables message: its attributes, and whether the kernel marks the dump
    /// interrupted (the ruleset changed under it).
    Message {
        interrupted: bool,
        attrs: Result<&'a [u8], DecodeError>,
    },
}

/// The first message of a datagram, and the rest.
pub fn split_reply(datagram: &[u8]) -> Result<(Reply<'_>, &[u8]), DecodeError> {
    let (header, payload, rest) = split_message(datagram)?;
    let body = match header.kind {
        NLMSG_DONE => Body::Done,
        NLMSG_ERROR => Body::Error(
            payload
                .get(..4)
                .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or_else(|| DecodeError::Malformed("a short error message".into())),
        ),
        _ => Body::Message {
            interrupted: header.flags & NLM_F_DUMP_INTR != 0,
            attrs: nft_attrs(payload),
        },
    };
    let reply = Reply {
        seq: header.seq,
        message: &datagram[..datagram.len() - rest.len()],
        body,
    };
    Ok((reply, rest))
}

/// The id in the answer to [`super::request::generation`].
pub fn generation(attrs: &[u8]) -> Result<Option<u32>, DecodeError> {
    let mut id = None;
    for attr in Attrs::new(attrs) {
        if let (NFTA_GEN_ID, value) = attr? {
            id = Some(be32(value)?);
        }
    }
    Ok(id)
}

/// The handle in the answer to [`super::request::table`].
pub fn table_handle(attrs: &[u8]) -> Result<Option<u64>, DecodeError> {
    let mut handle = None;
    for attr in Attrs::new(attrs) {
        if let (NFTA_TABLE_HANDLE, value) = attr? {
            handle = Some(be64(value)?);
        }
    }
    Ok(handle)
}

#[cfg(test)]
mod tests;
