//! Keys, values and verdicts as nft's JSON gives them, from the bytes the kernel holds.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::sets::{ElementData, RawElement, SetInfo};
use crate::decode::netlink::align4;
use crate::decode::nftables::json::{Expr, render_expr_string};
use crate::decode::nftables::{ElementIr, ElementVerdict};

// nft's data types (nftables' datatype.h), as the kernel stores them in a set's key type.
pub(crate) const TYPE_INTEGER: u32 = 4;
pub(crate) const TYPE_IPADDR: u32 = 7;
pub(crate) const TYPE_IP6ADDR: u32 = 8;
pub(crate) const TYPE_INET_PROTOCOL: u32 = 12;
pub(crate) const TYPE_INET_SERVICE: u32 = 13;
pub(crate) const TYPE_MARK: u32 = 19;
/// A concatenation's key type holds its parts' types, 6 bits each, first part highest.
pub(crate) const TYPE_BITS: u32 = 6;

/// The parts of a key type, first to last, each with its size in bytes (None: unknown).
fn key_parts(set: &SetInfo) -> Vec<(u32, Option<usize>)> {
    let mut types = Vec::new();
    let mut t = set.key_type;
    while t != 0 {
        types.push(t & ((1 << TYPE_BITS) - 1));
        t >>= TYPE_BITS;
    }
    types.reverse();
    let single = types.len() == 1;
    types
        .into_iter()
        .map(|t| {
            let size = match t {
                TYPE_INET_PROTOCOL => Some(1),
                TYPE_INET_SERVICE => Some(2),
                TYPE_IPADDR | TYPE_MARK => Some(4),
                TYPE_IP6ADDR => Some(16),
                _ if single => usize::try_from(set.key_len).ok(),
                _ => None,
            };
            (t, size)
        })
        .collect()
}

/// A key split into its typed parts (a concatenation pads every part to 4 bytes); None
/// when the type is not one portdrift knows.
fn split_key<'k>(set: &SetInfo, key: &'k [u8]) -> Option<Vec<(u32, &'k [u8])>> {
    let parts = key_parts(set);
    let concat = parts.len() > 1;
    let mut at = 0;
    let mut out = Vec::with_capacity(parts.len());
    for (kind, size) in parts {
        let size = size?;
        out.push((kind, key.get(at..at + size)?));
        at += if concat { align4(size) } else { size };
    }
    (!out.is_empty()).then_some(out)
}

/// nft lists a set's elements sorted by key, the key's raw bytes read as one integer
/// in host byte order (its `mpz` import): on a little-endian host the last byte counts
/// most. (So `tcp . 30080` comes before `tcp . 3001`: the port's low byte decides.)
pub(crate) fn compare_keys(a: &[u8], b: &[u8]) -> Ordering {
    let by_size = a.len().cmp(&b.len());
    if by_size.is_ne() {
        return by_size;
    }
    if cfg!(target_endian = "little") {
        a.iter().rev().cmp(b.iter().rev())
    } else {
        a.cmp(b)
    }
}

fn host_u32(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.try_into().ok()?))
}

/// IP protocol names as nft prints them.
fn protocol_name(number: u8) -> Option<&'static str> {
    Some(match number {
        1 => "icmp",
        2 => "igmp",
        6 => "tcp",
        17 => "udp",
        33 => "dccp",
        47 => "gre",
        50 => "esp",
        51 => "ah",
        58 => "ipv6-icmp",
        132 => "sctp",
        136 => "udplite",
        _ => return None,
    })
}

/// One typed value as nft's JSON gives it.
pub(crate) fn typed_value(kind: u32, bytes: &[u8]) -> Expr<'static> {
    match (kind, bytes) {
        (TYPE_INET_PROTOCOL, [p]) => match protocol_name(*p) {
            Some(name) => Expr::Str(Cow::Borrowed(name)),
            None => Expr::Uint(u64::from(*p)),
        },
        (TYPE_INET_SERVICE, [hi, lo]) => Expr::Uint(u64::from(u16::from_be_bytes([*hi, *lo]))),
        (TYPE_IPADDR, &[a, b, c, d]) => Expr::Str(Cow::Owned(Ipv4Addr::new(a, b, c, d).to_string())),
        (TYPE_IP6ADDR, _) => match <[u8; 16]>::try_from(bytes) {
            Ok(b) => Expr::Str(Cow::Owned(Ipv6Addr::from(b).to_string())),
            Err(_) => hex(bytes),
        },
        (TYPE_INTEGER | TYPE_MARK, _) => match host_u32(bytes) {
            Some(n) => Expr::Uint(u64::from(n)),
            None => hex(bytes),
        },
        _ => hex(bytes),
    }
}

pub(crate) fn hex(bytes: &[u8]) -> Expr<'static> {
    let mut text = String::from("0x");
    for b in bytes {
        text.push_str(&format!("{b:02x}"));
    }
    Expr::Str(Cow::Owned(text))
}

/// A key as nft's JSON gives it: one value, or `{"concat": [...]}`.
pub(crate) fn key_expr(set: &SetInfo, key: &[u8]) -> Expr<'static> {
    match split_key(set, key) {
        Some(parts) if parts.len() == 1 => typed_value(parts[0].0, parts[0].1),
        Some(parts) => object(
            "concat",
            Expr::List(parts.iter().map(|&(kind, b)| typed_value(kind, b)).collect()),
        ),
        None => hex(key),
    }
}

pub(crate) fn verdict_expr(data: &ElementData) -> Expr<'static> {
    match data {
        ElementData::Verdict { code, chain } => verdict_statement(*code, chain.as_deref()),
        ElementData::Value(v) => hex(v),
        ElementData::None => Expr::Null,
    }
}

/// A verdict as nft's JSON statement: `{"goto": {"target": "x"}}`, `{"drop": null}`.
pub(crate) fn verdict_statement(code: i32, chain: Option<&str>) -> Expr<'static> {
    let target = |kind: &'static str| {
        object(
            kind,
            fields(vec![(
                "target",
                Expr::Str(Cow::Owned(chain.unwrap_or_default().to_string())),
            )]),
        )
    };
    match code {
        0 => object("drop", Expr::Null),
        1 => object("accept", Expr::Null),
        -1 => object("continue", Expr::Null),
        -3 => target("jump"),
        -4 => target("goto"),
        -5 => object("return", Expr::Null),
        other => object("verdict", Expr::Int(i64::from(other))),
    }
}

pub(crate) fn element_ir(set: &SetInfo, element: RawElement) -> ElementIr<'static> {
    let verdict = match &element.data {
        ElementData::Verdict {
            code: -4,
            chain: Some(c),
        } => ElementVerdict::Goto(Cow::Owned(c.to_string())),
        ElementData::Verdict {
            code: -3,
            chain: Some(c),
        } => ElementVerdict::Jump(Cow::Owned(c.to_string())),
        ElementData::Verdict { code: 0, .. } => ElementVerdict::Drop,
        ElementData::Verdict { code: 1, .. } => ElementVerdict::Accept,
        other => ElementVerdict::Other(render_expr_string(&verdict_expr(other))),
    };
    ElementIr {
        key: render_expr_string(&key_expr(set, &element.key)),
        comment: element.comment.map(Cow::Owned),
        verdict,
        line: 0,
    }
}

pub(crate) fn object(kind: &'static str, body: Expr<'static>) -> Expr<'static> {
    Expr::Object(vec![(Cow::Borrowed(kind), body)])
}

pub(crate) fn fields(pairs: Vec<(&'static str, Expr<'static>)>) -> Expr<'static> {
    Expr::Object(pairs.into_iter().map(|(k, v)| (Cow::Borrowed(k), v)).collect())
}
