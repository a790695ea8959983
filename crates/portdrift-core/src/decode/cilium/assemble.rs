//! One family's three map dumps → [`FamilyMaps`], and `bpftool -j map show` → the map's
//! type and sizes, checked against the layout this module reads.

use serde_json::Value;

use crate::heart::cilium::{FamilyMaps, MapKind, MapStats};

use super::{CiliumMapError, MapDump, group_frontends};

/// Reads `bpftool -j map show pinned PATH`: `{"type": "hash", "bytes_key": 12,
/// "bytes_value": 12, "max_entries": 65536, ...}`.
pub fn parse_bpftool_show(json: &[u8]) -> Result<MapStats, CiliumMapError> {
    let document: Value = serde_json::from_slice(json).map_err(|e| {
        let text: String = e.to_string().chars().take(120).collect();
        CiliumMapError::NotJson(text)
    })?;
    let Value::Object(map) = document else {
        return Err(CiliumMapError::NotAnObject);
    };
    let number = |field: &'static str| {
        map.get(field)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or(CiliumMapError::Missing(field))
    };
    Ok(MapStats {
        map_type: map
            .get("type")
            .and_then(Value::as_str)
            .ok_or(CiliumMapError::Missing("type"))?
            .chars()
            .take(40)
            .collect(),
        key_size: number("bytes_key")?,
        value_size: number("bytes_value")?,
        max_entries: number("max_entries")?,
    })
}

/// Why a map's type or sizes are not the layout [`MapKind`] describes; None when they are.
/// Such a map is not decoded at all: another Cilium release's layout is not guessed at.
pub fn layout_mismatch(kind: MapKind, stats: &MapStats) -> Option<String> {
    let expected = (kind.key_size() as u32, kind.value_size() as u32);
    if stats.map_type != "hash" {
        return Some(format!(
            "it is a {} map, not the hash map this reads",
            stats.map_type
        ));
    }
    ((stats.key_size, stats.value_size) != expected).then(|| {
        format!(
            "its keys are {} bytes and values {}, not the {} and {} of the layout this reads (another Cilium release?)",
            stats.key_size, stats.value_size, expected.0, expected.1
        )
    })
}

/// One family's dumps, each with whether it was read whole (None: not read at all).
pub struct FamilyDumps<'a> {
    pub services: Option<(&'a MapDump, bool)>,
    pub backends: Option<(&'a MapDump, bool)>,
    pub rev_nat: Option<(&'a MapDump, bool)>,
}

/// Groups the services entries into frontends and indexes backends and reverse-NAT
/// entries by ID. A map counts as complete only when read whole with every entry decoded.
pub fn family_maps(dumps: FamilyDumps<'_>) -> FamilyMaps {
    let complete = |d: Option<(&MapDump, bool)>| d.is_some_and(|(d, whole)| whole && d.problems.is_empty());
    let mut fm = FamilyMaps {
        services_complete: complete(dumps.services),
        backends_complete: complete(dumps.backends),
        rev_nat_complete: complete(dumps.rev_nat),
        ..FamilyMaps::default()
    };
    if let Some((d, _)) = dumps.services {
        let (frontends, problems) = group_frontends(&d.services);
        fm.frontends = frontends;
        fm.problems = problems;
        fm.referenced = d
            .services
            .iter()
            .filter(|e| !e.is_master())
            .map(|e| e.word)
            .collect();
    }
    if let Some((d, _)) = dumps.backends {
        fm.backends = d.backends.iter().map(|b| (b.id, b.clone())).collect();
    }
    if let Some((d, _)) = dumps.rev_nat {
        fm.rev_nats = d.rev_nats.iter().map(|r| (r.id, r.clone())).collect();
    }
    fm
}
