//! The files `portdrift lint` reads: files, directories (their `.yaml`, `.yml` and
//! `.json` files, recursively, in name order) and `-` (standard input, as `helm
//! template … | portdrift lint -` sends it).

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::decode::manifests::services_in;
use crate::heart::views::manifest::{ManifestProblem, ManifestService};

/// Why the inputs could not be read at all (as opposed to a file that is not YAML,
/// which is a lint error with its line).
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {source}", path.display())]
pub struct InputError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Every Service in `paths`, and what could not be read of them.
pub fn read_manifests(paths: &[PathBuf]) -> Result<(Vec<ManifestService>, Vec<ManifestProblem>), InputError> {
    let mut services = Vec::new();
    let mut problems = Vec::new();
    for path in paths {
        for (name, bytes) in read_input(path)? {
            match String::from_utf8(bytes) {
                Ok(text) => {
                    let (s, p) = services_in(&name, &text);
                    services.extend(s);
                    problems.extend(p);
                }
                Err(e) => problems.push(ManifestProblem {
                    line: line_at(e.as_bytes(), e.utf8_error().valid_up_to()),
                    file: name,
                    message: "not UTF-8 text (YAML must be)".to_string(),
                }),
            }
        }
    }
    Ok((services, problems))
}

/// The 1-based line of byte `offset`.
fn line_at(bytes: &[u8], offset: usize) -> usize {
    1 + bytes[..offset.min(bytes.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// `(name for messages, contents)` of one command-line argument.
fn read_input(path: &Path) -> Result<Vec<(String, Vec<u8>)>, InputError> {
    let error = |p: &Path| {
        let path = p.to_path_buf();
        move |source| InputError { path, source }
    };
    if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes).map_err(error(path))?;
        return Ok(vec![("<stdin>".to_string(), bytes)]);
    }
    if !path.is_dir() {
        let bytes = std::fs::read(path).map_err(error(path))?;
        return Ok(vec![(path.display().to_string(), bytes)]);
    }
    let mut files = Vec::new();
    manifest_files(path, &mut files).map_err(error(path))?;
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let bytes = std::fs::read(&file).map_err(error(&file))?;
            Ok((file.display().to_string(), bytes))
        })
        .collect()
}

/// The manifest files under `dir`, recursively.
fn manifest_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            manifest_files(&path, out)?;
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
