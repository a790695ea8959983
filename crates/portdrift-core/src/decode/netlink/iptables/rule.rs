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
    let mut parts = RuleParts::default();
    let mut loaded: Option<Loaded> = None;
    let mut mask: Option<Vec<u8>> = None;
    for attr in Attrs::new(attrs) {
        let (kind, value) = attr?;
        if kind != NFTA_RULE_EXPRESSIONS {
            continue;
        }
        for expression in expressions(value) {
            let (expr_name, data) = expression?;
            let map = ExprAttrs::new(data)?;
            let get = |k: u16| {
                map.get(k).ok_or_else(|| {
                    unsupported(chain, format!("a {expr_name} expression without attribute {k}"))
                })
            };
            match expr_name {
                "counter" => {}
                "meta" => {
                    loaded = Some(Loaded::Meta(be32(get(NFTA_META_KEY)?)?));
                    mask = None;
                }
                "payload" => {
                    loaded = Some(Loaded::Payload {
                        base: be32(get(NFTA_PAYLOAD_BASE)?)?,
                        offset: be32(get(NFTA_PAYLOAD_OFFSET)?)?,
                        len: be32(get(NFTA_PAYLOAD_LEN)?)?,
                    });
                    mask = None;
                }
                "bitwise" => {
                    let xor = data_value(get(NFTA_BITWISE_XOR)?)?;
                    if xor.iter().any(|&b| b != 0) {
                        return Err(unsupported(chain, "a bitwise expression with a non-zero xor"));
                    }
                    mask = Some(data_value(get(NFTA_BITWISE_MASK)?)?.to_vec());
                }
                "cmp" => {
                    let op = be32(get(NFTA_CMP_OP)?)?;
                    let invert = match op {
                        NFT_CMP_EQ => false,
                        NFT_CMP_NEQ => true,
                        _ => return Err(unsupported(chain, format!("a comparison with operator {op}"))),
                    };
                    let right = data_value(get(NFTA_CMP_DATA)?)?;
                    let what = loaded
                        .take()
                        .ok_or_else(|| unsupported(chain, "a comparison of nothing loaded"))?;
                    compare(&mut parts, family, chain, what, mask.take(), invert, right)?;
                }
                "range" => {
                    let op = be32(get(NFTA_RANGE_OP)?)?;
                    let invert = match op {
                        NFT_CMP_EQ => false,
                        NFT_CMP_NEQ => true,
                        _ => return Err(unsupported(chain, format!("a range with operator {op}"))),
                    };
                    let from = port(data_value(get(NFTA_RANGE_FROM_DATA)?)?);
                    let to = port(data_value(get(NFTA_RANGE_TO_DATA)?)?);
                    match (loaded.take(), mask.take(), from, to) {
                        (
                            Some(Loaded::Payload {
                                base: NFT_PAYLOAD_TRANSPORT_HEADER,
                                offset,
                                len: 2,
                            }),
                            None,
                            Some(from),
                            Some(to),
                        ) => {
                            port_match(&mut parts, chain, offset, (invert, from, to))?;
                        }
                        _ => return Err(unsupported(chain, "a range of something other than a port")),
                    }
                }
                "immediate" => {
                    if be32(get(NFTA_IMMEDIATE_DREG)?)? != 0 {
                        return Err(unsupported(chain, "an immediate value that is not a verdict"));
                    }
                    let verdict = map
                        .get(NFTA_IMMEDIATE_DATA)
                        .ok_or_else(|| unsupported(chain, "an immediate without data"))?;
                    let mut code = None;
                    for a in Attrs::new(verdict) {
                        if let (NFTA_DATA_VERDICT, v) = a? {
                            code = Some(read_verdict(v)?);
                        }
                    }
                    let (code, target) =
                        code.ok_or_else(|| unsupported(chain, "an immediate without a verdict"))?;
                    parts.target = match (code, target) {
                        (NF_ACCEPT, _) => " -j ACCEPT".into(),
                        (NF_DROP, _) => " -j DROP".into(),
                        (NFT_RETURN, _) => " -j RETURN".into(),
                        (NFT_JUMP, Some(to)) => format!(" -j {to}"),
                        (NFT_GOTO, Some(to)) => format!(" -g {to}"),
                        (code, _) => return Err(unsupported(chain, format!("verdict {code}"))),
                    };
                }
                "match" => {
                    let (ext, rev, info) = xt(chain, &map)?;
                    let text = xt_match(family, chain, ext, rev, info)?;
                    parts.matches.push(Match::Text(text));
                }
                "target" => {
                    let (ext, rev, info) = xt(chain, &map)?;
                    parts.target = xt_target(family, chain, ext, rev, info)?;
                }
                other => return Err(unsupported(chain, format!("the {other} expression"))),
            }
        }
    }
    if loaded.is_some() {
        return Err(unsupported(chain, "a field loaded and never compared"));
    }
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
            Match::Ports(ports) => {
                let proto = match parts.proto {
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
            }
        }
    }
    out.push_str(&parts.target);
    Ok(())
}

fn port(bytes: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(bytes.get(..2)?.try_into().ok()?))
}

/// A comparison of what was loaded: an address, an interface, the protocol, a port or
/// the packet mark, as iptables-nft translates them.
fn compare(
    parts: &mut RuleParts,
    family: Family,
    chain: &str,
    what: Loaded,
    mask: Option<Vec<u8>>,
    invert: bool,
    right: &[u8],
) -> Result<(), DecodeError> {
    let (src_offset, dst_offset, width) = match family {
        Family::Ipv4 => (12, 16, 4),
        Family::Ipv6 => (8, 24, 16),
    };
    match what {
        Loaded::Meta(NFT_META_L4PROTO) if mask.is_none() && right.len() == 1 => {
            parts.proto = Some((invert, right[0]));
        }
        Loaded::Meta(key @ (NFT_META_IIFNAME | NFT_META_OIFNAME)) if mask.is_none() => {
            // An exact name is compared with its NUL; a `+` wildcard without it.
            let name = match right.iter().position(|&b| b == 0) {
                Some(end) => String::from_utf8_lossy(&right[..end]).into_owned(),
                None => format!("{}+", String::from_utf8_lossy(right)),
            };
            let slot = if key == NFT_META_IIFNAME {
                &mut parts.iif
            } else {
                &mut parts.oif
            };
            *slot = Some((invert, name));
        }
        Loaded::Meta(NFT_META_MARK) if right.len() == 4 => {
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
            parts.matches.push(Match::Text(text));
        }
        Loaded::Payload {
            base: NFT_PAYLOAD_NETWORK_HEADER,
            offset,
            len,
        } if (offset == src_offset || offset == dst_offset)
            && len as usize <= width
            && right.len() == len as usize =>
        {
            let prefix = match &mask {
                None => len * 8,
                Some(mask) => prefix_len(mask)
                    .ok_or_else(|| unsupported(chain, "an address mask that is not a prefix"))?,
            };
            let mut bytes = [0u8; 16];
            bytes[..right.len()].copy_from_slice(right);
            let address = match family {
                Family::Ipv4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
                Family::Ipv6 => IpAddr::V6(Ipv6Addr::from(bytes)),
            };
            let slot = if offset == src_offset {
                &mut parts.src
            } else {
                &mut parts.dst
            };
            *slot = Some((invert, format!("{address}/{prefix}")));
        }
        Loaded::Payload {
            base: NFT_PAYLOAD_TRANSPORT_HEADER,
            offset,
            len: 2,
        } if mask.is_none() => {
            let value = port(right).ok_or_else(|| unsupported(chain, "a port of the wrong size"))?;
            port_match(parts, chain, offset, (invert, value, value))?;
        }
        other => return Err(unsupported(chain, format!("a comparison of {other:?}"))),
    }
    Ok(())
}

fn port_match(
    parts: &mut RuleParts,
    chain: &str,
    offset: u32,
    port: (bool, u16, u16),
) -> Result<(), DecodeError> {
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

fn xt<'a>(chain: &str, map: &ExprAttrs<'a>) -> Result<(&'a str, u32, &'a [u8]), DecodeError> {
    let field = |k| {
        map.get(k)
            .ok_or_else(|| unsupported(chain, "an xtables expression without its name, revision or data"))
    };
    Ok((
        name(field(NFTA_MATCH_NAME)?)?,
        be32(field(NFTA_MATCH_REV)?)?,
        field(NFTA_MATCH_INFO)?,
    ))
}
