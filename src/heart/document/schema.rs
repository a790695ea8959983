//! The JSON Schema (draft 2020-12) of a document, generated from the types that write
//! it, so the schema cannot drift from the JSON: `docs/schema/` holds them, and the
//! tests validate what the tool writes against them with `check-jsonschema`.

use schemars::generate::SchemaSettings;
use schemars::transform::RecursiveTransform;
use schemars::{JsonSchema, Schema};
use serde::Serialize;
use serde_json::{Value, json};

use super::{API_VERSION, Document, DocumentKind};
use crate::heart::outcome::ScanReport;

/// `scan --format json` and the agent's `/findings`: docs/schema/scan-report.json.
pub fn scan_report_schema() -> Value {
    document_schema::<ScanReport>(DocumentKind::ScanReport, "scan-report")
}

/// The schema of a document of `kind` whose body is a `T`.
fn document_schema<T: Serialize + JsonSchema + 'static>(kind: DocumentKind, file: &str) -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with_transform(RecursiveTransform(every_key_required))
        .into_generator();
    let schema = generator.into_root_schema_for::<Document<'static, T>>();
    let mut schema = schema.to_value();
    let kind_name = serde_json::to_value(kind).unwrap_or(Value::Null);
    schema["$id"] = json!(format!("https://portdrift.io/schema/v1/{file}.json"));
    schema["title"] = json!(format!(
        "{API_VERSION} {}",
        kind_name.as_str().unwrap_or_default()
    ));
    let properties = &mut schema["properties"];
    properties["apiVersion"] = json!({"const": API_VERSION});
    properties["kind"] = json!({"const": kind_name});
    properties["generated_at"] = json!({"type": "string", "format": "date-time"});
    schema
}

/// The contract writes every key, `null` (or `[]`) when it does not apply: a schema
/// that let a key go missing would pass JSON that breaks scripts reading it.
fn every_key_required(schema: &mut Schema) {
    let keys: Option<Vec<Value>> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| properties.keys().cloned().map(Value::String).collect());
    if let Some(keys) = keys {
        schema.insert("required".into(), Value::Array(keys));
    }
}
