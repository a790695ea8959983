//! The xtables matches' decoders, one per (extension, revision), each over the
//! kernel's structure for it.

use std::fmt::Write as _;

use super::{Decode, Info, save_string, write_port_option};
use crate::decode::netlink::DecodeError;

/// The decoder of a match's revision; None for one this reader does not print.
pub(super) fn decoder(ext: &str, rev: u32) -> Option<Decode> {
    let decode: Decode = match (ext, rev) {
        ("comment", 0) => comment_v0,
        ("statistic", 0) => statistic_v0,
        ("addrtype", 1) => addrtype_v1,
        ("conntrack", 3) => conntrack_v3,
        ("recent", 1) => recent_v1,
        ("nfacct", 0 | 1) => nfacct_v0_v1,
        ("multiport", 1) => multiport_v1,
        ("tcp", 0) => tcp_v0,
        ("udp", 0) => udp_v0,
        ("sctp", 0 | 1) => sctp_v0_v1,
        _ => return None,
    };
    Some(decode)
}

// struct xt_comment_info (include/uapi/linux/netfilter/xt_comment.h).
const XT_COMMENT_INFO_COMMENT: usize = 0;
const XT_MAX_COMMENT_LEN: usize = 256;

fn comment_v0(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    out.push_str(" --comment");
    save_string(out, &info.string(XT_COMMENT_INFO_COMMENT, XT_MAX_COMMENT_LEN)?);
    Ok(())
}

// struct xt_statistic_info (include/uapi/linux/netfilter/xt_statistic.h).
const XT_STATISTIC_INFO_MODE: usize = 0;
const XT_STATISTIC_INFO_FLAGS: usize = 2;
const XT_STATISTIC_INFO_RANDOM_PROBABILITY: usize = 4;
const XT_STATISTIC_INFO_NTH_EVERY: usize = 4;
const XT_STATISTIC_INFO_NTH_PACKET: usize = 8;
const XT_STATISTIC_MODE_RANDOM: u16 = 0;
const XT_STATISTIC_MODE_NTH: u16 = 1;
const XT_STATISTIC_INVERT: u16 = 1;

fn statistic_v0(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    let mode = info.u16(XT_STATISTIC_INFO_MODE)?;
    let flags = info.u16(XT_STATISTIC_INFO_FLAGS)?;
    let invert = if flags & XT_STATISTIC_INVERT != 0 {
        " !"
    } else {
        ""
    };
    match mode {
        XT_STATISTIC_MODE_RANDOM => {
            // The kernel keeps the probability scaled to 2^31, as libxt_statistic does.
            let scaled = info.u32(XT_STATISTIC_INFO_RANDOM_PROBABILITY)?;
            let probability = f64::from(scaled) / f64::from(0x8000_0000u32);
            let _ = write!(out, " --mode random{invert} --probability {probability:.11}");
        }
        XT_STATISTIC_MODE_NTH => {
            let every = info.u32(XT_STATISTIC_INFO_NTH_EVERY)?;
            let packet = info.u32(XT_STATISTIC_INFO_NTH_PACKET)?;
            // The structure keeps `--every` less one.
            let _ = write!(out, " --mode nth{invert} --every {} --packet {packet}", every + 1);
        }
        _ => return Err(info.unsupported(format!("mode {mode}"))),
    }
    Ok(())
}

// struct xt_addrtype_info_v1 (include/uapi/linux/netfilter/xt_addrtype.h).
const XT_ADDRTYPE_INFO_V1_SOURCE: usize = 0;
const XT_ADDRTYPE_INFO_V1_DEST: usize = 2;
const XT_ADDRTYPE_INFO_V1_FLAGS: usize = 4;
const XT_ADDRTYPE_INVERT_SOURCE: u32 = 1;
const XT_ADDRTYPE_INVERT_DEST: u32 = 2;
const XT_ADDRTYPE_LIMIT_IFACE_IN: u32 = 4;
const XT_ADDRTYPE_LIMIT_IFACE_OUT: u32 = 8;

fn addrtype_v1(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    let source = info.u16(XT_ADDRTYPE_INFO_V1_SOURCE)?;
    let dest = info.u16(XT_ADDRTYPE_INFO_V1_DEST)?;
    let flags = info.u32(XT_ADDRTYPE_INFO_V1_FLAGS)?;
    for (types, invert, option) in [
        (source, flags & XT_ADDRTYPE_INVERT_SOURCE != 0, "--src-type"),
        (dest, flags & XT_ADDRTYPE_INVERT_DEST != 0, "--dst-type"),
    ] {
        if types != 0 {
            if invert {
                out.push_str(" !");
            }
            let _ = write!(out, " {option} {}", address_types(types));
        }
    }
    if flags & XT_ADDRTYPE_LIMIT_IFACE_IN != 0 {
        out.push_str(" --limit-iface-in");
    }
    if flags & XT_ADDRTYPE_LIMIT_IFACE_OUT != 0 {
        out.push_str(" --limit-iface-out");
    }
    Ok(())
}

/// An addrtype mask as libxt_addrtype names it: bit N is `RTN_*` type N.
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

// struct xt_conntrack_mtinfo3 (include/uapi/linux/netfilter/xt_conntrack.h), after
// four address/mask pairs, the expiry range, the protocol and four ports.
const XT_CONNTRACK_MTINFO3_MATCH_FLAGS: usize = 146;
const XT_CONNTRACK_MTINFO3_INVERT_FLAGS: usize = 148;
const XT_CONNTRACK_MTINFO3_STATE_MASK: usize = 150;
const XT_CONNTRACK_STATE: u16 = 1;
/// The `XT_CONNTRACK_STATE_*` bits in the order libxt_conntrack prints them.
const XT_CONNTRACK_STATES: [(u16, &str); 7] = [
    (1, "INVALID"),
    (1 << 3, "NEW"),
    (1 << 2, "RELATED"),
    (1 << 1, "ESTABLISHED"),
    (1 << 8, "UNTRACKED"),
    (1 << 6, "SNAT"),
    (1 << 7, "DNAT"),
];

fn conntrack_v3(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    let match_flags = info.u16(XT_CONNTRACK_MTINFO3_MATCH_FLAGS)?;
    let invert_flags = info.u16(XT_CONNTRACK_MTINFO3_INVERT_FLAGS)?;
    let states = info.u16(XT_CONNTRACK_MTINFO3_STATE_MASK)?;
    if match_flags != XT_CONNTRACK_STATE {
        return Err(info.unsupported(format!("with match flags {match_flags:#x}")));
    }
    if invert_flags & XT_CONNTRACK_STATE != 0 {
        out.push_str(" !");
    }
    out.push_str(" --ctstate ");
    let shown: Vec<&str> = XT_CONNTRACK_STATES
        .iter()
        .filter(|(bit, _)| states & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    out.push_str(&shown.join(","));
    Ok(())
}

// struct xt_recent_mtinfo_v1 (include/uapi/linux/netfilter/xt_recent.h).
const XT_RECENT_MTINFO_V1_SECONDS: usize = 0;
const XT_RECENT_MTINFO_V1_HIT_COUNT: usize = 4;
const XT_RECENT_MTINFO_V1_CHECK_SET: usize = 8;
const XT_RECENT_MTINFO_V1_INVERT: usize = 9;
const XT_RECENT_MTINFO_V1_NAME: usize = 10;
const XT_RECENT_MTINFO_V1_SIDE: usize = 210;
const XT_RECENT_MTINFO_V1_MASK: usize = 212;
const XT_RECENT_NAME_LEN: usize = 200;
const XT_RECENT_CHECK: u8 = 1;
const XT_RECENT_SET: u8 = 2;
const XT_RECENT_UPDATE: u8 = 4;
const XT_RECENT_REMOVE: u8 = 8;
const XT_RECENT_TTL: u8 = 16;
const XT_RECENT_REAP: u8 = 32;
const XT_RECENT_SOURCE: u8 = 0;
const XT_RECENT_DEST: u8 = 1;

fn recent_v1(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    let seconds = info.u32(XT_RECENT_MTINFO_V1_SECONDS)?;
    let hit_count = info.u32(XT_RECENT_MTINFO_V1_HIT_COUNT)?;
    let check_set = info.u8(XT_RECENT_MTINFO_V1_CHECK_SET)?;
    if info.u8(XT_RECENT_MTINFO_V1_INVERT)? != 0 {
        out.push_str(" !");
    }
    for (bit, option) in [
        (XT_RECENT_SET, " --set"),
        (XT_RECENT_CHECK, " --rcheck"),
        (XT_RECENT_UPDATE, " --update"),
        (XT_RECENT_REMOVE, " --remove"),
    ] {
        if check_set & bit != 0 {
            out.push_str(option);
        }
    }
    if seconds != 0 {
        let _ = write!(out, " --seconds {seconds}");
    }
    if check_set & XT_RECENT_REAP != 0 {
        out.push_str(" --reap");
    }
    if hit_count != 0 {
        let _ = write!(out, " --hitcount {hit_count}");
    }
    if check_set & XT_RECENT_TTL != 0 {
        out.push_str(" --rttl");
    }
    let name = info.string(XT_RECENT_MTINFO_V1_NAME, XT_RECENT_NAME_LEN)?;
    let _ = write!(out, " --name {name}");
    let _ = write!(out, " --mask {}", info.address(XT_RECENT_MTINFO_V1_MASK)?);
    match info.u8(XT_RECENT_MTINFO_V1_SIDE)? {
        XT_RECENT_SOURCE => out.push_str(" --rsource"),
        XT_RECENT_DEST => out.push_str(" --rdest"),
        side => return Err(info.unsupported(format!("side {side}"))),
    }
    Ok(())
}

// struct xt_nfacct_match_info and _v1 (include/uapi/linux/netfilter/xt_nfacct.h):
// the name first in both; NFACCT_NAME_MAX is from nfnetlink_acct.h.
const XT_NFACCT_MATCH_INFO_NAME: usize = 0;
const NFACCT_NAME_MAX: usize = 32;

/// Revisions 0 and 1 differ only in the alignment of the kernel's pointer after the name.
fn nfacct_v0_v1(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    out.push_str(" --nfacct-name ");
    save_string(out, &info.string(XT_NFACCT_MATCH_INFO_NAME, NFACCT_NAME_MAX)?);
    Ok(())
}

// struct xt_multiport_v1 (include/uapi/linux/netfilter/xt_multiport.h).
const XT_MULTIPORT_V1_FLAGS: usize = 0;
const XT_MULTIPORT_V1_COUNT: usize = 1;
const XT_MULTIPORT_V1_PORTS: usize = 2;
const XT_MULTIPORT_V1_PFLAGS: usize = 32;
const XT_MULTIPORT_V1_INVERT: usize = 47;
const XT_MULTI_PORTS: usize = 15;
const XT_MULTIPORT_SOURCE: u8 = 0;
const XT_MULTIPORT_DESTINATION: u8 = 1;
const XT_MULTIPORT_EITHER: u8 = 2;

fn multiport_v1(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    let flags = info.u8(XT_MULTIPORT_V1_FLAGS)?;
    let count = usize::from(info.u8(XT_MULTIPORT_V1_COUNT)?);
    if count > XT_MULTI_PORTS {
        return Err(info.unsupported(format!("with {count} ports")));
    }
    if info.u8(XT_MULTIPORT_V1_INVERT)? != 0 {
        out.push_str(" !");
    }
    out.push_str(match flags {
        XT_MULTIPORT_SOURCE => " --sports ",
        XT_MULTIPORT_DESTINATION => " --dports ",
        XT_MULTIPORT_EITHER => " --ports ",
        _ => return Err(info.unsupported(format!("flags {flags}"))),
    });
    write_multiport_list(info, count, out)
}

/// The ports, comma-separated; a port whose `pflags` entry is set starts a range that
/// the next port ends.
fn write_multiport_list(info: &Info<'_>, count: usize, out: &mut String) -> Result<(), DecodeError> {
    let port = |i: usize| info.u16(XT_MULTIPORT_V1_PORTS + 2 * i);
    let mut i = 0;
    while i < count {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}", port(i)?);
        if info.u8(XT_MULTIPORT_V1_PFLAGS + i)? != 0 {
            i += 1;
            let _ = write!(out, ":{}", port(i)?);
        }
        i += 1;
    }
    Ok(())
}

// struct xt_tcp (include/uapi/linux/netfilter/xt_tcpudp.h).
const XT_TCP_SPTS: usize = 0;
const XT_TCP_DPTS: usize = 4;
const XT_TCP_OPTION: usize = 8;
const XT_TCP_FLG_MASK: usize = 9;
const XT_TCP_FLG_CMP: usize = 10;
const XT_TCP_INVFLAGS: usize = 11;
const XT_TCP_INV_SRCPT: u8 = 1;
const XT_TCP_INV_DSTPT: u8 = 2;

/// Only the ports: a rule that matches TCP flags or options is not printed.
fn tcp_v0(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    for at in [XT_TCP_OPTION, XT_TCP_FLG_MASK, XT_TCP_FLG_CMP] {
        if info.u8(at)? != 0 {
            return Err(info.unsupported("with TCP flags or options"));
        }
    }
    let invflags = info.u8(XT_TCP_INVFLAGS)?;
    write_port_ranges(
        info,
        invflags,
        [
            (XT_TCP_SPTS, XT_TCP_INV_SRCPT, "sport"),
            (XT_TCP_DPTS, XT_TCP_INV_DSTPT, "dport"),
        ],
        out,
    )
}

// struct xt_udp (include/uapi/linux/netfilter/xt_tcpudp.h).
const XT_UDP_SPTS: usize = 0;
const XT_UDP_DPTS: usize = 4;
const XT_UDP_INVFLAGS: usize = 8;
const XT_UDP_INV_SRCPT: u8 = 1;
const XT_UDP_INV_DSTPT: u8 = 2;

fn udp_v0(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    let invflags = info.u8(XT_UDP_INVFLAGS)?;
    write_port_ranges(
        info,
        invflags,
        [
            (XT_UDP_SPTS, XT_UDP_INV_SRCPT, "sport"),
            (XT_UDP_DPTS, XT_UDP_INV_DSTPT, "dport"),
        ],
        out,
    )
}

/// The `__u16 [2]` port ranges of a tcp or udp match, each as (offset, its inversion
/// bit, option), printed unless the range is every port; an inversion of anything
/// else is refused.
fn write_port_ranges(
    info: &Info<'_>,
    invflags: u8,
    ranges: [(usize, u8, &str); 2],
    out: &mut String,
) -> Result<(), DecodeError> {
    if invflags & !(ranges[0].1 | ranges[1].1) != 0 {
        return Err(info.unsupported(format!("with inversion flags {invflags:#x}")));
    }
    for (at, invert_bit, flag) in ranges {
        let (from, to) = (info.u16(at)?, info.u16(at + 2)?);
        if (from, to) != (0, u16::MAX) {
            write_port_option(out, flag, invflags & invert_bit != 0, from, to);
        }
    }
    Ok(())
}

// struct xt_sctp_info (include/uapi/linux/netfilter/xt_sctp.h): the destination ports
// first; the flags after the chunk map and chunk flags.
const XT_SCTP_INFO_DPTS: usize = 0;
const XT_SCTP_INFO_SPTS: usize = 4;
const XT_SCTP_INFO_FLAGS: usize = 284;
const XT_SCTP_INFO_INVFLAGS: usize = 288;
const XT_SCTP_SRC_PORTS: u32 = 1;
const XT_SCTP_DEST_PORTS: u32 = 2;

/// Only the ports: a rule that matches chunk types is not printed.
fn sctp_v0_v1(info: &Info<'_>, out: &mut String) -> Result<(), DecodeError> {
    let flags = info.u32(XT_SCTP_INFO_FLAGS)?;
    let invflags = info.u32(XT_SCTP_INFO_INVFLAGS)?;
    if flags & !(XT_SCTP_SRC_PORTS | XT_SCTP_DEST_PORTS) != 0 {
        return Err(info.unsupported(format!("with flags {flags:#x}")));
    }
    for (bit, at, flag) in [
        (XT_SCTP_SRC_PORTS, XT_SCTP_INFO_SPTS, "sport"),
        (XT_SCTP_DEST_PORTS, XT_SCTP_INFO_DPTS, "dport"),
    ] {
        if flags & bit != 0 {
            let (from, to) = (info.u16(at)?, info.u16(at + 2)?);
            write_port_option(out, flag, invflags & bit != 0, from, to);
        }
    }
    Ok(())
}
