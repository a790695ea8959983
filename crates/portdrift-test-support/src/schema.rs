//! Validating what the tool writes against its checked-in JSON Schemas
//! (`docs/schema/`) with the real `check-jsonschema` (scripts/test.sh installs it into
//! the checkout's `.venv`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `docs/schema/<name>.json`.
pub fn schema_file(name: &str) -> PathBuf {
    crate::root().join("docs/schema").join(format!("{name}.json"))
}

/// `check-jsonschema`: the checkout's `.venv` one, else the one on `PATH`. None when
/// there is neither outside CI (with `CI` set that fails the test).
fn tool() -> Option<PathBuf> {
    let venv = crate::root().join(".venv/bin/check-jsonschema");
    if venv.is_file() {
        return Some(venv);
    }
    crate::requirements::require_tool("check-jsonschema", "validating JSON against docs/schema")
        .then(|| PathBuf::from("check-jsonschema"))
}

/// Runs `check-jsonschema` on `documents` against schema `name`, all in one run: Ok,
/// or what it said (each error line starts with its document's path). None when the
/// tool is missing outside CI.
pub fn check(name: &str, documents: &[&Path]) -> Option<Result<(), String>> {
    assert!(!documents.is_empty(), "no document to check against {name}");
    let out = Command::new(tool()?)
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
