//! `bpftool -j map dump pinned PATH` output → decoded entries.
//!
//! bpftool prints a JSON array of `{"key": ["0x0a", ...], "value": [...]}`; with BTF it
//! adds a `"formatted"` object beside them. Only the hex arrays are read: the formatted
//! form's field names follow whichever BTF the map carries. An entry that cannot be read
//! is kept as a [`DumpProblem`] with its index, and the rest is still read.

use std::cell::Cell;

use serde_json::Value;

use super::{
    Backend, CiliumMapError, MapKind, RevNat, ServiceEntry, parse_backend_entry, parse_rev_nat_entry,
    parse_service_entry,
};

/// Longest piece of input quoted in an error.
const MAX_QUOTED: usize = 40;

/// One entry of a dump that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpProblem {
    /// The entry's position in the dump's array, from 0.
    pub index: usize,
    pub error: CiliumMapError,
}

/// What a dump of one map held. Only the vector for `kind` is filled.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MapDump {
    pub services: Vec<ServiceEntry>,
    pub backends: Vec<Backend>,
    pub rev_nats: Vec<RevNat>,
    /// Entries in the dump, read or not.
    pub entries: usize,
    pub problems: Vec<DumpProblem>,
}

/// Reads one map's `bpftool -j map dump` output. An error means the document as a whole
/// is unreadable (not JSON, not an array); a bad entry is a problem in the result.
///
/// The array is walked one entry at a time, each decoded as it is read: a whole
/// `serde_json::Value` tree of a 65,536-entry map (every byte a string) would take
/// several times the document's own size.
pub fn parse_bpftool_dump(json: &[u8], kind: MapKind) -> Result<MapDump, CiliumMapError> {
    read_bpftool_dump(json, kind)
}

/// [`parse_bpftool_dump`] from a reader (bpftool's stdout as it prints), so the document
/// is never held whole either. Give it a buffered reader: serde_json reads byte by byte.
pub fn read_bpftool_dump<R: std::io::Read>(reader: R, kind: MapKind) -> Result<MapDump, CiliumMapError> {
    let refused = Cell::new(None);
    let mut de = serde_json::Deserializer::from_reader(reader);
    let visitor = DumpVisitor {
        kind,
        refused: &refused,
    };
    let dump = serde::Deserializer::deserialize_any(&mut de, visitor).map_err(|e| {
        // What the visitor itself refused, it said in `refused`; the rest is serde_json's.
        refused
            .take()
            .unwrap_or_else(|| CiliumMapError::NotJson(e.to_string().chars().take(120).collect()))
    })?;
    de.end()
        .map_err(|e| CiliumMapError::NotJson(e.to_string().chars().take(120).collect()))?;
    Ok(dump)
}

struct DumpVisitor<'a> {
    kind: MapKind,
    /// Why the document was refused, when the visitor refused it (serde's own error
    /// type carries only text).
    refused: &'a Cell<Option<CiliumMapError>>,
}

impl DumpVisitor<'_> {
    fn refuse<E: serde::de::Error>(&self, why: CiliumMapError) -> E {
        let text = why.to_string();
        self.refused.set(Some(why));
        E::custom(text)
    }
}

impl<'de> serde::de::Visitor<'de> for DumpVisitor<'_> {
    type Value = MapDump;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON array of entries")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<MapDump, A::Error> {
        let mut dump = MapDump::default();
        let family = self.kind.family();
        let mut index = 0;
        // Each entry alone as a small value: bad ones become problems, not an error.
        while let Some(item) = seq.next_element::<Value>()? {
            let decoded = key_and_value(&item).and_then(|(key, value)| match self.kind {
                MapKind::Services4 | MapKind::Services6 => {
                    parse_service_entry(&key, &value, family).map(|e| dump.services.push(e))
                }
                MapKind::Backends4 | MapKind::Backends6 => {
                    parse_backend_entry(&key, &value, family).map(|b| dump.backends.push(b))
                }
                MapKind::RevNat4 | MapKind::RevNat6 => {
                    parse_rev_nat_entry(&key, &value, family).map(|r| dump.rev_nats.push(r))
                }
            });
            if let Err(error) = decoded {
                dump.problems.push(DumpProblem { index, error });
            }
            index += 1;
        }
        dump.entries = index;
        Ok(dump)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<MapDump, A::Error> {
        // bpftool's `{"error": "..."}` answer.
        let mut error = None;
        while let Some((k, v)) = map.next_entry::<String, Value>()? {
            if k == "error"
                && let Value::String(text) = v
            {
                error = Some(text);
            }
        }
        Err(self.refuse(match error {
            Some(text) => CiliumMapError::Tool(text.chars().take(MAX_QUOTED * 4).collect()),
            None => CiliumMapError::NotAnArray("an object"),
        }))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<MapDump, E> {
        Err(self.refuse(CiliumMapError::NotAnArray("null")))
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<MapDump, E> {
        Err(self.refuse(CiliumMapError::NotAnArray("a boolean")))
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<MapDump, E> {
        Err(self.refuse(CiliumMapError::NotAnArray("a number")))
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<MapDump, E> {
        Err(self.refuse(CiliumMapError::NotAnArray("a number")))
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<MapDump, E> {
        Err(self.refuse(CiliumMapError::NotAnArray("a number")))
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<MapDump, E> {
        Err(self.refuse(CiliumMapError::NotAnArray("a string")))
    }
}

/// The entry's hex key and value bytes.
fn key_and_value(item: &Value) -> Result<(Vec<u8>, Vec<u8>), CiliumMapError> {
    let Value::Object(entry) = item else {
        return Err(CiliumMapError::NotAnObject);
    };
    let (key, value) = (entry.get("key"), entry.get("value"));
    if key.is_none() && value.is_none() && entry.contains_key("formatted") {
        return Err(CiliumMapError::OnlyFormatted);
    }
    let key = hex_bytes(key.ok_or(CiliumMapError::Missing("key"))?, "key")?;
    let value = hex_bytes(value.ok_or(CiliumMapError::Missing("value"))?, "value")?;
    Ok((key, value))
}

/// `["0x0a", "0x00", ...]` → bytes.
fn hex_bytes(v: &Value, field: &'static str) -> Result<Vec<u8>, CiliumMapError> {
    let Value::Array(items) = v else {
        return Err(CiliumMapError::NotAnArrayOfBytes { field });
    };
    items
        .iter()
        .enumerate()
        .map(|(position, item)| {
            let bad = || CiliumMapError::NotHexByte {
                field,
                position,
                text: quote(item),
            };
            let Value::String(s) = item else {
                return Err(bad());
            };
            let digits = s
                .strip_prefix("0x")
                .or_else(|| s.strip_prefix("0X"))
                .ok_or_else(bad)?;
            if digits.is_empty() || digits.len() > 2 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad());
            }
            u8::from_str_radix(digits, 16).map_err(|_| bad())
        })
        .collect()
}

fn quote(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    text.chars().take(MAX_QUOTED).collect()
}
