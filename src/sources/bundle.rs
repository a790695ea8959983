//! A bundle directory as a [`Source`] ([`BundleDir`]): the files a snapshot captured, or
//! that people put together by hand, each read as the [`Input`] its name is; with
//! `snapshot.json`, the record of how the capture of each went.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::heart::input::Input;
use crate::heart::outcome::{InputState, InputStatus};
use crate::sources::source::{Fetched, Read, RuleAnswer, Source};

/// A reader that counts what passes through it.
pub(crate) struct Counting<R> {
    pub inner: R,
    pub count: u64,
}

impl<R: io::Read> io::Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counting<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        self.count += amt as u64;
        self.inner.consume(amt);
    }
}

/// Files are read through this cap too: nothing in a bundle is legitimately larger.
pub const MAX_FILE: u64 = 256 << 20;

/// Reads a file into `consume`. Not present when it does not exist; `ok` or `empty`
/// (zero bytes) when read; `error` when it cannot be opened.
pub fn fetch_file<T, F>(path: &Path, consume: F) -> Fetched<T>
where
    F: FnOnce(&mut dyn BufRead) -> io::Result<T>,
{
    let start = std::time::Instant::now();
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Fetched::not_present(),
        Err(e) => {
            return Fetched {
                state: Some(InputState::Error),
                value: Some(Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())))),
                ..Fetched::not_present()
            };
        }
    };
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Fetched::with_state(InputState::Error, format!("{} is a directory", path.display()));
    }
    let mut reader = Counting {
        inner: BufReader::with_capacity(64 << 10, file.take(MAX_FILE)),
        count: 0,
    };
    let value = consume(&mut reader);
    let state = if value.is_err() {
        InputState::Error
    } else if reader.count == 0 {
        InputState::Empty
    } else {
        InputState::Ok
    };
    Fetched {
        state: Some(state),
        value: Some(value),
        notes: Vec::new(),
        bytes: Some(reader.count),
        elapsed: Some(start.elapsed()),
    }
}

// ------------------------------------------------------------------ the manifest

/// `snapshot.json`: how the capture of each source went, so that a bundle records what
/// could not be read (an absent tool, one that failed or hung) and a scan of the bundle
/// reports it as the live scan did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Manifest {
    /// Format version of this file.
    pub version: u32,
    /// The portdrift that wrote it.
    pub portdrift: String,
    /// When the capture started (RFC 3339, UTC).
    #[schemars(extend("format" = "date-time"))]
    pub captured_at: String,
    /// Written as the envelope's `node` ([`crate::heart::document::Document`]), and read
    /// back from it.
    #[serde(skip_serializing)]
    pub node: Option<String>,
    pub sources: Vec<ManifestEntry>,
}

/// How the capture of one bundle file went. Every key is written (null or `[]` when it
/// does not apply, as the JSON contract says); the defaults read older manifests that
/// left them out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ManifestEntry {
    /// The bundle file name (`iptables-nft-save.txt`).
    // Text, not an `Input`: a manifest may list a file this version does not read,
    // which is left alone.
    pub source: String,
    /// What it was read from (`iptables-nft-save`, `/proc/net/tcp`).
    #[serde(default)]
    pub origin: Option<String>,
    pub status: InputState,
    /// Whether the file is in the bundle.
    #[serde(default)]
    pub file: bool,
    /// How much the source gave, when it was read.
    #[serde(default)]
    pub bytes: Option<u64>,
    /// How long reading it took, when it was read.
    #[serde(default)]
    pub duration_ms: Option<u64>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The largest `snapshot.json` read.
const MAX_MANIFEST: u64 = 4 << 20;

// ------------------------------------------------------------------ a bundle directory

/// A bundle directory as a [`Source`]. When it holds a `snapshot.json`, the recorded
/// outcome of each capture is applied: a dump whose tool failed or timed out is read
/// but not trusted, and a file that could not be captured is reported as the capture
/// saw it.
#[derive(Debug, Clone)]
pub struct BundleDir {
    dir: PathBuf,
    manifest: Option<Manifest>,
    manifest_problem: Option<String>,
    cluster_state: Option<PathBuf>,
}

impl BundleDir {
    /// Opens `dir`. `cluster_state` replaces the bundle's `cluster.json`.
    pub fn new(dir: &Path, cluster_state: Option<PathBuf>) -> BundleDir {
        let (manifest, manifest_problem) = match read_manifest(&dir.join(Input::Manifest.name())) {
            Ok(m) => (m, None),
            Err(e) => (None, Some(e)),
        };
        BundleDir {
            dir: dir.to_path_buf(),
            manifest,
            manifest_problem,
            cluster_state,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    fn recorded(&self, input: Input) -> Option<&ManifestEntry> {
        let name = input.file_name()?;
        self.manifest.as_ref()?.sources.iter().find(|e| e.source == name)
    }
}

fn read_manifest(path: &Path) -> Result<Option<Manifest>, String> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let mut bytes = Vec::new();
    file.take(MAX_MANIFEST)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| format!("not a portdrift snapshot manifest: {e}"))
}

impl BundleDir {
    /// `input`'s file, with the capture's record of it applied.
    fn read_file<T, F>(&self, input: Input, consume: F) -> Fetched<T>
    where
        F: FnOnce(&mut dyn BufRead) -> io::Result<T>,
    {
        if input == Input::ClusterState
            && let Some(path) = &self.cluster_state
        {
            return fetch_required(path, consume);
        }
        let Some(name) = input.file_name() else {
            return Fetched::not_present();
        };
        let mut fetched = fetch_file(&self.dir.join(name), consume);
        let Some(rec) = self.recorded(input) else {
            return fetched;
        };
        let manifest = Input::Manifest;
        match fetched.state {
            // Not in the bundle: report what the capture saw.
            None => {
                fetched.state = Some(rec.status);
                fetched.notes = rec.notes.clone();
                if rec.file {
                    fetched.state = Some(InputState::Error);
                    fetched.notes.push(format!(
                        "{manifest} lists {name} as captured, but the file is missing"
                    ));
                }
            }
            Some(InputState::Error) => {}
            Some(read) => {
                fetched.notes = rec.notes.clone();
                fetched.state = Some(match rec.status {
                    // The file's own reading decides (ok or empty).
                    InputState::Ok | InputState::Partial => read,
                    // Captured from a tool that failed, hung or printed too much: the
                    // content is what it printed, and it is not trusted.
                    s @ (InputState::Failed | InputState::TimedOut | InputState::TooLarge) => s,
                    InputState::Error => InputState::Error,
                    InputState::Absent | InputState::Empty => {
                        fetched.notes.push(format!(
                            "{manifest} says the capture found it {}, but the file is present; reading the file",
                            rec.status
                        ));
                        read
                    }
                });
            }
        }
        fetched
    }
}

/// A bundle holds text: every input is its file's bytes, never rules read otherwise.
impl Source for BundleDir {
    fn fetch<T, R, F>(&self, input: Input, consume: F) -> Fetched<Read<T, R>>
    where
        T: Send + 'static,
        R: RuleAnswer,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
    {
        self.read_file(input, consume).map(Read::Bytes)
    }

    fn own_statuses(&self) -> Vec<InputStatus> {
        match &self.manifest_problem {
            Some(p) => {
                let mut s = InputStatus::new(Input::Manifest, InputState::Error);
                s.notes.push(format!("ignored: {p}"));
                vec![s]
            }
            None => Vec::new(),
        }
    }
}

/// A file that must be there (a cluster state named on the command line).
pub fn fetch_required<T, F>(path: &Path, consume: F) -> Fetched<T>
where
    F: FnOnce(&mut dyn BufRead) -> io::Result<T>,
{
    let fetched = fetch_file(path, consume);
    if fetched.state.is_none() {
        return Fetched {
            state: Some(InputState::Error),
            value: Some(Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such file", path.display()),
            ))),
            ..Fetched::not_present()
        };
    }
    fetched
}
