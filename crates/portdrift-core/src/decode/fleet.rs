//! An agent's `/findings` document (its scan report), as the fleet view reads it: the
//! findings, each read on its own (one this portdrift cannot read is named, and the
//! rest still count), and whether its coverage says the check was complete.
//!
//! Agents of other versions answer too, so the reading is tolerant: fields this build
//! does not know are passed over, and so is a field it knows holding something else
//! than it expects. Only an answer that is not JSON, or has no findings list, is no
//! answer.

use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::heart::views::fleet::{AgentReport, NoAnswer, read_finding};

/// An agent's answer to `GET /findings`.
pub fn agent_report(text: &str) -> Result<AgentReport, NoAnswer> {
    let answer: Answer = serde_json::from_str(text).map_err(|e| NoAnswer::NotJson(e.to_string()))?;
    let Answer::Document(Object(document)) = answer else {
        return Err(NoAnswer::NoFindingsList);
    };
    let Some(findings) = read(document.findings) else {
        return Err(NoAnswer::NoFindingsList);
    };
    let incomplete = read(document.coverage).and_then(|Object(c)| {
        if read(c.complete) != Some(false) {
            return None;
        }
        let first = read(c.not_checked).and_then(|n| n.into_iter().next().and_then(Lenient::into_option));
        Some(first.unwrap_or_else(|| "coverage.complete is false".to_string()))
    });
    Ok(AgentReport {
        findings: findings.into_iter().map(|ReadFinding(f)| f).collect(),
        incomplete,
    })
}

/// The whole answer: a document, or JSON of another shape.
#[derive(Deserialize)]
#[serde(untagged)]
enum Answer {
    Document(Object<Document>),
    Other(IgnoredAny),
}

/// The fields of the scan report the view reads.
#[derive(Deserialize)]
struct Document {
    #[serde(default)]
    findings: Option<Lenient<Vec<ReadFinding>>>,
    #[serde(default)]
    coverage: Option<Lenient<Object<Coverage>>>,
}

/// The fields of the report's `coverage` the view reads.
#[derive(Deserialize)]
struct Coverage {
    #[serde(default)]
    complete: Option<Lenient<bool>>,
    #[serde(default)]
    not_checked: Option<Lenient<Vec<Lenient<String>>>>,
}

/// One finding as [`read_finding`] reads it, from its JSON: what cannot be read in it
/// is said by the fields it spells.
struct ReadFinding(Result<crate::heart::finding::Finding, String>);

impl<'de> Deserialize<'de> for ReadFinding {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ReadFinding, D::Error> {
        let finding = Value::deserialize(deserializer)?;
        Ok(ReadFinding(read_finding(&finding)))
    }
}

/// A `T`, or whatever else the document holds in its place.
#[derive(Deserialize)]
#[serde(untagged)]
enum Lenient<T> {
    Read(T),
    Other(IgnoredAny),
}

impl<T> Lenient<T> {
    fn into_option(self) -> Option<T> {
        match self {
            Lenient::Read(value) => Some(value),
            Lenient::Other(_) => None,
        }
    }
}

/// An optional field's value when it is a `T`.
fn read<T>(field: Option<Lenient<T>>) -> Option<T> {
    field.and_then(Lenient::into_option)
}

/// A `T` read from a JSON object only (serde's derive would read an array too, by
/// position).
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Object<T>, D::Error> {
        struct Fields<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Fields<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Object)
            }
        }
        deserializer.deserialize_map(Fields(PhantomData))
    }
}

#[cfg(test)]
mod tests;
