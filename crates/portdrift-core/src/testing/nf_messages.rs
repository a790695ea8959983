//! nf_tables messages as the kernel multicasts them, built for the tests of what decodes
//! and journals them.

use crate::decode::netlink::request::push_attr;

/// `NFT_MSG_NEWRULE` and friends, as `decode::netlink::changes` names them.
pub const NEWRULE: u8 = 6;
pub const NEWGEN: u8 = 15;

/// One message: header (nfnetlink subsystem nf_tables), nfgenmsg, attributes.
pub fn message(kind: u8, family: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut buf = Vec::new();
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&((10u16 << 8) | u16::from(kind)).to_ne_bytes());
    buf.extend_from_slice(&0u16.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&[family, 0, 0, 0]);
    for (kind, value) in attrs {
        push_attr(&mut buf, *kind, value);
    }
    let total = u32::try_from(buf.len()).expect("a short message");
    buf[..4].copy_from_slice(&total.to_ne_bytes());
    buf
}

/// A NUL-terminated attribute value.
pub fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// A rule message (`kind`: NEWRULE or DELRULE) naming its table and chain.
pub fn rule(kind: u8, family: u8, table: &str, chain: &str) -> Vec<u8> {
    message(kind, family, &[(1, &cstr(table)), (2, &cstr(chain))])
}

/// The message that closes a commit: the ruleset's new generation.
pub fn new_generation(generation: u32) -> Vec<u8> {
    message(NEWGEN, 0, &[(1, &generation.to_be_bytes())])
}
