//! `bpftool -j map dump pinned PATH` output → decoded entries.
//!
//! bpftool prints a JSON array of `{"key": ["0x0a", ...], "value": [...]}`; with BTF it
//! adds a `"formatted"` object beside them. Only the hex arrays are read: the formatted
//! form's field names follow whichever BTF the map carries. An entry that cannot be read
//! is kept as a [`DumpProblem`] with its index, and the rest is still read.

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
pub fn parse_bpftool_dump(json: &[u8], kind: MapKind) -> Result<MapDump, CiliumMapError> {
    let document: Value = serde_json::from_slice(json).map_err(|e| {
        let mut text = e.to_string();
        text.truncate(text.char_indices().nth(120).map_or(text.len(), |(i, _)| i));
        CiliumMapError::NotJson(text)
    })?;
    let Value::Array(items) = document else {
        if let Some(Value::String(error)) = document.get("error") {
            return Err(CiliumMapError::Tool(error.chars().take(MAX_QUOTED * 4).collect()));
        }
        return Err(CiliumMapError::NotAnArray(json_type(&document)));
    };
    let mut dump = MapDump {
        entries: items.len(),
        ..MapDump::default()
    };
    let family = kind.family();
    for (index, item) in items.iter().enumerate() {
        let decoded = key_and_value(item).and_then(|(key, value)| match kind {
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
    }
    Ok(dump)
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

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
