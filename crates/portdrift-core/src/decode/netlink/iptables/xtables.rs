//! xtables `match`/`target` expressions: the extension's binary structure printed as
//! its own `save` function prints it, for the extensions kube-proxy and the CNI
//! hostport plugin use.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::unsupported;
use crate::decode::netlink::DecodeError;
use crate::heart::model::Family;

/// Reads the extension's structure, in the kernel's (host) byte order unless noted.
struct Info<'a> {
    data: &'a [u8],
    chain: &'a str,
    ext: &'a str,
}

impl<'a> Info<'a> {
    fn bytes(&self, at: usize, len: usize) -> Result<&'a [u8], DecodeError> {
        self.data.get(at..at + len).ok_or_else(|| {
            unsupported(
                self.chain,
                format!("a {} structure of {} bytes", self.ext, self.data.len()),
            )
        })
    }
    fn u8(&self, at: usize) -> Result<u8, DecodeError> {
        Ok(self.bytes(at, 1)?[0])
    }
    fn u16(&self, at: usize) -> Result<u16, DecodeError> {
        let b = self.bytes(at, 2)?;
        Ok(u16::from_ne_bytes([b[0], b[1]]))
    }
    fn be16(&self, at: usize) -> Result<u16, DecodeError> {
        let b = self.bytes(at, 2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&self, at: usize) -> Result<u32, DecodeError> {
        let b = self.bytes(at, 4)?;
        Ok(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// A NUL-terminated string in a fixed-size field.
    fn string(&self, at: usize, len: usize) -> Result<String, DecodeError> {
        let b = self.bytes(at, len)?;
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        Ok(String::from_utf8_lossy(&b[..end]).into_owned())
    }
    fn address(&self, at: usize, family: Family) -> Result<IpAddr, DecodeError> {
        let b = self.bytes(at, 16)?;
        Ok(match family {
            Family::Ipv4 => IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])),
            Family::Ipv6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap_or_default())),
        })
    }
    fn unsupported(&self, what: impl std::fmt::Display) -> DecodeError {
        unsupported(self.chain, format!("{} {what}", self.ext))
    }
}

/// `xtables_save_string`: bare when only `[A-Za-z0-9_-]`, else quoted with `"`, `\`
/// and `'` escaped.
pub(super) fn save_string(out: &mut String, value: &str) {
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
pub(super) fn xt_match(
    family: Family,
    chain: &str,
    ext: &str,
    rev: u32,
    data: &[u8],
) -> Result<String, DecodeError> {
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

pub(super) fn address_types(mask: u16) -> String {
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
pub(super) fn xt_target(
    family: Family,
    chain: &str,
    ext: &str,
    rev: u32,
    data: &[u8],
) -> Result<String, DecodeError> {
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
            let ip = |at| -> Result<IpAddr, DecodeError> {
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

/// A port option (`--dport 80`, `! --sport 1:2`) as the tcp, udp and sctp matches print it.
pub(super) fn write_port_option(out: &mut String, flag: &str, invert: bool, from: u16, to: u16) {
    if invert {
        out.push_str(" !");
    }
    if from == to {
        let _ = write!(out, " --{flag} {from}");
    } else {
        let _ = write!(out, " --{flag} {from}:{to}");
    }
}
