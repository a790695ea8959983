//! IPVS tables as text, two readers side by side: the kernel's `/proc/net/ip_vs`
//! ([`parse_proc_ip_vs`]) and `ipvsadm -Ln` output ([`parse_ipvsadm`]). Every line is
//! read into the table or kept in `unparsed` with its number and why.
//!
//! The kernel's form, as checked in `net/netfilter/ipvs/ip_vs_ctl.c`
//! (`ip_vs_info_seq_show`, the same from 2.6.28's IPv6 support to today): three header
//! lines; a virtual server as `"%s  %08X:%04X %s %s "` (protocol, address and port in
//! hex, scheduler, `ops ` or nothing), an IPv6 one as `"%s  [%pI6]:%04X %s "`, where
//! `%pI6` is the full address in lowercase colon-separated groups
//! (`[fd00:0000:0000:0000:0000:0000:0a00:0115]`), a mark service as
//! `"FWM  %08X %s %s"`; then `persistent %d %08X` (timeout, netmask) or nothing; real
//! servers as `"  -> %08X:%04X      %-7s %-6d %-10d %-10d"` (`[%pI6]` for IPv6), every
//! line ending in a newline. `ipvsadm -Ln` (its `print_service_entry`) writes decimal
//! addresses (`[fd00::1]:30080` for IPv6), `FWM  <mark>` with ` IPv6` for an IPv6 mark
//! service, and after the scheduler ` (sched-flags)`, ` persistent N`, ` mask M`,
//! ` pe NAME`, ` ops`.

use std::io::{self, BufRead};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::decode::lines::{BoundedLines, excerpt};
use crate::heart::ipvs::{Forward, IpvsTable, RealServer, VirtualAddr, VirtualServer};
use crate::heart::model::{Family, Protocol, Unparsed};

/// The longest line read; the table's lines are well under 200 bytes.
const MAX_LINE: usize = 4096;

/// How much of a line an unparsed entry keeps.
const EXCERPT: usize = 160;

/// Reads `/proc/net/ip_vs`. Fails only when the reader does.
pub fn parse_proc_ip_vs<R: BufRead>(reader: R) -> io::Result<IpvsTable> {
    parse(reader, Form::Proc)
}

/// Reads `ipvsadm -Ln` (or `-ln`, `-L -n`) output as printed or pasted: trailing spaces,
/// blank lines and a paste without the header lines are fine. Fails only when the
/// reader does.
pub fn parse_ipvsadm<R: BufRead>(reader: R) -> io::Result<IpvsTable> {
    parse(reader, Form::Ipvsadm)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Proc,
    Ipvsadm,
}

/// Where the real-server lines that follow belong.
enum Owner {
    /// No virtual server yet (or a header started a new listing).
    Nothing,
    /// The last virtual server read.
    Last,
    /// A virtual server on this line that could not be read.
    Unread(u32),
}

enum Read {
    Header,
    Virtual(VirtualServer),
    Real(RealServer),
}

fn parse<R: BufRead>(reader: R, form: Form) -> io::Result<IpvsTable> {
    let mut lines = BoundedLines::with_max(reader, MAX_LINE);
    let mut table = IpvsTable::default();
    let mut owner = Owner::Nothing;
    loop {
        let (number, truncated, text) = match lines.next_line()? {
            None => break,
            Some(l) => (
                l.number,
                l.truncated,
                String::from_utf8_lossy(l.bytes).into_owned(),
            ),
        };
        let text = text.trim_end();
        if text.is_empty() {
            continue;
        }
        let read = if truncated {
            Err(format!("longer than {MAX_LINE} bytes, which no IPVS line is"))
        } else if form == Form::Proc && lines.ended_without_newline {
            // The kernel ends every line with a newline: a last line without one was cut.
            Err("the file ends inside this line: the table was cut short".to_string())
        } else {
            read_line(text, form, number)
        };
        match read {
            Ok(Read::Header) => owner = Owner::Nothing,
            Ok(Read::Virtual(vs)) => {
                table.services.push(vs);
                owner = Owner::Last;
            }
            Ok(Read::Real(rs)) => {
                let why = match (&owner, table.services.last_mut()) {
                    (Owner::Last, Some(vs)) => {
                        vs.reals.push(rs);
                        continue;
                    }
                    (Owner::Unread(at), _) => {
                        format!("a real server of the virtual server on line {at}, which could not be read")
                    }
                    _ => "a real server before any virtual server".to_string(),
                };
                table.unparsed.push(unparsed(number, text, why));
            }
            Err(why) => {
                // What follows belongs to this line if it was meant as a virtual server.
                if text.split_whitespace().next() != Some("->") {
                    owner = Owner::Unread(number);
                }
                table.unparsed.push(unparsed(number, text, why));
            }
        }
    }
    Ok(table)
}

fn unparsed(line: u32, text: &str, reason: String) -> Unparsed {
    Unparsed {
        line,
        text: excerpt(text, EXCERPT),
        reason,
    }
}

fn read_line(text: &str, form: Form, line: u32) -> Result<Read, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.as_slice() {
        ["IP", "Virtual", "Server", "version", ..]
        | ["Prot", "LocalAddress:Port", "Scheduler", "Flags"]
        | ["->", "RemoteAddress:Port", "Forward", "Weight", "ActiveConn", "InActConn"] => {
            Ok(Read::Header)
        }
        ["Prot", ..] | ["->", "RemoteAddress:Port", ..] => Err(
            "the header of another listing than `ipvsadm -Ln` (statistics, rates, thresholds, persistent connections or tunnel columns), whose rows are not read".to_string(),
        ),
        ["->", rest @ ..] => real_server(rest, form, line).map(Read::Real),
        [first, rest @ ..] => virtual_server(first, rest, form, line).map(Read::Virtual),
        // Blank lines are skipped before this; nothing to read in one.
        [] => Ok(Read::Header),
    }
}

fn virtual_server(first: &str, rest: &[&str], form: Form, line: u32) -> Result<VirtualServer, String> {
    let (addr, rest) = match first {
        "FWM" => {
            let [mark, rest @ ..] = rest else {
                return Err("a mark service without its mark".to_string());
            };
            let mark = match form {
                Form::Proc => {
                    hex_u32(mark, 8).ok_or_else(|| format!("mark {} is not 8 hex digits", quoted(mark)))?
                }
                Form::Ipvsadm => mark
                    .parse()
                    .map_err(|_| format!("mark {} is not a number", quoted(mark)))?,
            };
            // ipvsadm names the family only for IPv6; the kernel's file never does.
            let (family, rest) = match (form, rest) {
                (Form::Ipvsadm, ["IPv6", rest @ ..]) => (Some(Family::Ipv6), rest),
                (Form::Ipvsadm, _) => (Some(Family::Ipv4), rest),
                (Form::Proc, _) => (None, rest),
            };
            (VirtualAddr::Fwmark { mark, family }, rest)
        }
        _ => {
            let protocol = match first {
                "TCP" => Protocol::Tcp,
                "UDP" => Protocol::Udp,
                "SCTP" => Protocol::Sctp,
                _ => {
                    return Err(
                        "not a virtual server (TCP, UDP, SCTP or FWM), a real server (->) or a header line"
                            .to_string(),
                    );
                }
            };
            let [addr, rest @ ..] = rest else {
                return Err("a virtual server without its address".to_string());
            };
            let addr = socket(addr, form)?;
            (VirtualAddr::Socket { protocol, addr }, rest)
        }
    };
    let [scheduler, flags @ ..] = rest else {
        return Err("a virtual server without its scheduler".to_string());
    };
    let first_ok = scheduler.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
    if !first_ok
        || !scheduler
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!("{} is not a scheduler's name", quoted(scheduler)));
    }
    let persistent = match flags.iter().position(|w| *w == "persistent") {
        None => None,
        Some(at) => Some(
            flags
                .get(at + 1)
                .and_then(|t| t.parse::<u32>().ok())
                .ok_or("`persistent` without a timeout in seconds")?,
        ),
    };
    Ok(VirtualServer {
        addr,
        scheduler: scheduler.to_string(),
        persistent,
        flags: flags.join(" "),
        reals: Vec::new(),
        line,
    })
}

fn real_server(rest: &[&str], form: Form, line: u32) -> Result<RealServer, String> {
    let [addr, forward, weight, active, inactive] = rest else {
        return Err(format!(
            "{} columns after `->`; a real server has 5 (address, forward, weight, active and inactive connections)",
            rest.len()
        ));
    };
    let addr = socket(addr, form)?;
    let forward = Forward::parse(forward).ok_or_else(|| {
        format!(
            "forwarding method {} is not one IPVS prints (Masq, Local, Tunnel, Route)",
            quoted(forward)
        )
    })?;
    let count = |word: &str, what: &str| {
        word.parse::<u64>()
            .map_err(|_| format!("{what} {} is not a count", quoted(word)))
    };
    let weight = weight
        .parse::<u32>()
        .map_err(|_| format!("weight {} is not a count", quoted(weight)))?;
    Ok(RealServer {
        addr,
        forward,
        weight,
        active: count(active, "active connections")?,
        inactive: count(inactive, "inactive connections")?,
        line,
    })
}

/// An address and port in the form's notation.
fn socket(word: &str, form: Form) -> Result<SocketAddr, String> {
    match form {
        Form::Ipvsadm => word.parse().map_err(|_| {
            if word.bytes().any(|b| b.is_ascii_alphabetic()) && !word.starts_with('[') {
                format!(
                    "{} is not a numeric address and port: ipvsadm prints names unless run with -n",
                    quoted(word)
                )
            } else {
                format!("{} is not an address and port", quoted(word))
            }
        }),
        Form::Proc => proc_socket(word)
            .ok_or_else(|| format!("{} is not the kernel's hex address and port", quoted(word))),
    }
}

/// `0A000115:7580`, or `[fd00:0000:...:0115]:7580`.
fn proc_socket(word: &str) -> Option<SocketAddr> {
    let (ip, port) = match word.strip_prefix('[') {
        Some(v6) => {
            let (ip, port) = v6.split_once("]:")?;
            (IpAddr::V6(ip.parse::<Ipv6Addr>().ok()?), port)
        }
        None => {
            let (ip, port) = word.split_once(':')?;
            (IpAddr::V4(Ipv4Addr::from(hex_u32(ip, 8)?)), port)
        }
    };
    let port = u16::try_from(hex_u32(port, 4)?).ok()?;
    Some(SocketAddr::new(ip, port))
}

/// Exactly `digits` hex digits (`from_str_radix` alone would take a sign).
fn hex_u32(word: &str, digits: usize) -> Option<u32> {
    if word.len() != digits || !word.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(word, 16).ok()
}

/// A word of the line, quoted and cut for a reason.
fn quoted(word: &str) -> String {
    format!("{:?}", excerpt(word, 40))
}

#[cfg(test)]
mod tests;
