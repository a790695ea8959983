//! One iptables-nft rule's expressions rendered as the `-A` line `iptables-nft-save`
//! prints: the natively translated matches (addresses, interfaces, protocol, ports,
//! mark) decoded from their register loads and comparisons, the xtables ones by
//! [`super::xtables`].

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::xtables::{write_port_option, xt_match, xt_target};
use super::{NF_ACCEPT, NF_DROP, unsupported};
use crate::decode::netlink::{
    Attrs, DecodeError, ExprAttrs, NFTA_DATA_VERDICT, NFTA_RULE_EXPRESSIONS, be32, data_value, expressions,
    name, prefix_len, read_verdict,
};
use crate::heart::model::Family;

// Expression attributes (linux/netfilter/nf_tables.h).
const NFTA_PAYLOAD_BASE: u16 = 2;
const NFTA_PAYLOAD_OFFSET: u16 = 3;
const NFTA_PAYLOAD_LEN: u16 = 4;
const NFTA_META_KEY: u16 = 2;
const NFTA_CMP_OP: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFTA_RANGE_OP: u16 = 2;
const NFTA_RANGE_FROM_DATA: u16 = 3;
const NFTA_RANGE_TO_DATA: u16 = 4;
const NFTA_BITWISE_MASK: u16 = 4;
const NFTA_BITWISE_XOR: u16 = 5;
const NFTA_IMMEDIATE_DREG: u16 = 1;
const NFTA_IMMEDIATE_DATA: u16 = 2;
const NFTA_MATCH_NAME: u16 = 1;
const NFTA_MATCH_REV: u16 = 2;
const NFTA_MATCH_INFO: u16 = 3;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
const NFT_META_MARK: u32 = 3;
const NFT_META_IIFNAME: u32 = 6;
const NFT_META_OIFNAME: u32 = 7;
const NFT_META_L4PROTO: u32 = 16;
const NFT_CMP_EQ: u32 = 0;
const NFT_CMP_NEQ: u32 = 1;
const NFT_JUMP: i32 = -3;
const NFT_GOTO: i32 = -4;
const NFT_RETURN: i32 = -5;

/// What a register holds: the field the last load put there, maybe masked.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Loaded {
    Meta(u32),
    Payload { base: u32, offset: u32, len: u32 },
}

/// A port match iptables-nft translated natively; printed as the extension
/// (`-m tcp`, `-m udp`) that every such comparison in a rule shares.
#[derive(Debug, Default)]
struct Ports {
    sport: Option<(bool, u16, u16)>,
    dport: Option<(bool, u16, u16)>,
}

#[derive(Debug)]
enum Match {
    Text(String),
    Ports(Ports),
}

/// The parts of a rule as iptables prints them: the address, interface and protocol
/// part first, then the matches in order, then the target.
#[derive(Debug, Default)]
struct RuleParts {
    src: Option<(bool, String)>,
    dst: Option<(bool, String)>,
    iif: Option<(bool, String)>,
    oif: Option<(bool, String)>,
    proto: Option<(bool, u8)>,
    matches: Vec<Match>,
    /// Index in `matches` of the natively translated port match.
    ports: Option<usize>,
    target: String,
}

/// Appends one rule of `chain` as its `-A` line (without the newline).
pub fn render_rule(out: &mut String, family: Family, chain: &str, attrs: &[u8]) -> Result<(), DecodeError> {
    let mut reader = RuleReader {
        family,
        chain,
        parts: RuleParts::default(),
        loaded: None,
        mask: None,
    };
    for attr in Attrs::new(attrs) {
        let (kind, value) = attr?;
        if kind != NFTA_RULE_EXPRESSIONS {
            continue;
        }
        for expression in expressions(value) {
            let (expr_name, data) = expression?;
            reader.expression(expr_name, data)?;
        }
    }
    let parts = reader.finish()?;
    write_rule(out, chain, &parts)
}

/// One expression's attributes, for the rule of `chain`.
struct Expression<'a> {
    name: &'a str,
    chain: &'a str,
    attrs: ExprAttrs<'a>,
}

impl<'a> Expression<'a> {
    /// An attribute iptables-nft always gives this expression.
    fn attr(&self, kind: u16) -> Result<&'a [u8], DecodeError> {
        self.attrs.get(kind).ok_or_else(|| {
            unsupported(
                self.chain,
                format!("a {} expression without attribute {kind}", self.name),
            )
        })
    }

    fn number(&self, kind: u16) -> Result<u32, DecodeError> {
        be32(self.attr(kind)?)
    }

    /// The bytes of a data attribute's value.
    fn data(&self, kind: u16) -> Result<&'a [u8], DecodeError> {
        data_value(self.attr(kind)?)
    }
}

/// Reads a rule's expressions in order, as the kernel runs them: a load (maybe masked)
/// is held until the comparison that consumes it.
struct RuleReader<'a> {
    family: Family,
    chain: &'a str,
    parts: RuleParts,
    loaded: Option<Loaded>,
    mask: Option<Vec<u8>>,
}

impl RuleReader<'_> {
    fn expression(&mut self, expr_name: &str, data: &[u8]) -> Result<(), DecodeError> {
        let expr = Expression {
            name: expr_name,
            chain: self.chain,
            attrs: ExprAttrs::new(data)?,
        };
        match expr_name {
            "counter" => {}
            "meta" => self.load(Loaded::Meta(expr.number(NFTA_META_KEY)?)),
            "payload" => self.load(Loaded::Payload {
                base: expr.number(NFTA_PAYLOAD_BASE)?,
                offset: expr.number(NFTA_PAYLOAD_OFFSET)?,
                len: expr.number(NFTA_PAYLOAD_LEN)?,
            }),
            "bitwise" => self.mask = Some(bitwise_mask(&expr)?),
            "cmp" => self.cmp(&expr)?,
            "range" => self.range(&expr)?,
            "immediate" => self.parts.target = immediate_target(&expr)?,
            "match" => {
                let (ext, rev, info) = xt(&expr)?;
                let text = xt_match(self.family, self.chain, ext, rev, info)?;
                self.parts.matches.push(Match::Text(text));
            }
            "target" => {
                let (ext, rev, info) = xt(&expr)?;
                self.parts.target = xt_target(self.family, self.chain, ext, rev, info)?;
            }
            other => return Err(unsupported(self.chain, format!("the {other} expression"))),
        }
        Ok(())
    }

    /// A new load replaces the register's field and drops the old one's mask.
    fn load(&mut self, loaded: Loaded) {
        self.loaded = Some(loaded);
        self.mask = None;
    }

    fn cmp(&mut self, expr: &Expression<'_>) -> Result<(), DecodeError> {
        let invert = inverted(self.chain, "comparison", expr.number(NFTA_CMP_OP)?)?;
        let right = expr.data(NFTA_CMP_DATA)?;
        let what = self
            .loaded
            .take()
            .ok_or_else(|| unsupported(self.chain, "a comparison of nothing loaded"))?;
        let mask = self.mask.take();
        self.compare(what, mask, invert, right)
    }

    /// iptables-nft writes a range only for a port range.
    fn range(&mut self, expr: &Expression<'_>) -> Result<(), DecodeError> {
        let invert = inverted(self.chain, "range", expr.number(NFTA_RANGE_OP)?)?;
        let from = port(expr.data(NFTA_RANGE_FROM_DATA)?);
        let to = port(expr.data(NFTA_RANGE_TO_DATA)?);
        match (self.loaded.take(), self.mask.take(), from, to) {
            (
                Some(Loaded::Payload {
                    base: NFT_PAYLOAD_TRANSPORT_HEADER,
                    offset,
                    len: 2,
                }),
                None,
                Some(from),
                Some(to),
            ) => self.port_match(offset, (invert, from, to)),
            _ => Err(unsupported(self.chain, "a range of something other than a port")),
        }
    }

    /// The parts read, once every load has been compared.
    fn finish(self) -> Result<RuleParts, DecodeError> {
        if self.loaded.is_some() {
            return Err(unsupported(self.chain, "a field loaded and never compared"));
        }
        Ok(self.parts)
    }

    /// A comparison of what was loaded: an address, an interface, the protocol, a port
    /// or the packet mark, as iptables-nft translates them.
    fn compare(
        &mut self,
        what: Loaded,
        mask: Option<Vec<u8>>,
        invert: bool,
        right: &[u8],
    ) -> Result<(), DecodeError> {
        let (src_offset, dst_offset, width) = match self.family {
            Family::Ipv4 => (12, 16, 4),
            Family::Ipv6 => (8, 24, 16),
        };
        match what {
            Loaded::Meta(NFT_META_L4PROTO) if mask.is_none() && right.len() == 1 => {
                self.parts.proto = Some((invert, right[0]));
            }
            Loaded::Meta(key @ (NFT_META_IIFNAME | NFT_META_OIFNAME)) if mask.is_none() => {
                let slot = if key == NFT_META_IIFNAME {
                    &mut self.parts.iif
                } else {
                    &mut self.parts.oif
                };
                *slot = Some((invert, interface_name(right)));
            }
            Loaded::Meta(NFT_META_MARK) if right.len() == 4 => {
                let text = mark_match(self.chain, mask.as_deref(), invert, right)?;
                self.parts.matches.push(Match::Text(text));
            }
            Loaded::Payload {
                base: NFT_PAYLOAD_NETWORK_HEADER,
                offset,
                len,
            } if (offset == src_offset || offset == dst_offset)
                && len as usize <= width
                && right.len() == len as usize =>
            {
                let address = address_prefix(self.family, self.chain, mask.as_deref(), right)?;
                let slot = if offset == src_offset {
                    &mut self.parts.src
                } else {
                    &mut self.parts.dst
                };
                *slot = Some((invert, address));
            }
            Loaded::Payload {
                base: NFT_PAYLOAD_TRANSPORT_HEADER,
                offset,
                len: 2,
            } if mask.is_none() => {
                let value = port(right).ok_or_else(|| unsupported(self.chain, "a port of the wrong size"))?;
                self.port_match(offset, (invert, value, value))?;
            }
            other => return Err(unsupported(self.chain, format!("a comparison of {other:?}"))),
        }
        Ok(())
    }

    /// Puts a port comparison into the rule's one native port match, made where the
    /// first such comparison is.
    fn port_match(&mut self, offset: u32, port: (bool, u16, u16)) -> Result<(), DecodeError> {
        let chain = self.chain;
        let parts = &mut self.parts;
        let index = match parts.ports {
            Some(i) => i,
            None => {
                parts.matches.push(Match::Ports(Ports::default()));
                parts.ports = Some(parts.matches.len() - 1);
                parts.matches.len() - 1
            }
        };
        let Some(Match::Ports(ports)) = parts.matches.get_mut(index) else {
            return Err(unsupported(chain, "a port match out of place"));
        };
        let slot = match offset {
            0 => &mut ports.sport,
            2 => &mut ports.dport,
            _ => {
                return Err(unsupported(
                    chain,
                    format!("a transport header field at offset {offset}"),
                ));
            }
        };
        if slot.is_some() {
            return Err(unsupported(chain, "two comparisons of one port"));
        }
        *slot = Some(port);
        Ok(())
    }
}

/// Whether a `cmp` or `range` operator inverts its match: iptables-nft writes only
/// equality and inequality.
fn inverted(chain: &str, what: &str, op: u32) -> Result<bool, DecodeError> {
    match op {
        NFT_CMP_EQ => Ok(false),
        NFT_CMP_NEQ => Ok(true),
        _ => Err(unsupported(chain, format!("a {what} with operator {op}"))),
    }
}

/// A `bitwise` expression's mask; iptables-nft masks with a zero xor only.
fn bitwise_mask(expr: &Expression<'_>) -> Result<Vec<u8>, DecodeError> {
    let xor = expr.data(NFTA_BITWISE_XOR)?;
    if xor.iter().any(|&b| b != 0) {
        return Err(unsupported(
            expr.chain,
            "a bitwise expression with a non-zero xor",
        ));
    }
    Ok(expr.data(NFTA_BITWISE_MASK)?.to_vec())
}

/// An `immediate` expression: the verdict that ends the rule, as its target.
fn immediate_target(expr: &Expression<'_>) -> Result<String, DecodeError> {
    let chain = expr.chain;
    if expr.number(NFTA_IMMEDIATE_DREG)? != 0 {
        return Err(unsupported(chain, "an immediate value that is not a verdict"));
    }
    let verdict = expr
        .attrs
        .get(NFTA_IMMEDIATE_DATA)
        .ok_or_else(|| unsupported(chain, "an immediate without data"))?;
    let mut code = None;
    for a in Attrs::new(verdict) {
        if let (NFTA_DATA_VERDICT, v) = a? {
            code = Some(read_verdict(v)?);
        }
    }
    let (code, target) = code.ok_or_else(|| unsupported(chain, "an immediate without a verdict"))?;
    Ok(match (code, target) {
        (NF_ACCEPT, _) => " -j ACCEPT".into(),
        (NF_DROP, _) => " -j DROP".into(),
        (NFT_RETURN, _) => " -j RETURN".into(),
        (NFT_JUMP, Some(to)) => format!(" -j {to}"),
        (NFT_GOTO, Some(to)) => format!(" -g {to}"),
        (code, _) => return Err(unsupported(chain, format!("verdict {code}"))),
    })
}

/// An interface name as iptables prints it: an exact name is compared with its NUL,
/// a `+` wildcard without it.
fn interface_name(right: &[u8]) -> String {
    match right.iter().position(|&b| b == 0) {
        Some(end) => String::from_utf8_lossy(&right[..end]).into_owned(),
        None => format!("{}+", String::from_utf8_lossy(right)),
    }
}

/// ` -m mark --mark VALUE[/MASK]`; a mask that keeps every bit is not printed.
fn mark_match(chain: &str, mask: Option<&[u8]>, invert: bool, right: &[u8]) -> Result<String, DecodeError> {
    let value = u32::from_ne_bytes(right.try_into().unwrap_or_default());
    let mut text = format!(" -m mark{} --mark 0x{value:x}", if invert { " !" } else { "" });
    if let Some(mask) = mask {
        let mask = u32::from_ne_bytes(
            mask.get(..4)
                .and_then(|m| m.try_into().ok())
                .ok_or_else(|| unsupported(chain, "a mark mask of the wrong size"))?,
        );
        if mask != u32::MAX {
            let _ = write!(text, "/0x{mask:x}");
        }
    }
    Ok(text)
}

/// An address compared whole or under a prefix mask, as `ADDRESS/PREFIX`.
fn address_prefix(
    family: Family,
    chain: &str,
    mask: Option<&[u8]>,
    right: &[u8],
) -> Result<String, DecodeError> {
    let prefix = match mask {
        None => right.len() as u32 * 8,
        Some(mask) => {
            prefix_len(mask).ok_or_else(|| unsupported(chain, "an address mask that is not a prefix"))?
        }
    };
    let mut bytes = [0u8; 16];
    bytes[..right.len()].copy_from_slice(right);
    let address = match family {
        Family::Ipv4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
        Family::Ipv6 => IpAddr::V6(Ipv6Addr::from(bytes)),
    };
    Ok(format!("{address}/{prefix}"))
}

/// The `-A` line: the addresses, interfaces and protocol first, then the matches in
/// order, then the target.
fn write_rule(out: &mut String, chain: &str, parts: &RuleParts) -> Result<(), DecodeError> {
    out.push_str("-A ");
    out.push_str(chain);
    for (letter, part) in [
        ('s', &parts.src),
        ('d', &parts.dst),
        ('i', &parts.iif),
        ('o', &parts.oif),
    ] {
        if let Some((invert, value)) = part {
            let _ = write!(out, "{} -{letter} {value}", if *invert { " !" } else { "" });
        }
    }
    if let Some((invert, proto)) = parts.proto {
        let _ = write!(
            out,
            "{} -p {}",
            if invert { " !" } else { "" },
            protocol_name(proto).ok_or_else(|| unsupported(chain, format!("protocol {proto}")))?
        );
    }
    for m in &parts.matches {
        match m {
            Match::Text(text) => out.push_str(text),
            Match::Ports(ports) => write_port_match(out, chain, parts.proto, ports)?,
        }
    }
    out.push_str(&parts.target);
    Ok(())
}

/// A native port match, printed as the extension of the rule's protocol (`-m tcp`).
fn write_port_match(
    out: &mut String,
    chain: &str,
    proto: Option<(bool, u8)>,
    ports: &Ports,
) -> Result<(), DecodeError> {
    let proto = match proto {
        Some((false, p)) => protocol_name(p),
        _ => None,
    }
    .ok_or_else(|| unsupported(chain, "a port match without a protocol"))?;
    let _ = write!(out, " -m {proto}");
    for (flag, port) in [("sport", ports.sport), ("dport", ports.dport)] {
        if let Some((invert, from, to)) = port {
            write_port_option(out, flag, invert, from, to);
        }
    }
    Ok(())
}

fn port(bytes: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(bytes.get(..2)?.try_into().ok()?))
}

/// The protocol names iptables prints (its `xtables_chain_protos`) for the protocols
/// this reader decodes.
fn protocol_name(proto: u8) -> Option<&'static str> {
    match proto {
        6 => Some("tcp"),
        17 => Some("udp"),
        132 => Some("sctp"),
        _ => None,
    }
}

/// An xtables expression's extension name, revision and structure.
fn xt<'a>(expr: &Expression<'a>) -> Result<(&'a str, u32, &'a [u8]), DecodeError> {
    let field = |k| {
        expr.attrs.get(k).ok_or_else(|| {
            unsupported(
                expr.chain,
                "an xtables expression without its name, revision or data",
            )
        })
    };
    Ok((
        name(field(NFTA_MATCH_NAME)?)?,
        be32(field(NFTA_MATCH_REV)?)?,
        field(NFTA_MATCH_INFO)?,
    ))
}
