//! The agent's `--log-format json` lines, read strictly: one flat object per line, no
//! key twice.

/// Every line of a `--log-format json` log, parsed: each must be one flat JSON object
/// (no nested `fields`) with no key twice, which serde_json alone would let pass,
/// keeping the last, as jq and Loki do.
pub fn json_log_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut de = serde_json::Deserializer::from_str(line);
            let value = serde::Deserialize::deserialize(&mut de)
                .map(|Unique(v)| v)
                .unwrap_or_else(|e| panic!("not a JSON log line without repeated keys ({e}): {line}"));
            assert!(
                value.is_object() && value.get("fields").is_none(),
                "not one flat JSON object: {line}"
            );
            value
        })
        .collect()
}

/// A JSON value whose objects repeat no key.
struct Unique(serde_json::Value);

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Unique;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Unique, E> {
                Ok(Unique(v.into()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Unique, E> {
                Ok(Unique(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Unique, E> {
                Ok(Unique(v.into()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Unique, E> {
                Ok(Unique(v.into()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Unique, E> {
                Ok(Unique(v.into()))
            }
            fn visit_unit<E>(self) -> Result<Unique, E> {
                Ok(Unique(serde_json::Value::Null))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
                let mut out = Vec::new();
                while let Some(Unique(v)) = seq.next_element()? {
                    out.push(v);
                }
                Ok(Unique(out.into()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
                let mut out = serde_json::Map::new();
                while let Some((key, Unique(v))) = map.next_entry::<String, Unique>()? {
                    if out.insert(key.clone(), v).is_some() {
                        return Err(serde::de::Error::custom(format!("the key {key:?} twice")));
                    }
                }
                Ok(Unique(out.into()))
            }
        }
        d.deserialize_any(Visit)
    }
}
