//! xtables `match`/`target` expressions: the extension's binary structure printed as
//! its own `save` function prints it, for the extensions kube-proxy and the CNI
//! hostport plugin use. Each (extension, revision) has a decoder of its own, in
//! `matches` and `targets`, that reads the kernel's structure by its fields'
//! offsets.

mod matches;
mod targets;

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::unsupported;
use crate::decode::netlink::DecodeError;
use crate::heart::model::Family;

/// Appends an extension's `save` output for the structure `Info` reads.
type Decode = fn(&Info<'_>, &mut String) -> Result<(), DecodeError>;

/// Reads the extension's structure, in the kernel's (host) byte order unless noted.
struct Info<'a> {
    data: &'a [u8],
    chain: &'a str,
    ext: &'a str,
    /// The rule's family: the width of `union nf_inet_addr` and the structure some
    /// targets use.
    family: Family,
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
    /// A `__be32` IPv4 address.
    fn ipv4(&self, at: usize) -> Result<IpAddr, DecodeError> {
        let b = self.bytes(at, 4)?;
        Ok(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])))
    }
    /// A `union nf_inet_addr` of the rule's family.
    fn address(&self, at: usize) -> Result<IpAddr, DecodeError> {
        let b = self.bytes(at, 16)?;
        Ok(match self.family {
            Family::Ipv4 => IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])),
            Family::Ipv6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap_or_default())),
        })
    }
    fn unsupported(&self, what: impl std::fmt::Display) -> DecodeError {
        unsupported(self.chain, format!("{} {what}", self.ext))
    }
}

/// One xtables match, printed as ` -m NAME` and the extension's `save` output.
pub(super) fn xt_match(
    family: Family,
    chain: &str,
    ext: &str,
    rev: u32,
    data: &[u8],
) -> Result<String, DecodeError> {
    let info = Info {
        data,
        chain,
        ext,
        family,
    };
    render(&info, matches::decoder(ext, rev), "-m", rev, "match")
}

/// One xtables target, printed as ` -j NAME` and the extension's `save` output.
pub(super) fn xt_target(
    family: Family,
    chain: &str,
    ext: &str,
    rev: u32,
    data: &[u8],
) -> Result<String, DecodeError> {
    let info = Info {
        data,
        chain,
        ext,
        family,
    };
    render(&info, targets::decoder(ext, rev, family), "-j", rev, "target")
}

/// ` FLAG NAME` and what the extension's decoder writes, or the revision it lacks.
fn render(
    info: &Info<'_>,
    decode: Option<Decode>,
    flag: &str,
    rev: u32,
    what: &str,
) -> Result<String, DecodeError> {
    let decode = decode.ok_or_else(|| info.unsupported(format!("revision {rev} ({what})")))?;
    let mut out = format!(" {flag} {}", info.ext);
    decode(info, &mut out)?;
    Ok(out)
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

#[cfg(test)]
mod tests;
