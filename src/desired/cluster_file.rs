//! Streaming reader of a bundle's `cluster.json`: a v1 `List` as
//! `kubectl get services,endpointslices -A -o json` prints it (optionally with `Node`
//! items too).
//!
//! The `items` array is walked one item at a time: each item's text is held only
//! while it is reduced into a [`DesiredBuilder`], so a 30 MB file never sits in memory
//! as a whole, let alone as a `serde_json::Value`. An item that does not deserialize is
//! reported and skipped; only a document that is not JSON, or not a List, is an error.

use std::fmt;
use std::io::{BufReader, Read};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::error::Category;
use serde_json::value::RawValue;

use super::build::{DesiredBuilder, object_name};
use super::model::DesiredState;
use super::slices::{LABEL_SERVICE_NAME, OPT_OUT_LABELS, parse_api_protocol};
use crate::model::Protocol;

/// The Node label kube-proxy reads for topology hints.
const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// Why a cluster state file could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ClusterFileError {
    #[error("cannot read the cluster state: {0}")]
    Io(#[source] std::io::Error),
    #[error("the cluster state ends early (truncated?): {0}")]
    Truncated(#[source] serde_json::Error),
    #[error("the cluster state is not valid JSON: {0}")]
    Syntax(#[source] serde_json::Error),
    #[error(
        "the cluster state is not a v1 List (as `kubectl get services,endpointslices -A -o json` prints): {found}"
    )]
    NotAList { found: String },
}

impl From<serde_json::Error> for ClusterFileError {
    fn from(e: serde_json::Error) -> Self {
        match e.classify() {
            Category::Io => ClusterFileError::Io(e.into()),
            Category::Eof => ClusterFileError::Truncated(e),
            Category::Syntax => ClusterFileError::Syntax(e),
            Category::Data => ClusterFileError::NotAList { found: e.to_string() },
        }
    }
}

/// Reads a `cluster.json` List from `reader` and computes the desired state of `node`
/// (whose Node item, if present, gives the zone for topology hints).
pub fn read_cluster_state<R: Read>(reader: R, node: Option<&str>) -> Result<DesiredState, ClusterFileError> {
    let mut state = ReadState {
        builder: DesiredBuilder::new(node),
        node,
        node_zone: None,
        list_kind: None,
        next_index: 0,
    };
    let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(64 * 1024, reader));
    let kind = de.deserialize_map(ListVisitor { state: &mut state })?;
    de.end()?;
    if !is_list_kind(kind.as_deref()) {
        let found = kind.map_or_else(|| "it has no kind".to_string(), |k| format!("its kind is {k:?}"));
        return Err(ClusterFileError::NotAList { found });
    }
    Ok(state.builder.finish(state.node_zone.as_deref()))
}

fn is_list_kind(kind: Option<&str>) -> bool {
    matches!(
        kind,
        Some("List" | "ServiceList" | "EndpointSliceList" | "NodeList")
    )
}

/// What the reader carries from item to item.
struct ReadState<'n> {
    builder: DesiredBuilder,
    node: Option<&'n str>,
    node_zone: Option<String>,
    /// The List's own kind, if it came before `items` (typed lists omit item kinds).
    list_kind: Option<String>,
    next_index: usize,
}

impl ReadState<'_> {
    fn take_item(&mut self, raw: &RawValue) {
        let index = self.next_index;
        self.next_index += 1;
        let probe = probe_item(raw.get());
        let kind = probe.kind.clone().or_else(|| self.kind_from_list());
        match kind.as_deref() {
            Some("Service") => self.take_service(raw, &probe),
            Some("EndpointSlice") => self.take_slice(raw, &probe),
            Some("Node") => self.take_node(&probe),
            Some(_) => {}
            None => {
                self.builder
                    .problem(format!("item {index}"), "has no kind; skipped");
                self.builder.mark_uncertain();
            }
        }
    }

    fn kind_from_list(&self) -> Option<String> {
        let list = self.list_kind.as_deref()?;
        list.strip_suffix("List")
            .filter(|k| !k.is_empty())
            .map(str::to_string)
    }

    fn take_service(&mut self, raw: &RawValue, probe: &ItemProbe) {
        match serde_json::from_str::<Service>(raw.get()) {
            Ok(service) => self.builder.add_service(&service),
            Err(e) => {
                let object = object_name("Service", &probe.namespace, &probe.name);
                let ports = lenient_node_ports(raw.get());
                self.builder
                    .unreadable_service(object, cannot_read(&e), ports.as_deref());
            }
        }
    }

    fn take_slice(&mut self, raw: &RawValue, probe: &ItemProbe) {
        match serde_json::from_str::<EndpointSlice>(raw.get()) {
            Ok(slice) => self.builder.add_endpoint_slice(&slice),
            Err(e) => {
                let object = object_name("EndpointSlice", &probe.namespace, &probe.name);
                let problem = cannot_read(&e);
                match &probe.labels {
                    // kube-proxy would have ignored this slice whatever it held.
                    Some(labels) if labels.opted_out || labels.service_name == LabelValue::Absent => {
                        self.builder
                            .problem(object, format!("{problem}; kube-proxy ignores it anyway"));
                    }
                    Some(LabelProbe {
                        service_name: LabelValue::Str(service),
                        ..
                    }) => {
                        let namespace = probe.namespace.as_deref();
                        self.builder
                            .unreadable_slice(object, problem, namespace, Some(service));
                    }
                    _ => self.builder.unreadable_slice(object, problem, None, None),
                }
            }
        }
    }

    fn take_node(&mut self, probe: &ItemProbe) {
        if self.node.is_some() && probe.name.as_deref() == self.node {
            self.node_zone = probe.labels.as_ref().and_then(|l| l.zone.clone());
        }
    }
}

/// `cannot be read: <serde's message>`, without serde's position (it counts within
/// the item, which would mislead).
fn cannot_read(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    format!(
        "cannot be read: {}",
        message.strip_suffix(&position).unwrap_or(&message)
    )
}

/// The nodePorts of a Service item that does not deserialize, read as leniently as
/// possible: integers or numeric strings, protocol defaulting to TCP. None when some
/// port's nodePort or protocol cannot be made out.
fn lenient_node_ports(raw: &str) -> Option<Vec<(Protocol, u16)>> {
    let item: serde_json::Value = serde_json::from_str(raw).ok()?;
    let ports = match item.get("spec") {
        None | Some(serde_json::Value::Null) => return Some(Vec::new()),
        Some(spec) => match spec.as_object()?.get("ports") {
            None | Some(serde_json::Value::Null) => return Some(Vec::new()),
            Some(ports) => ports.as_array()?,
        },
    };
    let mut out = Vec::new();
    for port in ports {
        let port = port.as_object()?;
        let node_port = match port.get("nodePort") {
            None | Some(serde_json::Value::Null) => continue,
            Some(serde_json::Value::Number(n)) => n.as_u64()?,
            Some(serde_json::Value::String(s)) => s.trim().parse().ok()?,
            Some(_) => return None,
        };
        if node_port == 0 {
            continue;
        }
        let node_port = u16::try_from(node_port).ok()?;
        let protocol = match port.get("protocol") {
            None | Some(serde_json::Value::Null) => Protocol::Tcp,
            Some(p) => parse_api_protocol(&p.as_str()?.to_ascii_uppercase())?,
        };
        out.push((protocol, node_port));
    }
    Some(out)
}

/// Walks the top-level List object, streaming its `items`. Returns the List's kind.
struct ListVisitor<'s, 'n> {
    state: &'s mut ReadState<'n>,
}

impl<'de> Visitor<'de> for ListVisitor<'_, '_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object (a v1 List)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut kind = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "kind" => {
                    kind = map.next_value::<LooseStr>()?.0;
                    self.state.list_kind.clone_from(&kind);
                }
                "items" => map.next_value_seed(ItemsSeed { state: self.state })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(kind)
    }
}

/// The `items` array: each element is captured as raw text and reduced at once.
struct ItemsSeed<'s, 'n> {
    state: &'s mut ReadState<'n>,
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of items")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(raw) = seq.next_element::<Box<RawValue>>()? {
            self.state.take_item(&raw);
        }
        Ok(())
    }
}

/// What can be made out of any item, however malformed: enough to name it, route it
/// by kind, and pin it to a Service.
#[derive(Debug, Default)]
struct ItemProbe {
    kind: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    /// None when `metadata.labels` could not be read.
    labels: Option<LabelProbe>,
}

/// The labels that matter for routing a broken item.
#[derive(Debug, Default)]
struct LabelProbe {
    service_name: LabelValue,
    opted_out: bool,
    zone: Option<String>,
}

#[derive(Debug, Default, PartialEq, Eq)]
enum LabelValue {
    #[default]
    Absent,
    Str(String),
    NotAString,
}

fn probe_item(raw: &str) -> ItemProbe {
    let mut de = serde_json::Deserializer::from_str(raw);
    de.deserialize_any(ItemProbeVisitor).unwrap_or_default()
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
struct LooseStr(Option<String>);

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
