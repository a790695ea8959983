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

mod bpftool;
mod group;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::heart::model::Family;

pub use bpftool::{DumpProblem, MapDump, parse_bpftool_dump};
pub use group::{FrontendKey, GroupProblem, group_frontends};

/// One of the six maps this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MapKind {
    Services4,
    Services6,
    Backends4,
    Backends6,
    RevNat4,
    RevNat6,
}

impl MapKind {
    pub const ALL: [MapKind; 6] = [
        MapKind::Services4,
        MapKind::Services6,
        MapKind::Backends4,
        MapKind::Backends6,
        MapKind::RevNat4,
        MapKind::RevNat6,
    ];

    /// The name Cilium pins the map under (in `<bpffs>/tc/globals/`).
    pub fn pin_name(self) -> &'static str {
        match self {
            MapKind::Services4 => "cilium_lb4_services_v2",
            MapKind::Services6 => "cilium_lb6_services_v2",
            MapKind::Backends4 => "cilium_lb4_backends_v3",
            MapKind::Backends6 => "cilium_lb6_backends_v3",
            MapKind::RevNat4 => "cilium_lb4_reverse_nat",
            MapKind::RevNat6 => "cilium_lb6_reverse_nat",
        }
    }

    pub fn family(self) -> Family {
        match self {
            MapKind::Services4 | MapKind::Backends4 | MapKind::RevNat4 => Family::Ipv4,
            MapKind::Services6 | MapKind::Backends6 | MapKind::RevNat6 => Family::Ipv6,
        }
    }

    /// The key size in bytes, as the kernel reports it for the map.
    pub fn key_size(self) -> usize {
        match self {
            // lb4_key 12, lb6_key 24: address, dport, slot, proto, scope, pad[2].
            MapKind::Services4 | MapKind::Services6 => addr_len(self.family()) + 8,
            MapKind::Backends4 | MapKind::Backends6 => 4,
            MapKind::RevNat4 | MapKind::RevNat6 => 2,
        }
    }

    /// The value size in bytes.
    pub fn value_size(self) -> usize {
        match self {
            // lb{4,6}_service: 12 bytes for both families.
            MapKind::Services4 | MapKind::Services6 => 12,
            MapKind::Backends4 | MapKind::Backends6 => addr_len(self.family()) + 8,
            MapKind::RevNat4 | MapKind::RevNat6 => addr_len(self.family()) + 2,
        }
    }

    fn services(family: Family) -> MapKind {
        match family {
            Family::Ipv4 => MapKind::Services4,
            Family::Ipv6 => MapKind::Services6,
        }
    }

    fn backends(family: Family) -> MapKind {
        match family {
            Family::Ipv4 => MapKind::Backends4,
            Family::Ipv6 => MapKind::Backends6,
        }
    }

    fn rev_nat(family: Family) -> MapKind {
        match family {
            Family::Ipv4 => MapKind::RevNat4,
            Family::Ipv6 => MapKind::RevNat6,
        }
    }
}

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

/// The L4 protocol byte of a key or backend. 0 is Cilium's `IPPROTO_ANY`: keys written
/// before protocol differentiation, and wildcard entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum L4 {
    Any,
    Tcp,
    Udp,
    Sctp,
    Other(u8),
}

impl L4 {
    pub fn from_byte(b: u8) -> L4 {
        match b {
            0 => L4::Any,
            6 => L4::Tcp,
            17 => L4::Udp,
            132 => L4::Sctp,
            other => L4::Other(other),
        }
    }

    pub fn byte(self) -> u8 {
        match self {
            L4::Any => 0,
            L4::Tcp => 6,
            L4::Udp => 17,
            L4::Sctp => 132,
            L4::Other(b) => b,
        }
    }
}

/// The key's lookup scope (`LB_LOOKUP_SCOPE_EXT` 0, `LB_LOOKUP_SCOPE_INT` 1). A service
/// with two backend sets (a Local traffic policy) has one master per scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    External,
    Internal,
    Other(u8),
}

impl Scope {
    pub fn from_byte(b: u8) -> Scope {
        match b {
            0 => Scope::External,
            1 => Scope::Internal,
            other => Scope::Other(other),
        }
    }
}

/// A service value's `flags` (low byte) and `flags2` (high byte), combined as Cilium's
/// `GetFlags()` does. Bit meanings from the `SVC_FLAG_*` enums in `bpf/lib/lb.h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SvcFlags(pub u16);

impl SvcFlags {
    pub const EXTERNAL_IP: u16 = 1 << 0;
    pub const NODEPORT: u16 = 1 << 1;
    pub const EXT_LOCAL_SCOPE: u16 = 1 << 2;
    pub const HOSTPORT: u16 = 1 << 3;
    pub const AFFINITY: u16 = 1 << 4;
    pub const LOADBALANCER: u16 = 1 << 5;
    pub const ROUTABLE: u16 = 1 << 6;
    pub const SOURCE_RANGE: u16 = 1 << 7;
    pub const LOCALREDIRECT: u16 = 1 << 8;
    pub const NAT_46X64: u16 = 1 << 9;
    pub const L7_LOADBALANCER: u16 = 1 << 10;
    /// `LOOPBACK` on a HostPort entry, `L7_DELEGATE` otherwise (same bit).
    pub const LOOPBACK: u16 = 1 << 11;
    pub const INT_LOCAL_SCOPE: u16 = 1 << 12;
    pub const TWO_SCOPES: u16 = 1 << 13;
    /// On a backend slot: the slot is quarantined. On a master the same bit means
    /// `SOURCE_RANGE_DENY`.
    pub const QUARANTINED: u16 = 1 << 14;
    pub const FWD_MODE_DSR: u16 = 1 << 15;

    pub fn has(self, bit: u16) -> bool {
        self.0 & bit != 0
    }
    pub fn nodeport(self) -> bool {
        self.has(Self::NODEPORT)
    }
    /// Not a surrogate (`0.0.0.0:port`) or ClusterIP entry.
    pub fn routable(self) -> bool {
        self.has(Self::ROUTABLE)
    }
    /// externalTrafficPolicy=Local.
    pub fn ext_local(self) -> bool {
        self.has(Self::EXT_LOCAL_SCOPE)
    }
    /// internalTrafficPolicy=Local.
    pub fn int_local(self) -> bool {
        self.has(Self::INT_LOCAL_SCOPE)
    }
    pub fn two_scopes(self) -> bool {
        self.has(Self::TWO_SCOPES)
    }
    pub fn hostport(self) -> bool {
        self.has(Self::HOSTPORT)
    }
    pub fn loadbalancer(self) -> bool {
        self.has(Self::LOADBALANCER)
    }
    pub fn external_ip(self) -> bool {
        self.has(Self::EXTERNAL_IP)
    }
}

/// One entry of a services map, master (slot 0) or backend slot.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceEntry {
    pub address: IpAddr,
    pub port: u16,
    pub slot: u16,
    pub proto: L4,
    pub scope: Scope,
    /// The value's first word: the backend ID on a slot; on a master, the LB algorithm
    /// (top 8 bits) and affinity timeout (low 24), or the L7 proxy port.
    pub word: u32,
    pub count: u16,
    pub rev_nat: u16,
    pub flags: SvcFlags,
    pub qcount: u16,
}

impl ServiceEntry {
    pub fn is_master(&self) -> bool {
        self.slot == 0
    }
}

/// A frontend: its master entry and the backend slots found for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Frontend {
    pub address: IpAddr,
    pub port: u16,
    pub proto: L4,
    pub scope: Scope,
    /// Active backend slots (`1..=count` take new connections).
    pub count: u16,
    /// Quarantined slots, after the active ones.
    pub qcount: u16,
    pub rev_nat: u16,
    pub flags: SvcFlags,
    /// The master's first word (LB algorithm and affinity timeout, or L7 proxy port).
    pub master_word: u32,
    /// `(slot, backend ID)`, ordered by slot.
    pub slots: Vec<(u16, u32)>,
}

/// Backend state, the values of `lb{4,6}_backend.flags` (`BE_STATE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendState {
    Active,
    Terminating,
    Quarantined,
    Maintenance,
    Other(u8),
}

/// One entry of a backends map.
#[derive(Debug, Clone, PartialEq)]
pub struct Backend {
    pub id: u32,
    pub address: IpAddr,
    pub port: u16,
    pub proto: L4,
    /// The raw `flags` byte: the backend state.
    pub flags: u8,
    pub cluster_id: u16,
    pub zone: u8,
}

impl Backend {
    pub fn state(&self) -> BackendState {
        match self.flags {
            0 => BackendState::Active,
            1 => BackendState::Terminating,
            2 => BackendState::Quarantined,
            3 => BackendState::Maintenance,
            other => BackendState::Other(other),
        }
    }
}

/// One entry of a reverse-NAT map: rev-NAT ID → the frontend replies come from.
#[derive(Debug, Clone, PartialEq)]
pub struct RevNat {
    pub id: u16,
    pub address: IpAddr,
    pub port: u16,
}

fn addr_len(family: Family) -> usize {
    match family {
        Family::Ipv4 => 4,
        Family::Ipv6 => 16,
    }
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
