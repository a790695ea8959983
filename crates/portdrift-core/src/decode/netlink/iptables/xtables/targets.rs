//! The xtables targets' decoders, one per (extension, revision), each over the
//! kernel's structure for it.

use std::fmt::Write as _;
use std::net::IpAddr;

use super::{Decode, Info};
use crate::decode::netlink::DecodeError;
use crate::heart::model::Family;

/// The decoder of a target's revision; None for one this reader does not print.
pub(super) fn decoder(ext: &str, rev: u32, family: Family) -> Option<Decode> {
    let decode: Decode = match (ext, rev) {
        ("DNAT", 1 | 2) => dnat_v1_v2,
        // Revision 0's structure is IPv4's only.
        ("DNAT", 0) if family == Family::Ipv4 => dnat_v0,
        ("MASQUERADE", 0) => masquerade_v0,
        ("MARK", 2) => mark_v2,
        ("REJECT", 0) => reject_v0,
        _ => return None,
    };
    Some(decode)
}

// The range flags (include/uapi/linux/netfilter/nf_nat.h).
const NF_NAT_RANGE_MAP_IPS: u32 = 1;
const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 2;
const NF_NAT_RANGE_PROTO_RANDOM: u32 = 4;
const NF_NAT_RANGE_PERSISTENT: u32 = 8;
const NF_NAT_RANGE_PROTO_RANDOM_FULLY: u32 = 16;
/// The flags `--to-destination` and its options print; DNAT refuses any other.
const DNAT_PRINTED_FLAGS: u32 = NF_NAT_RANGE_MAP_IPS
    | NF_NAT_RANGE_PROTO_SPECIFIED
    | NF_NAT_RANGE_PROTO_RANDOM
    | NF_NAT_RANGE_PERSISTENT
    | NF_NAT_RANGE_PROTO_RANDOM_FULLY;

// struct nf_nat_range, and nf_nat_range2 which extends it (include/uapi/linux/netfilter/nf_nat.h).
const NF_NAT_RANGE_FLAGS: usize = 0;
const NF_NAT_RANGE_MIN_ADDR: usize = 4;
const NF_NAT_RANGE_MAX_ADDR: usize = 20;
const NF_NAT_RANGE_MIN_PROTO: usize = 36;
const NF_NAT_RANGE_MAX_PROTO: usize = 38;

// struct nf_nat_ipv4_multi_range_compat and the struct nf_nat_ipv4_range in it
// (include/uapi/linux/netfilter/nf_nat.h).
const NF_NAT_IPV4_MULTI_RANGE_COMPAT_RANGESIZE: usize = 0;
const NF_NAT_IPV4_MULTI_RANGE_COMPAT_RANGE: usize = 4;
const NF_NAT_IPV4_RANGE_FLAGS: usize = 0;
const NF_NAT_IPV4_RANGE_MIN_IP: usize = 4;
const NF_NAT_IPV4_RANGE_MAX_IP: usize = 8;
const NF_NAT_IPV4_RANGE_MIN: usize = 12;
const NF_NAT_IPV4_RANGE_MAX: usize = 14;

/// The first range of an `nf_nat_ipv4_multi_range_compat`: its field at `offset`.
const fn compat_range(offset: usize) -> usize {
    NF_NAT_IPV4_MULTI_RANGE_COMPAT_RANGE + offset
}

/// Revision 1's `nf_nat_range` and revision 2's `nf_nat_range2` (its base port, the
/// only addition, is for the port-offset flag, which is refused).
fn dnat_v1_v2(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    let flags = info.u32(NF_NAT_RANGE_FLAGS)?;
    if flags & !DNAT_PRINTED_FLAGS != 0 {
        return Err(info.unsupported(format!("with flags {flags:#x}")));
    }
    let addresses = (
        info.address(NF_NAT_RANGE_MIN_ADDR)?,
        info.address(NF_NAT_RANGE_MAX_ADDR)?,
    );
    let ports = (
        info.be16(NF_NAT_RANGE_MIN_PROTO)?,
        info.be16(NF_NAT_RANGE_MAX_PROTO)?,
    );
    // An IPv6 address is bracketed only when a port follows it.
    let brackets = info.family == Family::Ipv6 && flags & NF_NAT_RANGE_PROTO_SPECIFIED != 0;
    write_nat_range(out, flags, addresses, ports, brackets);
    Ok(())
}

/// Revision 0's `nf_nat_ipv4_multi_range_compat`, with one range as iptables writes it.
fn dnat_v0(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    if info.u32(NF_NAT_IPV4_MULTI_RANGE_COMPAT_RANGESIZE)? != 1 {
        return Err(info.unsupported("with several ranges"));
    }
    let flags = info.u32(compat_range(NF_NAT_IPV4_RANGE_FLAGS))?;
    let ports = (
        info.be16(compat_range(NF_NAT_IPV4_RANGE_MIN))?,
        info.be16(compat_range(NF_NAT_IPV4_RANGE_MAX))?,
    );
    let addresses = (
        info.ipv4(compat_range(NF_NAT_IPV4_RANGE_MIN_IP))?,
        info.ipv4(compat_range(NF_NAT_IPV4_RANGE_MAX_IP))?,
    );
    write_nat_range(out, flags, addresses, ports, false);
    Ok(())
}

/// IPv4's structure is a one-range `nf_nat_ipv4_multi_range_compat`, IPv6's an
/// `nf_nat_range`.
fn masquerade_v0(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    let (flags_at, min_at, max_at) = match info.family {
        Family::Ipv4 => (
            compat_range(NF_NAT_IPV4_RANGE_FLAGS),
            compat_range(NF_NAT_IPV4_RANGE_MIN),
            compat_range(NF_NAT_IPV4_RANGE_MAX),
        ),
        Family::Ipv6 => (NF_NAT_RANGE_FLAGS, NF_NAT_RANGE_MIN_PROTO, NF_NAT_RANGE_MAX_PROTO),
    };
    let flags = info.u32(flags_at)?;
    if flags & NF_NAT_RANGE_PROTO_SPECIFIED != 0 {
        let (from, to) = (info.be16(min_at)?, info.be16(max_at)?);
        let _ = write!(out, " --to-ports {from}");
        if to != from {
            let _ = write!(out, "-{to}");
        }
    }
    if flags & NF_NAT_RANGE_PROTO_RANDOM != 0 {
        out.push_str(" --random");
    }
    if flags & NF_NAT_RANGE_PROTO_RANDOM_FULLY != 0 {
        out.push_str(" --random-fully");
    }
    Ok(())
}

/// `--to-destination` and the flags, as libxt_DNAT's `sprint_range` and `__NAT_print`
/// print them.
fn write_nat_range(
    out: &mut String,
    flags: u32,
    (min, max): (IpAddr, IpAddr),
    ports: (u16, u16),
    brackets: bool,
) {
    let mut range = String::new();
    if flags & NF_NAT_RANGE_MAP_IPS != 0 {
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
    if flags & NF_NAT_RANGE_PROTO_SPECIFIED != 0 {
        let _ = write!(range, ":{}", ports.0);
        if ports.1 != ports.0 {
            let _ = write!(range, "-{}", ports.1);
        }
    }
    if !range.is_empty() {
        let _ = write!(out, " --to-destination {range}");
    }
    write_nat_flags(out, flags);
}

fn write_nat_flags(out: &mut String, flags: u32) {
    if flags & NF_NAT_RANGE_PROTO_RANDOM != 0 {
        out.push_str(" --random");
    }
    if flags & NF_NAT_RANGE_PROTO_RANDOM_FULLY != 0 {
        out.push_str(" --random-fully");
    }
    if flags & NF_NAT_RANGE_PERSISTENT != 0 {
        out.push_str(" --persistent");
    }
}

// struct xt_mark_tginfo2 (include/uapi/linux/netfilter/xt_mark.h).
const XT_MARK_TGINFO2_MARK: usize = 0;
const XT_MARK_TGINFO2_MASK: usize = 4;

fn mark_v2(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    let mark = info.u32(XT_MARK_TGINFO2_MARK)?;
    let mask = info.u32(XT_MARK_TGINFO2_MASK)?;
    let _ = write!(out, " --set-xmark 0x{mark:x}/0x{mask:x}");
    Ok(())
}

// struct ipt_reject_info (include/uapi/linux/netfilter_ipv4/ipt_REJECT.h) and struct
// ip6t_reject_info (include/uapi/linux/netfilter_ipv6/ip6t_REJECT.h).
const REJECT_INFO_WITH: usize = 0;
/// `enum ipt_reject_with` as libxt_REJECT names it; "" for a value it does not print.
const IPT_REJECT_WITH: [&str; 9] = [
    "icmp-net-unreachable",
    "icmp-host-unreachable",
    "icmp-proto-unreachable",
    "icmp-port-unreachable",
    "",
    "icmp-net-prohibited",
    "icmp-host-prohibited",
    "tcp-reset",
    "icmp-admin-prohibited",
];
/// `enum ip6t_reject_with` as libip6t_REJECT names it; "" for a value it does not print.
const IP6T_REJECT_WITH: [&str; 9] = [
    "icmp6-no-route",
    "icmp6-adm-prohibited",
    "",
    "icmp6-addr-unreachable",
    "icmp6-port-unreachable",
    "",
    "tcp-reset",
    "icmp6-policy-fail",
    "icmp6-reject-route",
];

fn reject_v0(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    let with = info.u32(REJECT_INFO_WITH)?;
    let names = match info.family {
        Family::Ipv4 => &IPT_REJECT_WITH,
        Family::Ipv6 => &IP6T_REJECT_WITH,
    };
    let name = names
        .get(with as usize)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| info.unsupported(format!("reject-with {with}")))?;
    let _ = write!(out, " --reject-with {name}");
    Ok(())
}
