//! Set and map elements, and the scalar values rules compare against: typed by the
//! set's declared `type` (or, in a rule, by the fields its key reads), since the
//! same JSON number is a port in one position and a mark in another.

use std::net::IpAddr;

use crate::decode::nftables::json::{Expr, render_expr_string};
use crate::heart::explain::model::{Action, Element, Field, KeyPart, Net, Set};
use crate::heart::model::Protocol;

/// More elements than this from one element's address ranges is read as unknown
/// rather than spelled out.
const MAX_EXPANSION: usize = 1024;

/// What one component of a key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyType {
    Addr,
    Port,
    Proto,
    AddrType,
    Text,
    Int,
    /// A declared type this reader does not interpret.
    Other,
    /// No declared type: read from the value's own form.
    Infer,
}

impl KeyType {
    fn of_name(name: &str) -> KeyType {
        match name {
            "ipv4_addr" | "ipv6_addr" => KeyType::Addr,
            "inet_service" => KeyType::Port,
            "inet_proto" => KeyType::Proto,
            "fib_addrtype" => KeyType::AddrType,
            "ifname" => KeyType::Text,
            "mark" | "integer" => KeyType::Int,
            _ => KeyType::Other,
        }
    }

    pub(super) fn of_field(field: Field) -> KeyType {
        match field {
            Field::Addr(_) => KeyType::Addr,
            Field::Port(_) => KeyType::Port,
            Field::L4Proto => KeyType::Proto,
            Field::AddrType(_) => KeyType::AddrType,
            Field::InInterface => KeyType::Text,
            Field::Mark => KeyType::Int,
        }
    }
}

/// What a map's elements carry besides their key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Data {
    /// A set: keys only.
    None,
    Verdict,
    /// Addresses, marks, …: kept in the element's text only.
    Value,
}

/// A named set or map object (`{"set": {...}}` / `{"map": {...}}`) with the elements of
/// any `element` objects for it.
pub(super) fn lower_set(body: &Expr<'_>, is_map: bool, extra: &[&Expr<'_>]) -> Set {
    let name = body
        .get("name")
        .and_then(Expr::as_str)
        .unwrap_or_default()
        .to_string();
    let types: Vec<KeyType> = match body.get("type") {
        Some(Expr::Str(t)) => vec![KeyType::of_name(t)],
        Some(Expr::List(ts)) => ts
            .iter()
            .map(|t| t.as_str().map_or(KeyType::Other, KeyType::of_name))
            .collect(),
        _ => Vec::new(),
    };
    let data = match (is_map, body.get("map").and_then(Expr::as_str)) {
        (false, _) => Data::None,
        (true, Some("verdict")) => Data::Verdict,
        (true, _) => Data::Value,
    };
    let mut elements = Vec::new();
    let lists = std::iter::once(body.get("elem")).chain(extra.iter().map(|e| e.get("elem")));
    for list in lists.flatten() {
        for item in list.as_list().unwrap_or(std::slice::from_ref(list)) {
            elements.extend(parse_element(item, &types, data, 0));
        }
    }
    Set { name, elements }
}

/// One element: `[key, data]` in a map, the key alone in a set. `offset` is taken off
/// integer keys (a numgen's offset). An address range that is not one prefix becomes
/// one element per prefix, so that every element's key is exact.
pub(super) fn parse_element(item: &Expr<'_>, types: &[KeyType], data: Data, offset: u64) -> Vec<Element> {
    let (key, value) = match (data, item.as_list()) {
        (Data::None, _) => (item, None),
        (_, Some([key, value])) => (key, Some(value)),
        (_, _) => (item, None),
    };
    let (val, comment) = match key.single() {
        Some(("elem", body)) => (
            body.get("val").unwrap_or(body),
            body.get("comment").and_then(Expr::as_str),
        ),
        _ => (key, None),
    };
    let mut text = render_expr_string(val);
    if let Some(comment) = comment {
        text.push_str(&format!(" comment \"{comment}\""));
    }
    if let Some(value) = value {
        text.push_str(" : ");
        text.push_str(&render_expr_string(value));
    }
    let action = match (data, value) {
        (Data::Verdict, Some(value)) => Some(verdict(value)),
        (Data::Verdict, None) => Some(Action::Unknown(text.clone())),
        _ => None,
    };
    let parts: Vec<&Expr<'_>> = match val.single() {
        Some(("concat", Expr::List(parts))) => parts.iter().collect(),
        _ => vec![val],
    };
    let fits = types.is_empty() || types.len() == parts.len();
    let alternatives: Vec<Vec<KeyPart>> = if fits {
        parts
            .iter()
            .enumerate()
            .map(|(i, part)| key_part(part, types.get(i).copied().unwrap_or(KeyType::Infer), offset))
            .collect()
    } else {
        vec![vec![KeyPart::Unknown(text.clone())]]
    };
    let count = alternatives
        .iter()
        .map(Vec::len)
        .try_fold(1usize, usize::checked_mul);
    let keys = match count {
        Some(n) if n <= MAX_EXPANSION => product(&alternatives),
        _ => vec![vec![KeyPart::Unknown(text.clone())]],
    };
    keys.into_iter()
        .map(|key| Element {
            key,
            action: action.clone(),
            text: text.clone(),
        })
        .collect()
}

fn product(alternatives: &[Vec<KeyPart>]) -> Vec<Vec<KeyPart>> {
    let mut keys: Vec<Vec<KeyPart>> = vec![Vec::with_capacity(alternatives.len())];
    for choices in alternatives {
        if let [only] = choices.as_slice() {
            keys.iter_mut().for_each(|k| k.push(only.clone()));
            continue;
        }
        keys = keys
            .iter()
            .flat_map(|k| {
                choices.iter().map(move |c| {
                    let mut k = k.clone();
                    k.push(c.clone());
                    k
                })
            })
            .collect();
    }
    keys
}

/// One key component; several when an address range spans more than one prefix.
fn key_part(value: &Expr<'_>, kind: KeyType, offset: u64) -> Vec<KeyPart> {
    let unknown = || vec![KeyPart::Unknown(render_expr_string(value))];
    let kind = match kind {
        KeyType::Infer => infer(value),
        kind => kind,
    };
    match kind {
        KeyType::Addr => match nets(value) {
            Some(nets) => nets.into_iter().map(KeyPart::Addr).collect(),
            None => unknown(),
        },
        KeyType::Port => match port_range(value) {
            Some((lo, hi)) => vec![KeyPart::Port(lo, hi)],
            None => unknown(),
        },
        KeyType::Proto => match protocol(value) {
            Some(p) => vec![KeyPart::Protocol(p)],
            None => unknown(),
        },
        KeyType::AddrType => match value.as_str() {
            Some(t) => vec![KeyPart::AddrType(t.to_string())],
            None => unknown(),
        },
        KeyType::Text => match value.as_str() {
            Some(t) => vec![KeyPart::Text(t.to_string())],
            None => unknown(),
        },
        KeyType::Int => match int_range(value) {
            Some((lo, hi)) if lo >= offset => vec![KeyPart::Int(lo - offset, hi - offset)],
            _ => unknown(),
        },
        KeyType::Other | KeyType::Infer => unknown(),
    }
}

/// The type an untyped value has by its form: an address, a protocol name, a number.
fn infer(value: &Expr<'_>) -> KeyType {
    match value {
        Expr::Uint(_) | Expr::Int(_) => KeyType::Int,
        Expr::Str(s) if Net::parse(s).is_some() => KeyType::Addr,
        Expr::Str(s) if Protocol::parse(s).is_some() => KeyType::Proto,
        Expr::Str(_) => KeyType::Text,
        _ => match value.single() {
            Some(("prefix", _)) => KeyType::Addr,
            Some(("range", Expr::List(ends))) => ends.first().map_or(KeyType::Other, infer),
            _ => KeyType::Other,
        },
    }
}

pub(super) fn number(value: &Expr<'_>) -> Option<u64> {
    match value {
        Expr::Uint(n) => Some(*n),
        Expr::Int(n) => u64::try_from(*n).ok(),
        Expr::Str(s) => s.parse().ok(),
        _ => None,
    }
}

/// `5` or `{"range": [1, 9]}`.
pub(super) fn int_range(value: &Expr<'_>) -> Option<(u64, u64)> {
    match value.single() {
        Some(("range", Expr::List(ends))) => match ends.as_slice() {
            [lo, hi] => Some((number(lo)?, number(hi)?)).filter(|(lo, hi)| lo <= hi),
            _ => None,
        },
        _ => number(value).map(|n| (n, n)),
    }
}

pub(super) fn port_range(value: &Expr<'_>) -> Option<(u16, u16)> {
    let (lo, hi) = int_range(value)?;
    Some((u16::try_from(lo).ok()?, u16::try_from(hi).ok()?))
}

/// `tcp`, `6`: Some(None) for a protocol that is none of tcp/udp/sctp.
pub(super) fn protocol(value: &Expr<'_>) -> Option<Option<Protocol>> {
    match value {
        Expr::Str(s) => Some(Protocol::parse(s)),
        Expr::Uint(n) => Some(Protocol::parse(&n.to_string())),
        _ => None,
    }
}

/// An address, `{"prefix": …}` or `{"range": [a, b]}` as the prefixes that cover it.
pub(super) fn nets(value: &Expr<'_>) -> Option<Vec<Net>> {
    match value {
        Expr::Str(s) => Net::parse(s).map(|n| vec![n]),
        _ => match value.single()? {
            ("prefix", body) => {
                let addr: IpAddr = body.get("addr")?.as_str()?.parse().ok()?;
                let len = u8::try_from(number(body.get("len")?)?).ok()?;
                Net::parse(&format!("{addr}/{len}")).map(|n| vec![n])
            }
            ("range", Expr::List(ends)) => match ends.as_slice() {
                [lo, hi] => range_nets(lo.as_str()?.parse().ok()?, hi.as_str()?.parse().ok()?),
                _ => None,
            },
            _ => None,
        },
    }
}

/// The fewest prefixes that cover `lo..=hi` exactly.
fn range_nets(lo: IpAddr, hi: IpAddr) -> Option<Vec<Net>> {
    let (bits, lo, hi, v4) = match (lo, hi) {
        (IpAddr::V4(lo), IpAddr::V4(hi)) => {
            (32u32, u128::from(u32::from(lo)), u128::from(u32::from(hi)), true)
        }
        (IpAddr::V6(lo), IpAddr::V6(hi)) => (128, u128::from(lo), u128::from(hi), false),
        _ => return None,
    };
    if lo > hi {
        return None;
    }
    let mut out = Vec::new();
    let mut start = lo;
    loop {
        // The largest block aligned at `start` that does not pass `hi`.
        let mut size_bits = start.trailing_zeros().min(bits);
        while size_bits > 0 && (size_bits >= 128 || start + ((1u128 << size_bits) - 1) > hi) {
            size_bits -= 1;
        }
        let addr = if v4 {
            IpAddr::from(u32::try_from(start).ok()?.to_be_bytes())
        } else {
            IpAddr::from(start.to_be_bytes())
        };
        let prefix = u8::try_from(bits - size_bits).ok()?;
        out.push(Net { addr, prefix });
        let last = start + ((1u128 << size_bits) - 1);
        if last >= hi {
            return Some(out);
        }
        start = last + 1;
    }
}

/// A verdict expression (`{"goto": {"target": "x"}}`, `{"accept": null}`).
pub(super) fn verdict(value: &Expr<'_>) -> Action {
    let unknown = || Action::Unknown(render_expr_string(value));
    let target = |body: &Expr<'_>| body.get("target").and_then(Expr::as_str).map(str::to_string);
    match value.single() {
        Some(("accept", _)) => Action::Accept,
        Some(("drop", _)) => Action::Drop,
        Some(("return", _)) => Action::Return,
        Some(("continue", _)) => Action::Continue,
        Some(("jump", body)) => target(body).map_or_else(unknown, Action::Jump),
        Some(("goto", body)) => target(body).map_or_else(unknown, Action::Goto),
        _ => unknown(),
    }
}
