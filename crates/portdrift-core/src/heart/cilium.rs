//! Cilium's service load-balancing BPF maps as values: the frontends (a master entry and
//! its backend slots), the backends by ID and the reverse-NAT entries, as
//! `decode::cilium` reads them from `cilium_lb{4,6}_services_v2`,
//! `cilium_lb{4,6}_backends_v3` and `cilium_lb{4,6}_reverse_nat`, and what a read of
//! the node's maps gathered ([`CiliumMaps`]), for `check` to compare with the cluster.
//!
//! Field meanings follow Cilium's `bpf/lib/lb.h` (`struct lb4_key`, `lb4_service`,
//! `lb4_backend`) and `pkg/loadbalancer/maps/types.go`.

use std::net::IpAddr;

use crate::heart::model::Family;

mod check;
pub mod exposure;
pub mod lines;
mod maps;

pub use check::{CiliumCheck, cilium_findings};
pub use maps::{CiliumMaps, FamilyMaps, MapRead, MapStats};

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

    pub fn services(family: Family) -> MapKind {
        match family {
            Family::Ipv4 => MapKind::Services4,
            Family::Ipv6 => MapKind::Services6,
        }
    }

    pub fn backends(family: Family) -> MapKind {
        match family {
            Family::Ipv4 => MapKind::Backends4,
            Family::Ipv6 => MapKind::Backends6,
        }
    }

    pub fn rev_nat(family: Family) -> MapKind {
        match family {
            Family::Ipv4 => MapKind::RevNat4,
            Family::Ipv6 => MapKind::RevNat6,
        }
    }
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
pub struct MapBackend {
    pub id: u32,
    pub address: IpAddr,
    pub port: u16,
    pub proto: L4,
    /// The raw `flags` byte: the backend state.
    pub flags: u8,
    pub cluster_id: u16,
    pub zone: u8,
}

impl MapBackend {
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

/// What names a frontend in the map: the key without its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrontendKey {
    pub address: IpAddr,
    pub port: u16,
    pub proto: L4,
    pub scope: Scope,
}

impl FrontendKey {
    pub fn of(entry: &ServiceEntry) -> FrontendKey {
        FrontendKey {
            address: entry.address,
            port: entry.port,
            proto: entry.proto,
            scope: entry.scope,
        }
    }
}

/// Why entries could not all be placed under a frontend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupProblem {
    /// Backend slots whose frontend has no master entry: the datapath never reaches them.
    MissingMaster { key: FrontendKey, slots: Vec<u16> },
    /// Two different master values for one frontend (a dump taken while it changed);
    /// the frontend is left out.
    ConflictingMaster { key: FrontendKey },
    /// One slot with different backend IDs; the slot is left out.
    ConflictingSlot {
        key: FrontendKey,
        slot: u16,
        backend_ids: Vec<u32>,
    },
    /// The same slot (or master) read more than once with the same value: kept once.
    RepeatedEntry { key: FrontendKey, slot: u16 },
    /// A slot past `count + qcount`: no selection reaches it; it is left out.
    SlotBeyondCount {
        key: FrontendKey,
        slot: u16,
        backend_id: u32,
        count: u16,
        qcount: u16,
    },
    /// Slots in `1..=count + qcount` that are not in the map, as `(first, last)`
    /// ranges: a selection that lands on one finds no backend.
    MissingSlots {
        key: FrontendKey,
        ranges: Vec<(u16, u16)>,
    },
}

/// Bytes of an address of `family`.
pub fn addr_len(family: Family) -> usize {
    match family {
        Family::Ipv4 => 4,
        Family::Ipv6 => 16,
    }
}

#[cfg(test)]
mod tests;
