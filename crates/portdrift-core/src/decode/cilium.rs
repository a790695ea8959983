//! Cilium's service load-balancing BPF maps, as raw key/value bytes → values:
//! `cilium_lb{4,6}_services_v2` (frontends and their backend slots),
//! `cilium_lb{4,6}_backends_v3` (backends by ID) and `cilium_lb{4,6}_reverse_nat`.
//!
//! Layouts from Cilium's `bpf/lib/lb.h` (`struct lb4_key`, `lb4_service`, `lb4_backend`,
//! `lb6_*`; older releases keep them in `bpf/lib/common.h`), `struct lb4_reverse_nat`
//! (`bpf/lib/common.h`, packed) and the Go mirrors with their byte-order conversions in
//! `pkg/loadbalancer/maps/types.go` (formerly `pkg/maps/lbmap/types.go`).
//!
//! Byte order: addresses, ports and the rev-NAT index are stored in network order (the
//! Go side calls `ToNetwork()` on them); the backend slot, backend ID, `count`, `qcount`
//! and `cluster_id` are in the host order of the node that wrote the map, read here as
//! little-endian, the order of every architecture Cilium ships for (amd64, arm64).
//!
//! Entries are decoded one by one ([`parse_service_entry`], [`parse_backend_entry`],
//! [`parse_rev_nat_entry`]), grouped into [`Frontend`]s by [`group_frontends`], or read
//! from `bpftool -j map dump` output by [`parse_bpftool_dump`]. Nothing here panics on
//! any input; what cannot be read is an error or a problem, never a guess.

mod assemble;
mod bpftool;
mod group;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::heart::cilium::addr_len;
use crate::heart::model::Family;

pub use crate::heart::cilium::{
    BackendState, Frontend, FrontendKey, GroupProblem, L4, MapBackend as Backend, MapKind, RevNat, Scope,
    ServiceEntry, SvcFlags,
};
pub use assemble::{FamilyDumps, family_maps, layout_mismatch, parse_bpftool_show};
pub use bpftool::{DumpProblem, MapDump, parse_bpftool_dump, read_bpftool_dump};
pub use group::group_frontends;

/// Why one entry (or a whole dump) could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CiliumMapError {
    #[error("{what} is {got} bytes, {map} expects {expected}")]
    WrongSize {
        map: &'static str,
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("expected a JSON array of entries, got {0}")]
    NotAnArray(&'static str),
    /// bpftool's own `{"error": ...}` answer: a map carrying BTF, say, which it cannot
    /// print without CAP_SYS_ADMIN (`failed to get btf`).
    #[error("bpftool answered with an error: {0}")]
    Tool(String),
    #[error("entry is not a JSON object")]
    NotAnObject,
    #[error("entry has no hex \"{0}\" array")]
    Missing(&'static str),
    #[error("entry has only bpftool's \"formatted\" form, no hex key and value")]
    OnlyFormatted,
    #[error("\"{field}\" is not an array of hex bytes")]
    NotAnArrayOfBytes { field: &'static str },
    #[error("\"{field}\"[{position}] is not a hex byte: {text:?}")]
    NotHexByte {
        field: &'static str,
        position: usize,
        text: String,
    },
}

/// Checks both sizes against `kind`'s layout, so that every later read is in bounds.
fn check_sizes(kind: MapKind, key: &[u8], value: &[u8]) -> Result<(), CiliumMapError> {
    for (what, got, expected) in [
        ("key", key.len(), kind.key_size()),
        ("value", value.len(), kind.value_size()),
    ] {
        if got != expected {
            return Err(CiliumMapError::WrongSize {
                map: kind.pin_name(),
                what,
                expected,
                got,
            });
        }
    }
    Ok(())
}

/// A bounds-checked reader over one entry's bytes. An out-of-range read gives zeros,
/// but [`check_sizes`] runs first, so none happens.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn array<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut out = [0u8; N];
        if let Some(src) = self.0.get(at..at.saturating_add(N)) {
            out.copy_from_slice(src);
        }
        out
    }
    fn u8(&self, at: usize) -> u8 {
        self.0.get(at).copied().unwrap_or(0)
    }
    fn be16(&self, at: usize) -> u16 {
        u16::from_be_bytes(self.array(at))
    }
    fn host16(&self, at: usize) -> u16 {
        u16::from_le_bytes(self.array(at))
    }
    fn host32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.array(at))
    }
    fn addr(&self, family: Family) -> IpAddr {
        match family {
            Family::Ipv4 => IpAddr::V4(Ipv4Addr::from(self.array::<4>(0))),
            Family::Ipv6 => IpAddr::V6(Ipv6Addr::from(self.array::<16>(0))),
        }
    }
}

/// One services-map entry (`lb{4,6}_key` → `lb{4,6}_service`).
pub fn parse_service_entry(key: &[u8], value: &[u8], family: Family) -> Result<ServiceEntry, CiliumMapError> {
    check_sizes(MapKind::services(family), key, value)?;
    let (k, v) = (Bytes(key), Bytes(value));
    let a = addr_len(family);
    Ok(ServiceEntry {
        address: k.addr(family),
        port: k.be16(a),
        slot: k.host16(a + 2),
        proto: L4::from_byte(k.u8(a + 4)),
        scope: Scope::from_byte(k.u8(a + 5)),
        word: v.host32(0),
        count: v.host16(4),
        // Cilium converts rev_nat_index to network order before storing it (types.go).
        rev_nat: v.be16(6),
        flags: SvcFlags(u16::from(v.u8(8)) | (u16::from(v.u8(9)) << 8)),
        qcount: v.host16(10),
    })
}

/// One backends-map entry (`__u32` ID → `lb{4,6}_backend`).
pub fn parse_backend_entry(key: &[u8], value: &[u8], family: Family) -> Result<Backend, CiliumMapError> {
    check_sizes(MapKind::backends(family), key, value)?;
    let (k, v) = (Bytes(key), Bytes(value));
    let a = addr_len(family);
    Ok(Backend {
        id: k.host32(0),
        address: v.addr(family),
        port: v.be16(a),
        proto: L4::from_byte(v.u8(a + 2)),
        flags: v.u8(a + 3),
        cluster_id: v.host16(a + 4),
        zone: v.u8(a + 6),
    })
}

/// One reverse-NAT entry (`__u16` ID in network order → packed `{address, port}`).
pub fn parse_rev_nat_entry(key: &[u8], value: &[u8], family: Family) -> Result<RevNat, CiliumMapError> {
    check_sizes(MapKind::rev_nat(family), key, value)?;
    let (k, v) = (Bytes(key), Bytes(value));
    Ok(RevNat {
        id: k.be16(0),
        address: v.addr(family),
        port: v.be16(addr_len(family)),
    })
}

#[cfg(test)]
mod tests;
