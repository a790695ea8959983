//! What one read of a node's Cilium service maps gathered: each map's read (where, how
//! much, its size limit, what could not be decoded) and, per family, the frontends,
//! backends and reverse-NAT entries decoded from them.

use std::collections::{BTreeMap, BTreeSet};

use crate::heart::cilium::{Frontend, GroupProblem, MapBackend, MapKind, RevNat};
use crate::heart::model::Family;

/// What `bpftool map show` says of a map: its type and sizes as the kernel holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapStats {
    /// The kernel's map type name (`hash`).
    pub map_type: String,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
}

/// The read of one map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapRead {
    pub kind: MapKind,
    /// The file or command it was read from, for messages.
    pub origin: String,
    /// The map's type and sizes, when they were read.
    pub stats: Option<MapStats>,
    /// Entries the dump held, decoded or not.
    pub entries: usize,
    /// Why entries could not be decoded, one sentence each (the first few).
    pub unreadable: Vec<String>,
    /// How many entries could not be decoded.
    pub unreadable_count: usize,
    /// The map was read whole and every entry decoded: only then may an absence in it
    /// (a backend not found, a slot missing) be concluded.
    pub complete: bool,
}

/// One family's maps, decoded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FamilyMaps {
    /// Frontends (a master entry and its slots), ordered by key.
    pub frontends: Vec<Frontend>,
    /// What could not be placed under a frontend.
    pub problems: Vec<GroupProblem>,
    pub backends: BTreeMap<u32, MapBackend>,
    pub rev_nats: BTreeMap<u16, RevNat>,
    /// Every backend ID any slot of the services map names, whether or not the slot
    /// could be placed under a frontend: a backend named by none of them is leaked.
    pub referenced: BTreeSet<u32>,
    /// Each of the three maps was read whole (services, backends, reverse NAT).
    pub services_complete: bool,
    pub backends_complete: bool,
    pub rev_nat_complete: bool,
}

/// Everything read of the node's Cilium service maps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CiliumMaps {
    /// Every map a read was attempted for and that exists.
    pub reads: Vec<MapRead>,
    /// The families whose services map exists, with what was decoded.
    pub families: BTreeMap<Family, FamilyMaps>,
}

impl CiliumMaps {
    /// The read of `kind`, when the map exists.
    pub fn read(&self, kind: MapKind) -> Option<&MapRead> {
        self.reads.iter().find(|r| r.kind == kind)
    }

    /// The node holds Cilium's service maps: its services map of some family was found.
    pub fn present(&self) -> bool {
        !self.families.is_empty()
    }

    /// Every map of every family present was read whole and decoded.
    pub fn complete(&self) -> bool {
        self.present()
            && self
                .families
                .values()
                .all(|f| f.services_complete && f.backends_complete && f.rev_nat_complete)
    }

    /// How many frontends of every family were read.
    pub fn frontend_count(&self) -> usize {
        self.families.values().map(|f| f.frontends.len()).sum()
    }
}
