//! nf_tables netlink messages as bytes → rule text and model values: the message and
//! attribute walking shared by both readers, iptables-nft's tables rendered as
//! `iptables-nft-save` prints them, and kube-proxy's nftables tables as the `nft -j`
//! parser's intermediate form. The sockets that fetch the bytes are the netlink
//! source's; nothing here does I/O.
//!
//! Why hand-written rather than a crate: the nf_tables messages are a fixed header and
//! TLV attributes, a few dozen lines to walk with bounds checks;
//! `netlink-packet-netfilter` models nflog and conntrack but no nf_tables messages,
//! and `nftnl`/`rustables` bind libnftnl (C) for building rules and would still leave
//! expressions to decode. Every byte is read with checked slicing, so a malformed
//! message is an error, never a panic.

pub(crate) mod attrs;
pub mod changes;
pub mod iptables;
pub(crate) mod message;
pub mod nftables;
pub mod reply;
pub mod request;

pub(crate) use attrs::{
    Attrs, ExprAttrs, align4, attr_map, be32, be64, data_value, expressions, name, prefix_len, read_verdict,
};
pub(crate) use message::messages;
pub(crate) use message::{nft_attrs, split_message};

/// Why messages could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("malformed netlink message: {0}")]
    Malformed(String),
    /// A rule this decoder does not print (the caller reads it with the dump tool).
    #[error("{0}")]
    Unsupported(String),
}

// linux/netlink.h
pub(crate) const NLMSG_HDRLEN: usize = 16;
pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
pub(crate) const NLM_F_REQUEST: u16 = 1;
pub(crate) const NLM_F_ACK: u16 = 4;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
pub(crate) const NLM_F_DUMP_INTR: u16 = 0x10;
pub(crate) const NLA_TYPE_MASK: u16 = 0x3fff;
/// Marks a nested attribute (linux/netlink.h), as libnftnl sets it.
pub(crate) const NLA_F_NESTED: u16 = 0x8000;
// linux/netfilter/nfnetlink.h, linux/netfilter.h
pub(crate) const NFNL_SUBSYS_NFTABLES: u16 = 10;
pub(crate) const NFGENMSG_LEN: usize = 4;
pub(crate) const NFPROTO_IPV4: u8 = 2;
pub(crate) const NFPROTO_IPV6: u8 = 10;

/// A family's `NFPROTO_*` number.
pub fn nfproto(family: crate::heart::model::Family) -> u8 {
    match family {
        crate::heart::model::Family::Ipv4 => NFPROTO_IPV4,
        crate::heart::model::Family::Ipv6 => NFPROTO_IPV6,
    }
}
// linux/netfilter/nf_tables.h: requests, and the messages that answer them
pub(crate) const NFT_MSG_NEWTABLE: u8 = 0;
pub(crate) const NFT_MSG_GETTABLE: u8 = 1;
pub(crate) const NFT_MSG_NEWCHAIN: u8 = 3;
pub(crate) const NFT_MSG_GETCHAIN: u8 = 4;
pub(crate) const NFT_MSG_NEWRULE: u8 = 6;
pub(crate) const NFT_MSG_GETRULE: u8 = 7;
pub(crate) const NFT_MSG_NEWSET: u8 = 9;
pub(crate) const NFT_MSG_GETSET: u8 = 10;
pub(crate) const NFT_MSG_NEWSETELEM: u8 = 12;
pub(crate) const NFT_MSG_GETSETELEM: u8 = 13;
pub(crate) const NFT_MSG_GETGEN: u8 = 16;
pub(crate) const NFTA_GEN_ID: u16 = 1;
pub(crate) const NFTA_TABLE_NAME: u16 = 1;
pub(crate) const NFTA_TABLE_HANDLE: u16 = 4;
pub(crate) const NFTA_CHAIN_TABLE: u16 = 1;
pub(crate) const NFTA_CHAIN_NAME: u16 = 3;
pub(crate) const NFTA_RULE_TABLE: u16 = 1;
pub(crate) const NFTA_RULE_CHAIN: u16 = 2;
pub(crate) const NFTA_RULE_HANDLE: u16 = 3;
pub(crate) const NFTA_RULE_EXPRESSIONS: u16 = 4;
pub(crate) const NFTA_RULE_USERDATA: u16 = 7;
pub(crate) const NFTA_SET_TABLE: u16 = 1;
pub(crate) const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
pub(crate) const NFTA_SET_ELEM_LIST_SET: u16 = 2;
pub(crate) const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
pub(crate) const NFTA_SET_ELEM_KEY: u16 = 1;
pub(crate) const NFTA_DATA_VALUE: u16 = 1;
pub(crate) const NFTA_DATA_VERDICT: u16 = 2;
pub(crate) const NFTA_VERDICT_CODE: u16 = 1;
pub(crate) const NFTA_VERDICT_CHAIN: u16 = 2;
pub(crate) const NFTA_LIST_ELEM: u16 = 1;
