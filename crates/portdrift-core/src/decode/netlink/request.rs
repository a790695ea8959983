//! The nf_tables requests the readers send, as bytes: built here, next to the
//! constants they are made of, so that the transport sends them without naming a
//! message type or an attribute.

use super::{
    NFNL_SUBSYS_NFTABLES, NFT_MSG_GETCHAIN, NFT_MSG_GETGEN, NFT_MSG_GETRULE, NFT_MSG_GETSET,
    NFT_MSG_GETSETELEM, NFT_MSG_GETTABLE, NFTA_DATA_VALUE, NFTA_LIST_ELEM, NFTA_RULE_CHAIN, NFTA_RULE_TABLE,
    NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_LIST_ELEMENTS, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_TABLE,
    NFTA_SET_TABLE, NFTA_TABLE_NAME, NLA_F_NESTED, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, align4, nfproto,
};
use crate::heart::model::Family;

/// How the kernel answers a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A dump: messages until `NLMSG_DONE`.
    Dump,
    /// One message (or a refusal).
    One,
    /// Messages until the acknowledgement the request asked for.
    UntilAck,
}

/// One nf_tables request, whole but for its sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    message: u8,
    family: u8,
    answer: Answer,
    /// The attributes, encoded.
    attrs: Vec<u8>,
}

impl Request {
    fn new(message: u8, family: Option<Family>, answer: Answer) -> Self {
        Request {
            message,
            family: family.map_or(0, nfproto),
            answer,
            attrs: Vec::new(),
        }
    }

    fn attr(mut self, kind: u16, value: &[u8]) -> Self {
        push_attr(&mut self.attrs, kind, value);
        self
    }

    /// A name attribute: the kernel reads names NUL-terminated.
    fn name(self, kind: u16, name: &str) -> Self {
        let mut value = Vec::with_capacity(name.len() + 1);
        value.extend_from_slice(name.as_bytes());
        value.push(0);
        self.attr(kind, &value)
    }

    /// How the kernel answers it.
    pub fn answer(&self) -> Answer {
        self.answer
    }

    /// The message as sent, with its sequence number.
    pub fn encode(&self, seq: u32) -> Vec<u8> {
        let flags = NLM_F_REQUEST
            | match self.answer {
                Answer::Dump => NLM_F_DUMP,
                Answer::One => 0,
                Answer::UntilAck => NLM_F_ACK,
            };
        let mut buf = Vec::with_capacity(20 + self.attrs.len());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // the length, set below
        buf.extend_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | u16::from(self.message)).to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
        buf.extend_from_slice(&[self.family, 0, 0, 0]); // nfgenmsg: family, version 0, res_id
        buf.extend_from_slice(&self.attrs);
        let total = buf.len() as u32;
        buf[..4].copy_from_slice(&total.to_ne_bytes());
        buf
    }
}

/// The ruleset's generation (read it with [`super::reply::generation`]).
pub fn generation() -> Request {
    Request::new(NFT_MSG_GETGEN, None, Answer::One)
}

/// One table, by name: refused (ENOENT) when it does not exist; read its handle with
/// [`super::reply::table_handle`].
pub fn table(family: Family, name: &str) -> Request {
    Request::new(NFT_MSG_GETTABLE, Some(family), Answer::One).name(NFTA_TABLE_NAME, name)
}

/// Every chain of the family: the kernel filters chain dumps by family only.
pub fn chains(family: Family) -> Request {
    Request::new(NFT_MSG_GETCHAIN, Some(family), Answer::Dump)
}

/// The rules of one chain.
pub fn rules(family: Family, table: &str, chain: &str) -> Request {
    Request::new(NFT_MSG_GETRULE, Some(family), Answer::Dump)
        .name(NFTA_RULE_TABLE, table)
        .name(NFTA_RULE_CHAIN, chain)
}

/// The sets and maps of one table.
pub fn sets(family: Family, table: &str) -> Request {
    Request::new(NFT_MSG_GETSET, Some(family), Answer::Dump).name(NFTA_SET_TABLE, table)
}

/// Every element of one set.
pub fn set_elements(family: Family, table: &str, set: &str) -> Request {
    Request::new(NFT_MSG_GETSETELEM, Some(family), Answer::Dump)
        .name(NFTA_SET_ELEM_LIST_TABLE, table)
        .name(NFTA_SET_ELEM_LIST_SET, set)
}

/// The elements with 32-bit keys 0 to `keys` - 1 of one map, asked for in one message:
/// refused (ENOENT) when one of them is missing.
pub fn set_elements_by_key(family: Family, table: &str, set: &str, keys: u32) -> Request {
    let mut list = Vec::with_capacity(keys as usize * 16);
    let (mut value, mut key) = (Vec::with_capacity(8), Vec::with_capacity(12));
    for k in 0..keys {
        value.clear();
        key.clear();
        // numgen leaves its number in the register in host order, and the map's keys
        // are the register's bytes.
        push_attr(&mut value, NFTA_DATA_VALUE, &k.to_ne_bytes());
        push_attr(&mut key, NFTA_SET_ELEM_KEY | NLA_F_NESTED, &value);
        push_attr(&mut list, NFTA_LIST_ELEM | NLA_F_NESTED, &key);
    }
    Request::new(NFT_MSG_GETSETELEM, Some(family), Answer::UntilAck)
        .name(NFTA_SET_ELEM_LIST_TABLE, table)
        .name(NFTA_SET_ELEM_LIST_SET, set)
        .attr(NFTA_SET_ELEM_LIST_ELEMENTS | NLA_F_NESTED, &list)
}

/// One attribute as the kernel reads it: length, type, value, padded to four bytes.
pub(crate) fn push_attr(buf: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = 4 + value.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(value);
    buf.resize(buf.len() + (align4(len) - len), 0);
}

#[cfg(test)]
mod tests;
