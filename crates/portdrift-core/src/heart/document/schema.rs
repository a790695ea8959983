//! The JSON Schema (draft 2020-12) of each document, generated from the types that
//! write it, so that the schema cannot drift from the JSON: `docs/schema/` holds them
//! (`portdrift dev schema`), and the tests validate what the tool writes against them
//! with `check-jsonschema`.

use schemars::generate::SchemaSettings;
use schemars::transform::RecursiveTransform;
use schemars::{JsonSchema, Schema};
use serde::Serialize;
use serde_json::{Value, json};

use super::{API_VERSION, Document, DocumentKind};

/// The file under `docs/schema/` that holds the schema of `kind`'s documents.
pub fn file_name(kind: DocumentKind) -> &'static str {
    match kind {
        DocumentKind::ScanReport => "scan-report.json",
        DocumentKind::FleetView => "fleet-view.json",
        DocumentKind::PortAllocation => "port-allocation.json",
        DocumentKind::LintReport => "lint-report.json",
        DocumentKind::Snapshot => "snapshot.json",
        DocumentKind::Explanation => "explanation.json",
    }
}

/// The schema of a document of `kind` whose body is a `T`: the envelope's fields and
/// the body's, as serde writes them. A key is required unless serde may leave it out,
/// and the contract says none does, so every key comes out required.
pub fn document_schema<T: Serialize + JsonSchema + 'static>(kind: DocumentKind) -> Value {
    let settings = || {
        SchemaSettings::draft2020_12()
            .for_serialize()
            .with_transform(RecursiveTransform(closed_enumeration))
    };
    let body = settings().into_generator().into_root_schema_for::<T>();
    let mut schema = settings()
        .into_generator()
        .into_root_schema_for::<Document<'static, T>>()
        .to_value();
    let kind_name = serde_json::to_value(kind).unwrap_or(Value::Null);
    let stem = file_name(kind).trim_end_matches(".json");
    schema["$id"] = json!(format!("https://portdrift.io/schema/v1/{stem}.json"));
    schema["title"] = json!(format!(
        "{API_VERSION} {}",
        kind_name.as_str().unwrap_or_default()
    ));
    // The body's description says what the document holds; the envelope's is the same
    // for every kind.
    match body.get("description") {
        Some(description) => schema["description"] = description.clone(),
        None => {
            if let Some(object) = schema.as_object_mut() {
                object.remove("description");
            }
        }
    }
    let properties = &mut schema["properties"];
    properties["apiVersion"] =
        json!({"description": "The contract the document follows.", "const": API_VERSION});
    properties["kind"] = json!({"description": "What the document is.", "const": kind_name});
    properties["generated_at"] = json!({
        "description": "When the document was written (RFC 3339, UTC).",
        "type": "string",
        "format": "date-time"
    });
    properties["portdrift_version"] =
        json!({"description": "The portdrift that wrote it.", "type": "string"});
    // `kind` is a const of its own now: the enumeration of every kind is not used.
    if let Some(defs) = schema.get_mut("$defs").and_then(Value::as_object_mut) {
        defs.remove("DocumentKind");
    }
    schema
}

/// An enumeration as one `enum` of its spellings, with each documented value's meaning
/// in the description: schemars writes a `oneOf` of `const`s once some variant has a doc
/// comment, which validates the same but hides the list a reader looks for.
fn closed_enumeration(schema: &mut Schema) {
    let Some(variants) = schema.get("oneOf").and_then(Value::as_array) else {
        return;
    };
    let mut values = Vec::new();
    let mut meanings = Vec::new();
    for variant in variants {
        let Some(object) = variant.as_object() else { return };
        let plain = object.get("type") == Some(&json!("string"))
            && object
                .keys()
                .all(|k| matches!(k.as_str(), "type" | "const" | "enum" | "description"));
        if !plain {
            return;
        }
        let these = match (object.get("const"), object.get("enum")) {
            (Some(one), None) => vec![one.clone()],
            (None, Some(Value::Array(many))) => many.clone(),
            _ => return,
        };
        if let Some(meaning) = object.get("description").and_then(Value::as_str) {
            for value in &these {
                let value = value.as_str().unwrap_or_default();
                meanings.push(format!("- `{value}`: {}", meaning.replace('\n', " ")));
            }
        }
        values.extend(these);
    }
    schema.remove("oneOf");
    schema.insert("type".into(), json!("string"));
    schema.insert("enum".into(), Value::Array(values));
    if !meanings.is_empty() {
        let intro = schema
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let description = format!("{intro}\n\n{}", meanings.join("\n"));
        schema.insert("description".into(), json!(description.trim_start()));
    }
}
