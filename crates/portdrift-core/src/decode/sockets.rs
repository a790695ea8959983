//! `/proc/net/{tcp,tcp6,udp,udp6}` → [`Listener`]s.
//!
//! Only sockets that can receive new traffic are kept: TCP in `LISTEN` and unconnected
//! UDP. The kernel prints addresses as 32-bit words in *host* byte order, so
//! [`parse_proc_net`] uses this machine's order and [`parse_proc_net_with`] takes it
//! explicitly, for files captured elsewhere. An unreadable line becomes an
//! [`Unparsed`], never a panic or a silent drop.

use crate::heart::visible::visible_bytes;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::heart::model::{Family, Listener, Protocol, Unparsed};

/// TCP `LISTEN`.
const TCP_LISTEN: u8 = 0x0A;
/// The kernel's `TCP_CLOSE`, which a bound, unconnected UDP socket shows.
const UDP_UNCONNECTED: u8 = 0x07;
/// Longest line text kept in an [`Unparsed`].
const MAX_UNPARSED_TEXT: usize = 200;

/// The byte order of the 32-bit words in `/proc/net` addresses: the order of the
/// kernel that printed them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WordOrder {
    Little,
    Big,
}

impl WordOrder {
    /// This machine's byte order.
    pub fn native() -> WordOrder {
        if cfg!(target_endian = "big") {
            WordOrder::Big
        } else {
            WordOrder::Little
        }
    }

    fn bytes(self, word: u32) -> [u8; 4] {
        match self {
            WordOrder::Little => word.to_le_bytes(),
            WordOrder::Big => word.to_be_bytes(),
        }
    }
}

/// Parses one `/proc/net/{tcp,tcp6,udp,udp6}` file printed by this machine's kernel.
///
/// `v6` says whether it is a `tcp6`/`udp6` file (32 hex digits per address);
/// `origin` names the file for messages and is copied into every [`Listener`].
pub fn parse_proc_net(
    input: &[u8],
    protocol: Protocol,
    v6: bool,
    origin: &str,
) -> (Vec<Listener>, Vec<Unparsed>) {
    parse_proc_net_with(input, protocol, v6, origin, WordOrder::native())
}

/// [`parse_proc_net`] with the address word order given explicitly.
pub fn parse_proc_net_with(
    input: &[u8],
    protocol: Protocol,
    v6: bool,
    origin: &str,
    order: WordOrder,
) -> (Vec<Listener>, Vec<Unparsed>) {
    let mut listeners = Vec::new();
    let mut unparsed = Vec::new();
    let wanted_state = match protocol {
        Protocol::Udp => UDP_UNCONNECTED,
        // SCTP has no /proc/net file of this shape; treat it like TCP if asked.
        Protocol::Tcp | Protocol::Sctp => TCP_LISTEN,
    };

    for (index, raw) in input.split(|&b| b == b'\n').enumerate() {
        let line = u32::try_from(index + 1).unwrap_or(u32::MAX);
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let text = match std::str::from_utf8(raw) {
            Ok(t) => t,
            Err(_) => {
                unparsed.push(unparsed_line(line, &visible_bytes(raw), "not UTF-8"));
                continue;
            }
        };
        if is_header(text) {
            continue;
        }
        match parse_line(text, v6, order) {
            Ok(entry) if entry.state == wanted_state => listeners.push(Listener {
                protocol,
                family: Family::of(&entry.addr),
                addr: entry.addr,
                port: entry.port,
                inode: entry.inode,
                uid: entry.uid,
                origin: origin.to_string(),
                line,
            }),
            Ok(_) => {}
            Err(reason) => unparsed.push(unparsed_line(line, text, reason)),
        }
    }
    (listeners, unparsed)
}

/// The column header: `  sl  local_address rem_address   st ...`.
fn is_header(text: &str) -> bool {
    text.split_ascii_whitespace().next() == Some("sl")
}

struct Entry {
    addr: IpAddr,
    port: u16,
    state: u8,
    uid: u32,
    inode: u64,
}

/// Fields: `sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...`.
fn parse_line(text: &str, v6: bool, order: WordOrder) -> Result<Entry, &'static str> {
    let mut fields = text.split_ascii_whitespace();
    let slot = fields.next().ok_or("empty line")?;
    if !slot.ends_with(':') {
        return Err("first field is not a slot number (`N:`)");
    }
    let local = fields.next().ok_or("too few fields")?;
    let _remote = fields.next().ok_or("too few fields")?;
    let state = fields.next().ok_or("too few fields")?;
    let _queues = fields.next().ok_or("too few fields")?;
    let _timer = fields.next().ok_or("too few fields")?;
    let _retransmits = fields.next().ok_or("too few fields")?;
    let uid = fields.next().ok_or("too few fields")?;
    let _timeout = fields.next().ok_or("too few fields")?;
    let inode = fields.next().ok_or("too few fields")?;

    let (addr_hex, port_hex) = local.split_once(':').ok_or("local address has no `:port`")?;
    let addr = parse_addr(addr_hex, v6, order)?;
    if port_hex.len() != 4 {
        return Err("port is not 4 hex digits");
    }
    let port = u16::from_str_radix(port_hex, 16).map_err(|_| "port is not hex")?;
    if state.len() != 2 {
        return Err("state is not 2 hex digits");
    }
    let state = u8::from_str_radix(state, 16).map_err(|_| "state is not hex")?;
    let uid = uid.parse::<u32>().map_err(|_| "uid is not a number")?;
    let inode = inode.parse::<u64>().map_err(|_| "inode is not a number")?;
    Ok(Entry {
        addr,
        port,
        state,
        uid,
        inode,
    })
}

fn parse_addr(hex: &str, v6: bool, order: WordOrder) -> Result<IpAddr, &'static str> {
    let words = if v6 { 4 } else { 1 };
    if hex.len() != 8 * words {
        return Err(if v6 {
            "address is not 32 hex digits"
        } else {
            "address is not 8 hex digits"
        });
    }
    let mut bytes = [0u8; 16];
    for i in 0..words {
        let chunk = hex.get(8 * i..8 * i + 8).ok_or("address is not hex")?;
        let word = u32::from_str_radix(chunk, 16).map_err(|_| "address is not hex")?;
        bytes[4 * i..4 * i + 4].copy_from_slice(&order.bytes(word));
    }
    if !v6 {
        return Ok(IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])));
    }
    let v6 = Ipv6Addr::from(bytes);
    // A dual-stack socket bound to `::ffff:a.b.c.d` only ever sees IPv4 traffic.
    Ok(match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    })
}

fn unparsed_line(line: u32, text: &str, reason: &str) -> Unparsed {
    let text = match text.char_indices().nth(MAX_UNPARSED_TEXT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    };
    Unparsed {
        line,
        text,
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests;
