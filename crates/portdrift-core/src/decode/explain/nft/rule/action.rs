//! The statements that end a rule or set its mark: vmaps, NAT, mark rewrites.

use crate::decode::nftables::json::Expr;
use crate::heart::explain::model::{Action, DnatTo, SetRef};
use crate::heart::model::Family;

use super::{Builder, Left};
use crate::decode::explain::nft::set::{Data, KeyType, number, parse_element, port_range};

impl Builder<'_> {
    pub(super) fn lower_vmap(&mut self, body: &Expr<'_>, text: &str) -> Action {
        let unknown = || Action::Unknown(text.to_string());
        let (Some(key), Some(data)) = (body.get("key"), body.get("data")) else {
            return unknown();
        };
        let named = data.as_str().and_then(|s| s.strip_prefix('@'));
        let inline = match data.single() {
            Some(("set", Expr::List(items))) => Some(items.as_slice()),
            Some(("set", item)) => Some(std::slice::from_ref(item)),
            _ => None,
        };
        let (fields, types, offset) = match self.left(key) {
            Left::Numgen { modulus, offset } => {
                let Ok(modulus) = u32::try_from(modulus) else {
                    return unknown();
                };
                let map = match (named, inline) {
                    // A named map's keys are stored as they are: no offset to take off.
                    (Some(name), _) if offset == 0 => SetRef::Named(name.to_string()),
                    (_, Some(items)) => SetRef::Inline(
                        items
                            .iter()
                            .flat_map(|i| parse_element(i, &[KeyType::Int], Data::Verdict, offset))
                            .collect(),
                    ),
                    _ => return unknown(),
                };
                return Action::Numgen { modulus, map };
            }
            Left::Fields(fields) => {
                let types: Vec<KeyType> = fields.iter().copied().map(KeyType::of_field).collect();
                (fields, types, 0)
            }
            _ => return unknown(),
        };
        let map = match (named, inline) {
            (Some(name), _) => SetRef::Named(name.to_string()),
            (_, Some(items)) => SetRef::Inline(
                items
                    .iter()
                    .flat_map(|i| parse_element(i, &types, Data::Verdict, offset))
                    .collect(),
            ),
            _ => return unknown(),
        };
        Action::Vmap { key: fields, map }
    }

    /// `dnat to 10.0.0.1:80`, `dnat ip to …` (inet tables).
    pub(super) fn lower_dnat(&mut self, body: &Expr<'_>, text: &str) -> Action {
        let unknown = || Action::Unknown(text.to_string());
        let addr = match body.get("addr") {
            Some(Expr::Str(s)) => s.parse().ok(),
            Some(range) => match range.single() {
                Some(("range", Expr::List(ends))) => {
                    let first = ends.first().and_then(Expr::as_str).and_then(|s| s.parse().ok());
                    if first.is_some() {
                        self.notes.push(format!("`{text}` is read as its first address"));
                    }
                    first
                }
                _ => None,
            },
            None => None,
        };
        let Some(addr) = addr else {
            return unknown();
        };
        let family = match body.get("family").and_then(Expr::as_str) {
            Some("ip") => Family::Ipv4,
            Some("ip6") => Family::Ipv6,
            _ => Family::of(&addr),
        };
        if family != self.cx.family {
            // The kernel passes over an inet table's NAT of the other family.
            return Action::Continue;
        }
        let port = match body.get("port") {
            None => None,
            Some(port) => match port_range(port) {
                Some((lo, hi)) => {
                    if lo != hi {
                        self.notes.push(format!("`{text}` is read as its first port"));
                    }
                    Some(lo)
                }
                None => return unknown(),
            },
        };
        Action::Dnat(DnatTo { addr, port })
    }

    /// `meta mark set …`; other header and conntrack rewrites either cannot change the
    /// path (`ct mark set`, `ip dscp set`) or are not modelled (`ip daddr set`).
    pub(super) fn lower_mangle(&mut self, body: &Expr<'_>, text: &str, rule_text: &str) {
        let unknown = || Action::Unknown(text.to_string());
        let Some((kind, key)) = body.get("key").and_then(Expr::single) else {
            return self.finish(unknown(), rule_text);
        };
        let key_name = key.get("key").or_else(|| key.get("field")).and_then(Expr::as_str);
        match (kind, key_name) {
            ("meta", Some("mark")) => match body.get("value").and_then(mark_op) {
                Some((value, mask)) => {
                    // Two sets compose: ((x & !m1) ^ v1) & !m2 ^ v2.
                    self.mark = Some(match self.mark {
                        None => (value, mask),
                        Some((v1, m1)) => ((v1 & !mask) ^ value, m1 | mask),
                    });
                }
                None => self.finish(unknown(), rule_text),
            },
            ("ct", _) | ("meta", Some("nftrace" | "priority")) => {}
            ("payload", Some("dscp" | "ecn" | "ttl" | "hoplimit" | "tos" | "flowlabel")) => {}
            _ => self.finish(unknown(), rule_text),
        }
    }
}

/// A mark expression as (value, mask) of mark = (mark & !mask) ^ value.
fn mark_op(value: &Expr<'_>) -> Option<(u32, u32)> {
    let constant = |e: &Expr<'_>| number(e).and_then(|n| u32::try_from(n).ok());
    if let Some(v) = constant(value) {
        return Some((v, u32::MAX));
    }
    let (op, Expr::List(operands)) = value.single()? else {
        return None;
    };
    let [inner, operand] = operands.as_slice() else {
        return None;
    };
    let v = constant(operand)?;
    let is_mark =
        matches!(inner.single(), Some(("meta", b)) if b.get("key").and_then(Expr::as_str) == Some("mark"));
    match op {
        "|" if is_mark => Some((v, v)),
        "^" if is_mark => Some((v, 0)),
        "&" if is_mark => Some((0, !v)),
        // `mark & M | V`
        "|" => {
            let (inner_v, inner_m) = mark_op(inner)?;
            (inner_v == 0).then_some((v, inner_m | v))
        }
        _ => None,
    }
}
