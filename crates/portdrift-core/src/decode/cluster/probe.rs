//! Lenient readers for items that may be malformed: they accept any JSON value and
//! keep only what has the expected type, so a broken item can still be named, routed
//! by kind, and pinned to its Service.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::heart::desired::slices::{LABEL_SERVICE_NAME, OPT_OUT_LABELS};
use crate::heart::desired::trim::LABEL_ZONE;

/// What can be made out of any item, however malformed: enough to name it, route it
/// by kind, and pin it to a Service.
#[derive(Debug, Default)]
pub(crate) struct ItemProbe {
    pub kind: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    /// None when `metadata.labels` could not be read.
    pub labels: Option<LabelProbe>,
}

/// The labels that matter for routing a broken item.
#[derive(Debug, Default)]
pub(crate) struct LabelProbe {
    pub service_name: LabelValue,
    /// An opt-out label (`service-proxy-name`, `headless`) is present.
    pub opted_out: bool,
    pub zone: Option<String>,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) enum LabelValue {
    #[default]
    Absent,
    Str(String),
    NotAString,
}

/// Probes one item. An error here is a JSON syntax error (or nesting too deep): any
/// well-formed value probes, an item that is not an object as an empty probe.
pub(crate) fn probe_item(raw: &[u8]) -> Result<ItemProbe, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(raw);
    match de.deserialize_any(ItemProbeVisitor) {
        Ok(probe) => de.end().map(|()| probe),
        Err(e) if e.classify() == serde_json::error::Category::Data => {
            // Not an object: still check that it is well-formed JSON.
            serde_json::from_slice::<IgnoredAny>(raw).map(|_| ItemProbe::default())
        }
        Err(e) => Err(e),
    }
}

struct ItemProbeVisitor;

impl<'de> Visitor<'de> for ItemProbeVisitor {
    type Value = ItemProbe;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ItemProbe, A::Error> {
        let mut probe = ItemProbe::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "kind" => probe.kind = map.next_value::<LooseStr>()?.0,
                "metadata" => {
                    let meta = map.next_value::<MetaProbe>()?;
                    probe.name = meta.name;
                    probe.namespace = meta.namespace;
                    probe.labels = meta.labels;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(probe)
    }
}

/// `metadata`, read leniently.
#[derive(Debug, Default)]
struct MetaProbe {
    name: Option<String>,
    namespace: Option<String>,
    labels: Option<LabelProbe>,
}

impl<'de> Deserialize<'de> for MetaProbe {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(MetaProbeVisitor)
    }
}

struct MetaProbeVisitor;

impl<'de> Visitor<'de> for MetaProbeVisitor {
    type Value = MetaProbe;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MetaProbe, A::Error> {
        let mut meta = MetaProbe::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "name" => meta.name = map.next_value::<LooseStr>()?.0,
                "namespace" => meta.namespace = map.next_value::<LooseStr>()?.0,
                "labels" => meta.labels = map.next_value::<LooseLabels>()?.0,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(meta)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<MetaProbe, A::Error> {
        drain_seq(seq).map(|()| MetaProbe::default())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<MetaProbe, E> {
        Ok(MetaProbe::default())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<MetaProbe, E> {
        Ok(MetaProbe::default())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<MetaProbe, E> {
        Ok(MetaProbe::default())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<MetaProbe, E> {
        Ok(MetaProbe::default())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<MetaProbe, E> {
        Ok(MetaProbe::default())
    }

    fn visit_unit<E: de::Error>(self) -> Result<MetaProbe, E> {
        Ok(MetaProbe::default())
    }
}

/// `metadata.labels`, read leniently: None when it is not an object (a missing or
/// null one reads as no labels).
struct LooseLabels(Option<LabelProbe>);

impl<'de> Deserialize<'de> for LooseLabels {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LooseLabelsVisitor)
    }
}

struct LooseLabelsVisitor;

impl<'de> Visitor<'de> for LooseLabelsVisitor {
    type Value = LooseLabels;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LooseLabels, A::Error> {
        let mut labels = LabelProbe::default();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value::<LooseStr>()?.0;
            if key == LABEL_SERVICE_NAME {
                labels.service_name = value.map_or(LabelValue::NotAString, LabelValue::Str);
            } else if key == LABEL_ZONE {
                labels.zone = value;
            } else if OPT_OUT_LABELS.contains(&key.as_str()) {
                labels.opted_out = true;
            }
        }
        Ok(LooseLabels(Some(labels)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<LooseLabels, E> {
        Ok(LooseLabels(Some(LabelProbe::default())))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<LooseLabels, A::Error> {
        drain_seq(seq).map(|()| LooseLabels(None))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<LooseLabels, E> {
        Ok(LooseLabels(None))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<LooseLabels, E> {
        Ok(LooseLabels(None))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<LooseLabels, E> {
        Ok(LooseLabels(None))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<LooseLabels, E> {
        Ok(LooseLabels(None))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<LooseLabels, E> {
        Ok(LooseLabels(None))
    }
}

/// Any JSON value, kept only when it is a string.
pub(crate) struct LooseStr(pub Option<String>);

impl<'de> Deserialize<'de> for LooseStr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LooseStrVisitor)
    }
}

struct LooseStrVisitor;

impl<'de> Visitor<'de> for LooseStrVisitor {
    type Value = LooseStr;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<LooseStr, E> {
        Ok(LooseStr(Some(v.to_string())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<LooseStr, E> {
        Ok(LooseStr(Some(v)))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<LooseStr, E> {
        Ok(LooseStr(None))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<LooseStr, E> {
        Ok(LooseStr(None))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<LooseStr, E> {
        Ok(LooseStr(None))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<LooseStr, E> {
        Ok(LooseStr(None))
    }

    fn visit_unit<E: de::Error>(self) -> Result<LooseStr, E> {
        Ok(LooseStr(None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<LooseStr, A::Error> {
        drain_seq(seq).map(|()| LooseStr(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LooseStr, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(LooseStr(None))
    }
}

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}
