//! Validating what the tool writes against its checked-in JSON Schemas
//! (`docs/schema/`) with the real `check-jsonschema` (scripts/test.sh installs it).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `docs/schema/<name>.json`.
pub fn schema_file(name: &str) -> PathBuf {
    super::root().join("docs/schema").join(format!("{name}.json"))
}

/// Runs `check-jsonschema` on `documents` against schema `name`: Ok, or what it said.
/// None when the tool is missing outside CI (with `CI` set that fails the test).
pub fn check(name: &str, documents: &[&Path]) -> Option<Result<(), String>> {
    if !super::require_tool("check-jsonschema", "validating JSON against docs/schema") {
        return None;
    }
    let out = Command::new("check-jsonschema")
        .arg("--schemafile")
        .arg(schema_file(name))
        .args(documents)
        .output()
        .expect("check-jsonschema runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(if out.status.success() { Ok(()) } else { Err(said) })
}
