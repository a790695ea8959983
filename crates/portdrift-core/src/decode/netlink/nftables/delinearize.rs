//! A rule's expressions as the kernel runs them (load a field into a register, compare
//! the register) turned back into nft's JSON statements (`meta l4proto tcp`,
//! `dnat to 10.0.0.1:80`) for the forms kube-proxy and hand-written NodePort rules use,
//! so a finding shows the rule as `nft list` prints it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::PoisonError;

use super::RuleContext;
use super::values::{
    TYPE_INET_PROTOCOL, TYPE_INET_SERVICE, TYPE_INTEGER, TYPE_IP6ADDR, TYPE_IPADDR, TYPE_MARK, fields, hex,
    object, typed_value, verdict_expr, verdict_statement,
};
use crate::decode::netlink::{
    Attrs, DecodeError, NFTA_DATA_VERDICT, align4, attr_map, be32, be64, data_value,
    expressions as expressions_of, name, prefix_len as shared_prefix_len, read_verdict,
};
use crate::decode::nftables::json::Expr;
use crate::heart::model::Family;

// Expression attributes (include/uapi/linux/netfilter/nf_tables.h), by expression.
const NFTA_IMMEDIATE_DREG: u16 = 1;
const NFTA_IMMEDIATE_DATA: u16 = 2;
const NFTA_CMP_SREG: u16 = 1;
const NFTA_CMP_OP: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFTA_META_DREG: u16 = 1;
const NFTA_META_KEY: u16 = 2;
const NFTA_PAYLOAD_DREG: u16 = 1;
const NFTA_PAYLOAD_BASE: u16 = 2;
const NFTA_PAYLOAD_OFFSET: u16 = 3;
const NFTA_PAYLOAD_LEN: u16 = 4;
const NFTA_BITWISE_SREG: u16 = 1;
const NFTA_BITWISE_DREG: u16 = 2;
const NFTA_BITWISE_MASK: u16 = 4;
pub(crate) const NFTA_LOOKUP_SET: u16 = 1;
pub(crate) const NFTA_LOOKUP_SREG: u16 = 2;
const NFTA_LOOKUP_DREG: u16 = 3;
const NFTA_LOOKUP_FLAGS: u16 = 5;
const NFTA_NAT_TYPE: u16 = 1;
const NFTA_NAT_REG_ADDR_MIN: u16 = 3;
const NFTA_NAT_REG_PROTO_MIN: u16 = 5;
const NFTA_COUNTER_BYTES: u16 = 1;
const NFTA_COUNTER_PACKETS: u16 = 2;
pub(crate) const NFTA_NUMGEN_DREG: u16 = 1;
pub(crate) const NFTA_NUMGEN_MODULUS: u16 = 2;
const NFTA_NUMGEN_TYPE: u16 = 3;
pub(crate) const NFTA_NUMGEN_OFFSET: u16 = 4;
// nf_tables.h values: lookup flags, NAT types, payload bases, meta keys, comparison
// operators, numgen types.
const NFT_LOOKUP_F_INV: u32 = 1;
const NFT_NAT_DNAT: u32 = 1;
const NFT_PAYLOAD_LL_HEADER: u32 = 0;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
const NFT_META_MARK: u32 = 3;
const NFT_META_IIF: u32 = 4;
const NFT_META_OIF: u32 = 5;
const NFT_META_IIFNAME: u32 = 6;
const NFT_META_OIFNAME: u32 = 7;
const NFT_META_NFPROTO: u32 = 15;
const NFT_META_L4PROTO: u32 = 16;
const NFT_CMP_EQ: u32 = 0;
const NFT_CMP_NEQ: u32 = 1;
const NFT_CMP_LT: u32 = 2;
const NFT_CMP_LTE: u32 = 3;
const NFT_CMP_GT: u32 = 4;
const NFT_NG_RANDOM: u32 = 1;

/// An expression's attributes by type.
type Fields<'a> = HashMap<u16, &'a [u8]>;

/// What a register holds: the expression that loaded it, its type, and its width.
#[derive(Debug, Clone)]
struct Loaded {
    expr: Expr<'static>,
    kind: u32,
    len: usize,
    /// A literal (from `immediate`), kept for NAT addresses and ports.
    literal: Option<Vec<u8>>,
    /// A transport-header field (`th dport`), which a preceding `meta l4proto` names.
    transport_field: Option<&'static str>,
    /// A contiguous mask applied by `bitwise`: a prefix length.
    prefix: Option<u32>,
}

/// Turns the kernel's register machine back into nft's JSON statements, for the forms
/// portdrift needs to read or show; anything else becomes a statement naming the
/// expression, which reads nothing into the model.
pub(crate) struct Delinearizer<'c> {
    context: &'c RuleContext<'c>,
    /// 32-bit register slots (`NFT_REG32_00` is slot 0; `NFT_REG_1` is slots 0..4).
    registers: HashMap<u32, Loaded>,
    statements: Vec<Expr<'static>>,
}

/// `NFT_REG_1`..`NFT_REG_4` (16 bytes each) and `NFT_REG32_00`.. (4 bytes each) as one
/// numbering of 4-byte slots; None for the verdict register.
fn slot(register: u32) -> Option<u32> {
    match register {
        1..=4 => Some((register - 1) * 4),
        8..=23 => Some(register - 8),
        _ => None,
    }
}

impl<'c> Delinearizer<'c> {
    pub fn new(context: &'c RuleContext<'c>) -> Self {
        Delinearizer {
            context,
            registers: HashMap::new(),
            statements: Vec::new(),
        }
    }

    pub fn run(mut self, expressions: &[u8]) -> Result<Vec<Expr<'static>>, DecodeError> {
        for expression in expressions_of(expressions) {
            let (expr_name, data) = expression?;
            self.expression(expr_name, data)?;
        }
        Ok(self.statements)
    }

    fn expression(&mut self, expr_name: &str, data: &[u8]) -> Result<(), DecodeError> {
        let attrs = attr_map(data)?;
        match expr_name {
            "immediate" => self.immediate(&attrs)?,
            "meta" => self.meta(&attrs)?,
            "payload" => self.payload(&attrs)?,
            "bitwise" => self.bitwise(&attrs)?,
            "cmp" => self.cmp(&attrs)?,
            "lookup" => self.lookup(&attrs)?,
            "nat" => self.nat(&attrs)?,
            "counter" => self.counter(&attrs)?,
            "numgen" => self.numgen(&attrs)?,
            "masq" => self.statements.push(object("masquerade", Expr::Null)),
            other => {
                // An expression that loads a register (fib, ct, ...) leaves it
                // unknown; one that acts is named.
                self.other(other);
            }
        }
        Ok(())
    }

    /// A verdict (into the verdict register) or a literal loaded for a later
    /// expression.
    fn immediate(&mut self, attrs: &Fields<'_>) -> Result<(), DecodeError> {
        let dreg = number(attrs, NFTA_IMMEDIATE_DREG)?.unwrap_or_default();
        let Some(nested) = attrs.get(&NFTA_IMMEDIATE_DATA) else {
            return Ok(());
        };
        match slot(dreg) {
            None => {
                for attr in Attrs::new(nested) {
                    if let (NFTA_DATA_VERDICT, v) = attr? {
                        let (code, chain) = read_verdict(v)?;
                        self.statements.push(verdict_statement(code, chain.as_deref()));
                    }
                }
            }
            Some(s) => {
                let value = data_value(nested)?.to_vec();
                self.load(s, Loaded::literal(value));
            }
        }
        Ok(())
    }

    fn meta(&mut self, attrs: &Fields<'_>) -> Result<(), DecodeError> {
        match (number(attrs, NFTA_META_DREG)?, number(attrs, NFTA_META_KEY)?) {
            (Some(dreg), Some(key)) => self.load_reg(dreg, meta_load(key)),
            // A meta statement (one that sets the key) is only named.
            _ => self.other("meta"),
        }
        Ok(())
    }

    fn payload(&mut self, attrs: &Fields<'_>) -> Result<(), DecodeError> {
        let Some(dreg) = number(attrs, NFTA_PAYLOAD_DREG)? else {
            // A payload statement (one that writes the packet) is only named.
            self.other("payload");
            return Ok(());
        };
        let base = number(attrs, NFTA_PAYLOAD_BASE)?.unwrap_or_default();
        let offset = number(attrs, NFTA_PAYLOAD_OFFSET)?.unwrap_or_default();
        let len = number(attrs, NFTA_PAYLOAD_LEN)?.unwrap_or_default();
        let loaded = self.payload_load(base, offset, len);
        self.load_reg(dreg, loaded);
        Ok(())
    }

    /// A mask over a loaded register: a prefix when its ones are leading, else an `&`.
    fn bitwise(&mut self, attrs: &Fields<'_>) -> Result<(), DecodeError> {
        let (Some(sreg), Some(dreg)) = (
            number(attrs, NFTA_BITWISE_SREG)?,
            number(attrs, NFTA_BITWISE_DREG)?,
        ) else {
            return Ok(());
        };
        let mask = match attrs.get(&NFTA_BITWISE_MASK) {
            Some(m) => data_value(m)?.to_vec(),
            None => Vec::new(),
        };
        if let Some(mut loaded) = slot(sreg).and_then(|s| self.registers.get(&s)).cloned() {
            loaded.prefix = prefix_len(&mask);
            if loaded.prefix.is_none() {
                loaded.expr = object(
                    "&",
                    Expr::List(vec![loaded.expr, typed_value(TYPE_INTEGER, &mask)]),
                );
            }
            self.load_reg(dreg, loaded);
        }
        Ok(())
    }

    fn cmp(&mut self, attrs: &Fields<'_>) -> Result<(), DecodeError> {
        let sreg = number(attrs, NFTA_CMP_SREG)?.unwrap_or_default();
        let op = cmp_operator(number(attrs, NFTA_CMP_OP)?.unwrap_or_default());
        let right = match attrs.get(&NFTA_CMP_DATA) {
            Some(d) => data_value(d)?,
            None => &[],
        };
        self.compare(sreg, op, right);
        Ok(())
    }

    fn counter(&mut self, attrs: &Fields<'_>) -> Result<(), DecodeError> {
        let count = |kind| -> Result<Expr<'static>, DecodeError> {
            let value = attrs.get(&kind).map(|v| be64(v)).transpose()?;
            Ok(Expr::Uint(value.unwrap_or_default()))
        };
        self.statements.push(object(
            "counter",
            fields(vec![
                ("packets", count(NFTA_COUNTER_PACKETS)?),
                ("bytes", count(NFTA_COUNTER_BYTES)?),
            ]),
        ));
        Ok(())
    }

    fn numgen(&mut self, attrs: &Fields<'_>) -> Result<(), DecodeError> {
        let Some(dreg) = number(attrs, NFTA_NUMGEN_DREG)? else {
            return Ok(());
        };
        let mode = if number(attrs, NFTA_NUMGEN_TYPE)? == Some(NFT_NG_RANDOM) {
            "random"
        } else {
            "inc"
        };
        let uint = |kind| -> Result<Expr<'static>, DecodeError> {
            Ok(Expr::Uint(u64::from(number(attrs, kind)?.unwrap_or_default())))
        };
        let expr = object(
            "numgen",
            fields(vec![
                ("mode", Expr::Str(Cow::Borrowed(mode))),
                ("mod", uint(NFTA_NUMGEN_MODULUS)?),
                ("offset", uint(NFTA_NUMGEN_OFFSET)?),
            ]),
        );
        self.load_reg(dreg, Loaded::typed(expr, TYPE_INTEGER, 4));
        Ok(())
    }

    fn other(&mut self, expr_name: &str) {
        self.statements.push(fields(vec![(
            "netlink",
            Expr::Str(Cow::Owned(expr_name.to_string())),
        )]));
    }

    fn load_reg(&mut self, register: u32, loaded: Loaded) {
        if let Some(s) = slot(register) {
            self.load(s, loaded);
        }
    }

    fn load(&mut self, slot: u32, loaded: Loaded) {
        self.registers.insert(slot, loaded);
    }

    fn payload_load(&self, base: u32, offset: u32, len: u32) -> Loaded {
        let ip = match self.context.family {
            Family::Ipv4 => "ip",
            Family::Ipv6 => "ip6",
        };
        let field = match (self.context.family, base, offset, len) {
            (Family::Ipv4, NFT_PAYLOAD_NETWORK_HEADER, 12, 4) => Some((ip, "saddr", TYPE_IPADDR)),
            (Family::Ipv4, NFT_PAYLOAD_NETWORK_HEADER, 16, 4) => Some((ip, "daddr", TYPE_IPADDR)),
            (Family::Ipv6, NFT_PAYLOAD_NETWORK_HEADER, 8, 16) => Some((ip, "saddr", TYPE_IP6ADDR)),
            (Family::Ipv6, NFT_PAYLOAD_NETWORK_HEADER, 24, 16) => Some((ip, "daddr", TYPE_IP6ADDR)),
            (_, NFT_PAYLOAD_TRANSPORT_HEADER, 0, 2) => Some(("th", "sport", TYPE_INET_SERVICE)),
            (_, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2) => Some(("th", "dport", TYPE_INET_SERVICE)),
            _ => None,
        };
        match field {
            Some((protocol, name, kind)) => {
                let expr = object(
                    "payload",
                    fields(vec![
                        ("protocol", Expr::Str(Cow::Borrowed(protocol))),
                        ("field", Expr::Str(Cow::Borrowed(name))),
                    ]),
                );
                let mut loaded = Loaded::typed(expr, kind, len as usize);
                if protocol == "th" {
                    loaded.transport_field = Some(name);
                }
                loaded
            }
            None => {
                let base_name = match base {
                    NFT_PAYLOAD_LL_HEADER => "ll",
                    NFT_PAYLOAD_NETWORK_HEADER => "nh",
                    _ => "th",
                };
                let expr = object(
                    "payload",
                    fields(vec![
                        ("base", Expr::Str(Cow::Borrowed(base_name))),
                        ("offset", Expr::Uint(u64::from(offset) * 8)),
                        ("len", Expr::Uint(u64::from(len) * 8)),
                    ]),
                );
                Loaded::typed(expr, 0, len as usize)
            }
        }
    }

    fn compare(&mut self, sreg: u32, op: &'static str, right: &[u8]) {
        let Some(loaded) = slot(sreg).and_then(|s| self.registers.get(&s)).cloned() else {
            return self.other("cmp");
        };
        let mut left = loaded.expr;
        let mut right_value = typed_value(loaded.kind, right);
        if let Some(len) = loaded.prefix {
            right_value = object(
                "prefix",
                fields(vec![("addr", right_value), ("len", Expr::Uint(u64::from(len)))]),
            );
        }
        // nft folds `meta l4proto tcp` into a following `th dport` match and prints
        // `tcp dport`.
        if let (Some(field), "==") = (loaded.transport_field, op)
            && let Some(protocol) = self.statements.last().and_then(l4proto_match)
        {
            self.statements.pop();
            left = object(
                "payload",
                fields(vec![
                    ("protocol", Expr::Str(Cow::Borrowed(protocol))),
                    ("field", Expr::Str(Cow::Borrowed(field))),
                ]),
            );
        }
        self.statements.push(object(
            "match",
            fields(vec![
                ("op", Expr::Str(Cow::Borrowed(op))),
                ("left", left),
                ("right", right_value),
            ]),
        ));
    }

    /// The value a lookup reads: one register, or a concatenation of registers filling
    /// the set's key.
    fn lookup_key(&self, sreg: u32, key_len: usize) -> Expr<'static> {
        let Some(mut at) = slot(sreg) else {
            return Expr::Null;
        };
        let mut parts = Vec::new();
        let mut covered = 0;
        while covered < key_len.max(1) {
            let Some(loaded) = self.registers.get(&at) else {
                break;
            };
            parts.push(loaded.expr.clone());
            let width = align4(loaded.len.max(1));
            covered += width;
            at += (width / 4) as u32;
        }
        match parts.len() {
            0 => Expr::Null,
            1 => parts.pop().unwrap_or(Expr::Null),
            _ => object("concat", Expr::List(parts)),
        }
    }

    fn lookup(&mut self, attrs: &Fields<'_>) -> Result<(), DecodeError> {
        let set_name = match attrs.get(&NFTA_LOOKUP_SET) {
            Some(v) => name(v)?.to_string(),
            None => {
                self.other("lookup");
                return Ok(());
            }
        };
        let sreg = number(attrs, NFTA_LOOKUP_SREG)?.unwrap_or_default();
        let key_len = self
            .context
            .sets
            .get(set_name.as_str())
            .map_or(4, |s| s.key_len as usize);
        let key = self.lookup_key(sreg, key_len);
        match number(attrs, NFTA_LOOKUP_DREG)? {
            // A verdict map: `key vmap { ... }` inline, `key vmap @name` named.
            Some(0) => {
                let entries = self
                    .context
                    .inline_maps
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&set_name);
                let data = match entries {
                    Some(entries) => object(
                        "set",
                        Expr::List(
                            entries
                                .into_iter()
                                .map(|(k, v)| Expr::List(vec![k, verdict_expr(&v)]))
                                .collect(),
                        ),
                    ),
                    None => Expr::Str(Cow::Owned(format!("@{set_name}"))),
                };
                self.statements
                    .push(object("vmap", fields(vec![("key", key), ("data", data)])));
            }
            Some(dreg) => {
                let expr = object(
                    "map",
                    fields(vec![
                        ("key", key),
                        ("data", Expr::Str(Cow::Owned(format!("@{set_name}")))),
                    ]),
                );
                self.load_reg(dreg, Loaded::typed(expr, 0, 4));
            }
            None => {
                let inverted = number(attrs, NFTA_LOOKUP_FLAGS)?.unwrap_or_default() & NFT_LOOKUP_F_INV != 0;
                self.statements.push(object(
                    "match",
                    fields(vec![
                        ("op", Expr::Str(Cow::Borrowed(if inverted { "!=" } else { "==" }))),
                        ("left", key),
                        ("right", Expr::Str(Cow::Owned(format!("@{set_name}")))),
                    ]),
                ));
            }
        }
        Ok(())
    }

    fn nat(&mut self, attrs: &Fields<'_>) -> Result<(), DecodeError> {
        let kind = if number(attrs, NFTA_NAT_TYPE)? == Some(NFT_NAT_DNAT) {
            "dnat"
        } else {
            "snat"
        };
        let register = |kind| -> Result<Option<&Loaded>, DecodeError> {
            Ok(number(attrs, kind)?
                .and_then(slot)
                .and_then(|s| self.registers.get(&s)))
        };
        let mut body = Vec::new();
        if let Some(addr) = register(NFTA_NAT_REG_ADDR_MIN)? {
            let value = match addr.literal.as_deref() {
                Some(&[a, b, c, d]) => Expr::Str(Cow::Owned(IpAddr::from([a, b, c, d]).to_string())),
                Some(bytes) => match <[u8; 16]>::try_from(bytes) {
                    Ok(b) => Expr::Str(Cow::Owned(IpAddr::from(b).to_string())),
                    Err(_) => hex(bytes),
                },
                None => addr.expr.clone(),
            };
            body.push(("addr", value));
        }
        if let Some(port) = register(NFTA_NAT_REG_PROTO_MIN)? {
            let value = match port.literal.as_deref() {
                Some(&[hi, lo, ..]) => Expr::Uint(u64::from(u16::from_be_bytes([hi, lo]))),
                _ => port.expr.clone(),
            };
            body.push(("port", value));
        }
        self.statements.push(object(kind, fields(body)));
        Ok(())
    }
}

impl Loaded {
    fn typed(expr: Expr<'static>, kind: u32, len: usize) -> Loaded {
        Loaded {
            expr,
            kind,
            len,
            literal: None,
            transport_field: None,
            prefix: None,
        }
    }

    fn literal(value: Vec<u8>) -> Loaded {
        Loaded {
            expr: hex(&value),
            kind: 0,
            len: value.len(),
            literal: Some(value),
            transport_field: None,
            prefix: None,
        }
    }
}

/// `meta KEY` as a register load, typed as nft types it; a key nft would name but this
/// does not is shown by number.
fn meta_load(key: u32) -> Loaded {
    let Some((name, kind, len)) = meta_key(key) else {
        let expr = object("meta", fields(vec![("key", Expr::Uint(u64::from(key)))]));
        return Loaded::typed(expr, 0, 4);
    };
    let expr = object("meta", fields(vec![("key", Expr::Str(Cow::Borrowed(name)))]));
    Loaded::typed(expr, kind, len)
}

/// A meta key's name, its nft type and its width in bytes.
fn meta_key(key: u32) -> Option<(&'static str, u32, usize)> {
    Some(match key {
        NFT_META_MARK => ("mark", TYPE_MARK, 4),
        NFT_META_IIF => ("iif", TYPE_INTEGER, 4),
        NFT_META_OIF => ("oif", TYPE_INTEGER, 4),
        NFT_META_IIFNAME => ("iifname", 0, 16),
        NFT_META_OIFNAME => ("oifname", 0, 16),
        NFT_META_NFPROTO => ("nfproto", 0, 1),
        NFT_META_L4PROTO => ("l4proto", TYPE_INET_PROTOCOL, 1),
        _ => return None,
    })
}

/// nft's name of a `cmp` operator; `NFT_CMP_GTE` is the last the kernel defines, and
/// a value past it reads as it.
fn cmp_operator(op: u32) -> &'static str {
    match op {
        NFT_CMP_EQ => "==",
        NFT_CMP_NEQ => "!=",
        NFT_CMP_LT => "<",
        NFT_CMP_LTE => "<=",
        NFT_CMP_GT => ">",
        _ => ">=",
    }
}

/// An expression attribute that is a 32-bit number, when present.
fn number(attrs: &Fields<'_>, kind: u16) -> Result<Option<u32>, DecodeError> {
    attrs.get(&kind).map(|v| be32(v)).transpose()
}

/// `meta l4proto P` (an `==` match) → P.
fn l4proto_match(statement: &Expr<'static>) -> Option<&'static str> {
    let Expr::Object(outer) = statement else {
        return None;
    };
    let [(kind, Expr::Object(body))] = outer.as_slice() else {
        return None;
    };
    if kind != "match" {
        return None;
    }
    let get = |k: &str| body.iter().find(|(n, _)| n == k).map(|(_, v)| v);
    let is_l4proto = matches!(get("left"), Some(Expr::Object(m))
        if matches!(m.as_slice(), [(k, Expr::Object(f))] if k == "meta"
            && matches!(f.as_slice(), [(n, Expr::Str(v))] if n == "key" && v == "l4proto")));
    if !is_l4proto || !matches!(get("op"), Some(Expr::Str(op)) if op == "==") {
        return None;
    }
    match get("right") {
        Some(Expr::Str(Cow::Borrowed(p))) if matches!(*p, "tcp" | "udp" | "sctp" | "dccp" | "udplite") => {
            Some(p)
        }
        _ => None,
    }
}

/// The prefix length of a contiguous mask (`ff ff 00 00` → 16); None otherwise, and
/// for a mask that keeps no bit.
pub(crate) fn prefix_len(mask: &[u8]) -> Option<u32> {
    shared_prefix_len(mask).filter(|&ones| ones > 0)
}
