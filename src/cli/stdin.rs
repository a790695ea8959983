//! `-` names standard input wherever a command reads a file.
//!
//! The commands read their inputs more than once (`scan --repair` reads the cluster
//! state in each of its two scans, the agent reads its files again when they change,
//! a snapshot copies the cluster state), and standard input can be read only once: so
//! it is read whole into a private file that lives as long as the command.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Standard input, kept in a private directory removed when this is dropped.
pub struct StdinSpool {
    _dir: tempfile::TempDir,
}

/// Replaces each `-` among `inputs` (flag name, path) with a file holding standard
/// input. Standard input can feed one of them only: two are an error naming both.
pub fn spool_stdin(inputs: Vec<(&'static str, &mut PathBuf)>) -> anyhow::Result<Option<StdinSpool>> {
    let dashes: Vec<(&'static str, &mut PathBuf)> = inputs
        .into_iter()
        .filter(|(_, p)| p.as_path() == Path::new("-"))
        .collect();
    match dashes.as_slice() {
        [] => return Ok(None),
        [_] => {}
        [(a, _), (b, _), ..] => {
            anyhow::bail!("{a} and {b} both read standard input (-), which can be read once")
        }
    }
    let dir = tempfile::Builder::new()
        .prefix("portdrift-stdin")
        .tempdir()
        .context("cannot make a directory to hold standard input")?;
    let file = dir.path().join("stdin");
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut bytes)
        .context("cannot read standard input")?;
    std::fs::write(&file, bytes)
        .with_context(|| format!("cannot keep standard input in {}", file.display()))?;
    for (_, path) in dashes {
        *path = file.clone();
    }
    Ok(Some(StdinSpool { _dir: dir }))
}
