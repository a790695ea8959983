//! iptables-nft's tables read straight from the kernel over netlink and rendered line
//! by line exactly as `iptables-nft-save` prints them, into the same parser the tool's
//! output goes through: both ways give the same rules, texts and line numbers, so a
//! finding, a repair's rule spec and a snapshot read the same either way.
//!
//! Why: on a 10,000-Service node `iptables-nft-save` costs tens of seconds of CPU
//! here (README, Performance), most of it the tool's own bookkeeping of 66,000
//! chains; the kernel answers the same questions in about a second when each chain's
//! rules are asked for by name.
//!
//! iptables-nft stores a rule as nf_tables expressions: the address, interface,
//! protocol, port and mark matches it translates natively (a field loaded into a
//! register, maybe masked, then compared), and the rest as xtables `match`/`target`
//! expressions carrying the extension's binary structure (`comment`, `statistic`,
//! `addrtype`, `conntrack`, `recent`, `nfacct`, `multiport`, `sctp`; `DNAT`, `MARK`,
//! `MASQUERADE`, `REJECT`). Each form kube-proxy and the CNI hostport plugin write is
//! decoded and printed as the iptables extension's own `save` function prints it.
//! Anything else (another extension, a structure of an unexpected size, an option this
//! does not print) is [`NetlinkError::Unsupported`]: the caller reads that family with
//! `iptables-nft-save` instead, so an unknown rule is never printed wrong.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::decode::iptables::{LineParser, SourceHint};
use crate::heart::model::{Backend, Family, RuleSource};
use crate::sources::netlink::blocks::{Plan, Readers, read_in_order};
use crate::sources::netlink::{
    Attrs, Conn, NFPROTO_IPV4, NFPROTO_IPV6, NFTA_DATA_VERDICT, NetlinkError, NetlinkLimits, attr_map, be32,
    be64, data_value, expressions, name, prefix_len, read_verdict,
};

const NFT_MSG_GETTABLE: u8 = 1;
const NFT_MSG_GETCHAIN: u8 = 4;
const NFT_MSG_GETRULE: u8 = 7;
const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_COUNTERS: u16 = 8;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_COUNTER_BYTES: u16 = 1;
const NFTA_COUNTER_PACKETS: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
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
// Verdicts (linux/netfilter.h, nf_tables.h).
const NF_DROP: i32 = 0;
const NF_ACCEPT: i32 = 1;
const NFT_JUMP: i32 = -3;
const NFT_GOTO: i32 = -4;
const NFT_RETURN: i32 = -5;

/// iptables-nft's tables, in the order `iptables-nft-save` prints them (its
/// `enum nft_table_type`).
const TABLES: [&str; 5] = ["mangle", "security", "raw", "filter", "nat"];
/// Base chains by hook number, the order `iptables-nft-save` declares them in.
const HOOKS: usize = 5;

/// How often a read is retried when the ruleset changed while it was read.
const ATTEMPTS: u32 = 3;

/// Reads one family's iptables-nft tables from the current network namespace and parses
/// them as `iptables-nft-save`'s output. None: the family has no iptables-nft table
/// (the tool would print nothing). Also returns the bytes of netlink messages read.
pub fn read_rules_netlink(
    family: Family,
    origin: &str,
    limits: NetlinkLimits,
) -> Result<(Option<RuleSource>, u64), NetlinkError> {
    let hint = SourceHint {
        backend: Some(Backend::IptablesNft),
        family: Some(family),
    };
    let deadline = Instant::now() + limits.timeout;
    let mut conn = Conn::open(limits, deadline)?;
    let extra_bytes = AtomicU64::new(0);
    for _ in 0..ATTEMPTS {
        let before = conn.generation()?;
        let mut parser = LineParser::new(origin, hint);
        let read = Readers {
            limits,
            deadline,
            bytes: &extra_bytes,
        };
        match render_family(&mut conn, read, family, &mut |line| parser.line(line)) {
            Err(NetlinkError::Unstable(_)) => continue,
            Err(e) => return Err(e),
            Ok(()) if conn.generation()? == before => {
                let parsed = (parser.lines() > 0).then(|| parser.finish());
                return Ok((parsed, conn.bytes + extra_bytes.load(Ordering::Relaxed)));
            }
            // Changed between two dumps: the pieces may not fit together. Again.
            Ok(()) => continue,
        }
    }
    Err(NetlinkError::Unstable(ATTEMPTS))
}

/// Renders one family's tables as `iptables-nft-save` prints them (without its
/// timestamped header and footer comments), handing each line to `sink`.
pub fn render_save(
    family: Family,
    limits: NetlinkLimits,
    sink: &mut dyn FnMut(&str),
) -> Result<(), NetlinkError> {
    let deadline = Instant::now() + limits.timeout;
    let mut conn = Conn::open(limits, deadline)?;
    let bytes = AtomicU64::new(0);
    let read = Readers {
        limits,
        deadline,
        bytes: &bytes,
    };
    render_family(&mut conn, read, family, sink)
}

/// Chains per unit of work of the parallel readers.
const BLOCK: usize = 128;
/// How many blocks the readers may run ahead of the parser: bounds the text held
/// (about 40 KiB a block on a kube-proxy node).
const LOOKAHEAD: usize = 8;

/// Appends the rules of one chain, each line ending in `\n`.
fn render_chain(
    conn: &mut Conn,
    family: Family,
    table_attr: &[u8],
    chain: &str,
    out: &mut String,
) -> Result<(), NetlinkError> {
    // One dump per chain, not one for the table: the kernel resumes a table-wide rule
    // dump by walking every rule before the resume point again, once per datagram,
    // which is quadratic (31 s for the nat table of a 10,000-Service node, against
    // about two chain by chain, where it finds each chain by hash).
    let mut chain_attr = chain.as_bytes().to_vec();
    chain_attr.push(0);
    let filter = [(NFTA_RULE_TABLE, table_attr), (NFTA_RULE_CHAIN, &chain_attr[..])];
    let mut failed = None;
    conn.exchange(
        "the rules",
        NFT_MSG_GETRULE,
        true,
        nfproto(family),
        &filter,
        |attrs| {
            match render_rule(out, family, chain, attrs) {
                Ok(()) => out.push('\n'),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
            Ok(())
        },
    )?;
    failed.map_or(Ok(()), Err)
}

/// Hands every chain's rules to `sink` in the chains' order. A large table is read
/// by several sockets at once, block by block (two sockets nearly halve a
/// 10,000-Service node's read on two cores: 1.9 s to 1.05 s for its nat table's dumps).
fn render_rules(
    conn: &mut Conn,
    readers: Readers<'_>,
    family: Family,
    table_attr: &[u8],
    chains: &[ChainInfo],
    sink: &mut dyn FnMut(&str),
) -> Result<(), NetlinkError> {
    let plan = Plan {
        block: BLOCK,
        lookahead: LOOKAHEAD,
    };
    read_in_order(
        conn,
        readers,
        chains,
        plan,
        &|conn, chain: &ChainInfo, text: &mut String| {
            render_chain(conn, family, table_attr, &chain.name, text)
        },
        &mut |text: &mut String| {
            text.lines().for_each(&mut *sink);
            text.clear();
            Ok(())
        },
    )
}

#[derive(Debug, Default)]
struct ChainInfo {
    name: String,
    hook: Option<u32>,
    policy: Option<u32>,
    packets: u64,
    bytes: u64,
}

fn render_family(
    conn: &mut Conn,
    readers: Readers<'_>,
    family: Family,
    sink: &mut dyn FnMut(&str),
) -> Result<(), NetlinkError> {
    let nfproto = nfproto(family);
    let mut present = Vec::new();
    for table in TABLES {
        let mut attr = table.as_bytes().to_vec();
        attr.push(0);
        match conn.exchange(
            "the table",
            NFT_MSG_GETTABLE,
            false,
            nfproto,
            &[(NFTA_TABLE_NAME, &attr)],
            |_| Ok(()),
        ) {
            Err(NetlinkError::Refused { source, .. }) if source.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e),
            Ok(()) => present.push(table),
        }
    }
    if present.is_empty() {
        return Ok(());
    }
    // One chain dump for the family (the kernel filters chain dumps by family only),
    // sorted into the tables.
    let mut chains: Vec<Vec<ChainInfo>> = present.iter().map(|_| Vec::new()).collect();
    conn.exchange("the chains", NFT_MSG_GETCHAIN, true, nfproto, &[], |attrs| {
        let (table, chain) = read_chain(attrs)?;
        if let Some(i) = present.iter().position(|t| *t == table) {
            chains[i].push(chain);
        }
        Ok(())
    })?;
    sink(&format!(
        "# Generated by {} (nf_tables), read over netlink",
        tool_name(family)
    ));
    let mut line = String::with_capacity(256);
    for (table, mut chains) in present.into_iter().zip(chains) {
        // Base chains in hook order, then the others by name, as the tool prints them.
        chains.sort_by(|a, b| match (a.hook, b.hook) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => a.name.as_bytes().cmp(b.name.as_bytes()),
        });
        if chains.iter().filter(|c| c.hook.is_some()).count() > HOOKS {
            return Err(NetlinkError::Unsupported(format!(
                "table {table} has more base chains than iptables-nft makes"
            )));
        }
        sink(&format!("*{table}"));
        for chain in &chains {
            line.clear();
            match (chain.hook, chain.policy) {
                (Some(_), Some(policy)) => {
                    let policy = match policy as i32 {
                        NF_ACCEPT => "ACCEPT",
                        NF_DROP => "DROP",
                        _ => {
                            return Err(NetlinkError::Unsupported(format!(
                                "chain {} has a policy iptables does not print",
                                chain.name
                            )));
                        }
                    };
                    let _ = write!(
                        line,
                        ":{} {policy} [{}:{}]",
                        chain.name, chain.packets, chain.bytes
                    );
                }
                _ => {
                    let _ = write!(line, ":{} - [0:0]", chain.name);
                }
            }
            sink(&line);
        }
        let mut table_attr = table.as_bytes().to_vec();
        table_attr.push(0);
        render_rules(conn, readers, family, &table_attr, &chains, sink)?;
        sink("COMMIT");
    }
    sink("# Completed");
    Ok(())
}

fn nfproto(family: Family) -> u8 {
    match family {
        Family::Ipv4 => NFPROTO_IPV4,
        Family::Ipv6 => NFPROTO_IPV6,
    }
}

fn tool_name(family: Family) -> &'static str {
    match family {
        Family::Ipv4 => "iptables-nft",
        Family::Ipv6 => "ip6tables-nft",
    }
}

fn read_chain(attrs: &[u8]) -> Result<(String, ChainInfo), NetlinkError> {
    let mut table = String::new();
    let mut chain = ChainInfo::default();
    for attr in Attrs::new(attrs) {
        let (kind, value) = attr?;
        match kind {
            NFTA_CHAIN_TABLE => table = name(value)?.to_string(),
            NFTA_CHAIN_NAME => chain.name = name(value)?.to_string(),
            NFTA_CHAIN_POLICY => chain.policy = Some(be32(value)?),
            NFTA_CHAIN_HOOK => {
                for hook in Attrs::new(value) {
                    if let (NFTA_HOOK_HOOKNUM, v) = hook? {
                        chain.hook = Some(be32(v)?);
                    }
                }
            }
            NFTA_CHAIN_COUNTERS => {
                for counter in Attrs::new(value) {
                    match counter? {
                        (NFTA_COUNTER_PACKETS, v) => chain.packets = be64(v)?,
                        (NFTA_COUNTER_BYTES, v) => chain.bytes = be64(v)?,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok((table, chain))
}

// ------------------------------------------------------------------ one rule

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

fn unsupported(chain: &str, what: impl std::fmt::Display) -> NetlinkError {
    NetlinkError::Unsupported(format!(
        "a rule in chain {chain} that this reader does not print: {what}"
    ))
}

fn render_rule(out: &mut String, family: Family, chain: &str, attrs: &[u8]) -> Result<(), NetlinkError> {
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
            let map = attr_map(data)?;
            let get = |k: u16| {
                map.get(&k).copied().ok_or_else(|| {
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
                        .get(&NFTA_IMMEDIATE_DATA)
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

fn write_port_option(out: &mut String, flag: &str, invert: bool, from: u16, to: u16) {
    if invert {
        out.push_str(" !");
    }
    if from == to {
        let _ = write!(out, " --{flag} {from}");
    } else {
        let _ = write!(out, " --{flag} {from}:{to}");
    }
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
) -> Result<(), NetlinkError> {
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
) -> Result<(), NetlinkError> {
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

fn xt<'a>(
    chain: &str,
    map: &std::collections::HashMap<u16, &'a [u8]>,
) -> Result<(&'a str, u32, &'a [u8]), NetlinkError> {
    let field = |k| {
        map.get(&k)
            .copied()
            .ok_or_else(|| unsupported(chain, "an xtables expression without its name, revision or data"))
    };
    Ok((
        name(field(NFTA_MATCH_NAME)?)?,
        be32(field(NFTA_MATCH_REV)?)?,
        field(NFTA_MATCH_INFO)?,
    ))
}

// ------------------------------------------------------------------ xtables structures

/// Reads the extension's structure, in the kernel's (host) byte order unless noted.
struct Info<'a> {
    data: &'a [u8],
    chain: &'a str,
    ext: &'a str,
}

impl<'a> Info<'a> {
    fn bytes(&self, at: usize, len: usize) -> Result<&'a [u8], NetlinkError> {
        self.data.get(at..at + len).ok_or_else(|| {
            unsupported(
                self.chain,
                format!("a {} structure of {} bytes", self.ext, self.data.len()),
            )
        })
    }
    fn u8(&self, at: usize) -> Result<u8, NetlinkError> {
        Ok(self.bytes(at, 1)?[0])
    }
    fn u16(&self, at: usize) -> Result<u16, NetlinkError> {
        let b = self.bytes(at, 2)?;
        Ok(u16::from_ne_bytes([b[0], b[1]]))
    }
    fn be16(&self, at: usize) -> Result<u16, NetlinkError> {
        let b = self.bytes(at, 2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&self, at: usize) -> Result<u32, NetlinkError> {
        let b = self.bytes(at, 4)?;
        Ok(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// A NUL-terminated string in a fixed-size field.
    fn string(&self, at: usize, len: usize) -> Result<String, NetlinkError> {
        let b = self.bytes(at, len)?;
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        Ok(String::from_utf8_lossy(&b[..end]).into_owned())
    }
    fn address(&self, at: usize, family: Family) -> Result<IpAddr, NetlinkError> {
        let b = self.bytes(at, 16)?;
        Ok(match family {
            Family::Ipv4 => IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])),
            Family::Ipv6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap_or_default())),
        })
    }
    fn unsupported(&self, what: impl std::fmt::Display) -> NetlinkError {
        unsupported(self.chain, format!("{} {what}", self.ext))
    }
}

/// `xtables_save_string`: bare when only `[A-Za-z0-9_-]`, else quoted with `"`, `\`
/// and `'` escaped.
fn save_string(out: &mut String, value: &str) {
    let plain = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    out.push(' ');
    if plain {
        out.push_str(value);
        return;
    }
    out.push('"');
    for c in value.chars() {
        if matches!(c, '"' | '\\' | '\'') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// One xtables match, printed as ` -m NAME` and the extension's `save` output.
fn xt_match(family: Family, chain: &str, ext: &str, rev: u32, data: &[u8]) -> Result<String, NetlinkError> {
    let info = Info { data, chain, ext };
    let mut out = format!(" -m {ext}");
    match (ext, rev) {
        ("comment", 0) => {
            out.push_str(" --comment");
            save_string(&mut out, &info.string(0, 256)?);
        }
        ("statistic", 0) => {
            let (mode, flags) = (info.u16(0)?, info.u16(2)?);
            let invert = if flags & 1 != 0 { " !" } else { "" };
            match mode {
                0 => {
                    let probability = f64::from(info.u32(4)?) / f64::from(0x8000_0000u32);
                    let _ = write!(out, " --mode random{invert} --probability {probability:.11}");
                }
                1 => {
                    let (every, packet) = (info.u32(4)?, info.u32(8)?);
                    let _ = write!(out, " --mode nth{invert} --every {} --packet {packet}", every + 1);
                }
                _ => return Err(info.unsupported(format!("mode {mode}"))),
            }
        }
        ("addrtype", 1) => {
            let (source, dest, flags) = (info.u16(0)?, info.u16(2)?, info.u32(4)?);
            for (types, invert, option) in [
                (source, flags & 1 != 0, "--src-type"),
                (dest, flags & 2 != 0, "--dst-type"),
            ] {
                if types != 0 {
                    if invert {
                        out.push_str(" !");
                    }
                    let _ = write!(out, " {option} {}", address_types(types));
                }
            }
            if flags & 4 != 0 {
                out.push_str(" --limit-iface-in");
            }
            if flags & 8 != 0 {
                out.push_str(" --limit-iface-out");
            }
        }
        ("conntrack", 3) => {
            const STATE: u16 = 1;
            let (match_flags, invert_flags, states) = (info.u16(146)?, info.u16(148)?, info.u16(150)?);
            if match_flags != STATE {
                return Err(info.unsupported(format!("with match flags {match_flags:#x}")));
            }
            if invert_flags & STATE != 0 {
                out.push_str(" !");
            }
            out.push_str(" --ctstate ");
            let names = [
                (1, "INVALID"),
                (1 << 3, "NEW"),
                (1 << 2, "RELATED"),
                (1 << 1, "ESTABLISHED"),
                (1 << 8, "UNTRACKED"),
                (1 << 6, "SNAT"),
                (1 << 7, "DNAT"),
            ];
            let shown: Vec<&str> = names
                .iter()
                .filter(|(bit, _)| states & bit != 0)
                .map(|(_, n)| *n)
                .collect();
            out.push_str(&shown.join(","));
        }
        ("recent", 1) => {
            let (seconds, hit_count, check_set, invert) =
                (info.u32(0)?, info.u32(4)?, info.u8(8)?, info.u8(9)?);
            if invert != 0 {
                out.push_str(" !");
            }
            for (bit, option) in [
                (2, " --set"),
                (1, " --rcheck"),
                (4, " --update"),
                (8, " --remove"),
            ] {
                if check_set & bit != 0 {
                    out.push_str(option);
                }
            }
            if seconds != 0 {
                let _ = write!(out, " --seconds {seconds}");
            }
            if check_set & 32 != 0 {
                out.push_str(" --reap");
            }
            if hit_count != 0 {
                let _ = write!(out, " --hitcount {hit_count}");
            }
            if check_set & 16 != 0 {
                out.push_str(" --rttl");
            }
            let _ = write!(out, " --name {}", info.string(10, 200)?);
            let _ = write!(out, " --mask {}", info.address(212, family)?);
            match info.u8(210)? {
                0 => out.push_str(" --rsource"),
                1 => out.push_str(" --rdest"),
                side => return Err(info.unsupported(format!("side {side}"))),
            }
        }
        ("nfacct", 0 | 1) => {
            out.push_str(" --nfacct-name ");
            save_string(&mut out, &info.string(0, 32)?);
        }
        ("multiport", 1) => {
            let (flags, count) = (info.u8(0)?, usize::from(info.u8(1)?));
            if count > 15 {
                return Err(info.unsupported(format!("with {count} ports")));
            }
            if info.u8(47)? != 0 {
                out.push_str(" !");
            }
            out.push_str(match flags {
                0 => " --sports ",
                1 => " --dports ",
                2 => " --ports ",
                _ => return Err(info.unsupported(format!("flags {flags}"))),
            });
            let mut i = 0;
            while i < count {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{}", info.u16(2 + 2 * i)?);
                if info.u8(32 + i)? != 0 {
                    i += 1;
                    let _ = write!(out, ":{}", info.u16(2 + 2 * i)?);
                }
                i += 1;
            }
        }
        ("tcp" | "udp", 0) => {
            // struct xt_tcp: ports, then option, flag mask, flag compare, inversions;
            // struct xt_udp: ports, then inversions. TCP flags and options are not
            // printed here.
            let invflags_at = if ext == "tcp" { 11 } else { 8 };
            if ext == "tcp" && (info.u8(8)? != 0 || info.u8(9)? != 0 || info.u8(10)? != 0) {
                return Err(info.unsupported("with TCP flags or options"));
            }
            let invflags = info.u8(invflags_at)?;
            if invflags & !3 != 0 {
                return Err(info.unsupported(format!("with inversion flags {invflags:#x}")));
            }
            for (at, invert_bit, flag) in [(0, 1, "sport"), (4, 2, "dport")] {
                let (from, to) = (info.u16(at)?, info.u16(at + 2)?);
                if (from, to) != (0, u16::MAX) {
                    write_port_option(&mut out, flag, invflags & invert_bit != 0, from, to);
                }
            }
        }
        ("sctp", 0 | 1) => {
            const SRC_PORTS: u32 = 1;
            const DEST_PORTS: u32 = 2;
            let (flags, invflags) = (info.u32(284)?, info.u32(288)?);
            if flags & !(SRC_PORTS | DEST_PORTS) != 0 {
                return Err(info.unsupported(format!("with flags {flags:#x}")));
            }
            for (bit, at, flag) in [(SRC_PORTS, 4, "sport"), (DEST_PORTS, 0, "dport")] {
                if flags & bit != 0 {
                    write_port_option(
                        &mut out,
                        flag,
                        invflags & bit != 0,
                        info.u16(at)?,
                        info.u16(at + 2)?,
                    );
                }
            }
        }
        _ => return Err(info.unsupported(format!("revision {rev} (match)"))),
    }
    Ok(out)
}

fn address_types(mask: u16) -> String {
    const NAMES: [&str; 12] = [
        "UNSPEC",
        "UNICAST",
        "LOCAL",
        "BROADCAST",
        "ANYCAST",
        "MULTICAST",
        "BLACKHOLE",
        "UNREACHABLE",
        "PROHIBIT",
        "THROW",
        "NAT",
        "XRESOLVE",
    ];
    NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join(",")
}

// nf_nat range flags (linux/netfilter/nf_nat.h).
const NAT_MAP_IPS: u32 = 1;
const NAT_PROTO_SPECIFIED: u32 = 2;
const NAT_PROTO_RANDOM: u32 = 4;
const NAT_PERSISTENT: u32 = 8;
const NAT_PROTO_RANDOM_FULLY: u32 = 16;

/// One xtables target, printed as ` -j NAME` and the extension's `save` output.
fn xt_target(family: Family, chain: &str, ext: &str, rev: u32, data: &[u8]) -> Result<String, NetlinkError> {
    let info = Info { data, chain, ext };
    let mut out = format!(" -j {ext}");
    match (ext, rev) {
        ("DNAT", 1 | 2) => {
            // struct nf_nat_range(2): flags, min and max address, min and max port.
            let flags = info.u32(0)?;
            if flags
                & !(NAT_MAP_IPS
                    | NAT_PROTO_SPECIFIED
                    | NAT_PROTO_RANDOM
                    | NAT_PERSISTENT
                    | NAT_PROTO_RANDOM_FULLY)
                != 0
            {
                return Err(info.unsupported(format!("with flags {flags:#x}")));
            }
            let (min, max) = (info.address(4, family)?, info.address(20, family)?);
            let ports = (info.be16(36)?, info.be16(38)?);
            let brackets = family == Family::Ipv6 && flags & NAT_PROTO_SPECIFIED != 0;
            write_nat_range(&mut out, flags, (min, max), ports, brackets);
        }
        ("DNAT", 0) if family == Family::Ipv4 => {
            // struct nf_nat_ipv4_multi_range_compat with one range.
            if info.u32(0)? != 1 {
                return Err(info.unsupported("with several ranges"));
            }
            let flags = info.u32(4)?;
            let ip = |at| -> Result<IpAddr, NetlinkError> {
                let b = info.bytes(at, 4)?;
                Ok(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])))
            };
            let ports = (info.be16(16)?, info.be16(18)?);
            write_nat_range(&mut out, flags, (ip(8)?, ip(12)?), ports, false);
        }
        ("MASQUERADE", 0) => {
            // IPv4: nf_nat_ipv4_multi_range_compat (flags after the range count, ports
            // at 16); IPv6: nf_nat_range (flags first, ports at 36).
            let (flags, ports_at) = match family {
                Family::Ipv4 => (info.u32(4)?, 16),
                Family::Ipv6 => (info.u32(0)?, 36),
            };
            if flags & NAT_PROTO_SPECIFIED != 0 {
                let (from, to) = (info.be16(ports_at)?, info.be16(ports_at + 2)?);
                let _ = write!(out, " --to-ports {from}");
                if to != from {
                    let _ = write!(out, "-{to}");
                }
            }
            if flags & NAT_PROTO_RANDOM != 0 {
                out.push_str(" --random");
            }
            if flags & NAT_PROTO_RANDOM_FULLY != 0 {
                out.push_str(" --random-fully");
            }
        }
        ("MARK", 2) => {
            let _ = write!(out, " --set-xmark 0x{:x}/0x{:x}", info.u32(0)?, info.u32(4)?);
        }
        ("REJECT", 0) => {
            let with = info.u32(0)?;
            let name = match family {
                Family::Ipv4 => [
                    "icmp-net-unreachable",
                    "icmp-host-unreachable",
                    "icmp-proto-unreachable",
                    "icmp-port-unreachable",
                    "",
                    "icmp-net-prohibited",
                    "icmp-host-prohibited",
                    "tcp-reset",
                    "icmp-admin-prohibited",
                ]
                .get(with as usize),
                Family::Ipv6 => [
                    "icmp6-no-route",
                    "icmp6-adm-prohibited",
                    "",
                    "icmp6-addr-unreachable",
                    "icmp6-port-unreachable",
                    "",
                    "tcp-reset",
                    "icmp6-policy-fail",
                    "icmp6-reject-route",
                ]
                .get(with as usize),
            }
            .filter(|n| !n.is_empty())
            .ok_or_else(|| info.unsupported(format!("reject-with {with}")))?;
            let _ = write!(out, " --reject-with {name}");
        }
        _ => return Err(info.unsupported(format!("revision {rev} (target)"))),
    }
    Ok(out)
}

/// `--to-destination` and the flags, as libxt_DNAT's `sprint_range` and `__NAT_print`
/// print them (rev 2's port-offset flag is refused by its caller; the older forms
/// cannot carry it).
fn write_nat_range(
    out: &mut String,
    flags: u32,
    (min, max): (IpAddr, IpAddr),
    ports: (u16, u16),
    brackets: bool,
) {
    let mut range = String::new();
    if flags & NAT_MAP_IPS != 0 {
        if brackets {
            range.push('[');
        }
        let _ = write!(range, "{min}");
        if min != max {
            let _ = write!(range, "-{max}");
        }
        if brackets {
            range.push(']');
        }
    }
    if flags & NAT_PROTO_SPECIFIED != 0 {
        let _ = write!(range, ":{}", ports.0);
        if ports.1 != ports.0 {
            let _ = write!(range, "-{}", ports.1);
        }
    }
    if !range.is_empty() {
        let _ = write!(out, " --to-destination {range}");
    }
    nat_flags(out, flags);
}

fn nat_flags(out: &mut String, flags: u32) {
    if flags & NAT_PROTO_RANDOM != 0 {
        out.push_str(" --random");
    }
    if flags & NAT_PROTO_RANDOM_FULLY != 0 {
        out.push_str(" --random-fully");
    }
    if flags & NAT_PERSISTENT != 0 {
        out.push_str(" --persistent");
    }
}

#[cfg(test)]
mod tests;
