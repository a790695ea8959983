//! `portdrift snapshot`: captures a [`Source`] (the live node) into a bundle directory.
//!
//! Each dump is streamed into its file while the tool prints it, exactly as printed.
//! A backend that printed nothing (no tables) leaves no file; `snapshot.json` records
//! for every source whether it was read, empty, absent, failed, timed out or too large,
//! so that the bundle says what could not be read and a scan of it reports the same.

use crate::heart::document::{Document, DocumentKind};
use std::fs::{self, File};
use std::io::{self, BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::heart::input::Input;
use crate::heart::outcome::InputState;
use crate::scan::bundle_error::SnapshotError;
use crate::scan::readers::read_node_name;
use crate::sources::bundle::{Manifest, ManifestEntry};
use crate::sources::source::Source;

/// What `snapshot` was asked for.
#[derive(Debug, Clone, Default)]
pub struct SnapshotOptions {
    /// The node's name for the `node` file (default: what the source says, the hostname).
    pub node: Option<String>,
    /// Replace the bundle files of a non-empty directory.
    pub force: bool,
}

/// The manifest's format version.
const MANIFEST_VERSION: u32 = 1;

/// Every file a bundle may hold: with `--force` these are removed first, so no file of
/// an older capture survives into the new one (an old `nft.txt` would be read in place
/// of a missing `nft.json`).
fn bundle_files() -> impl Iterator<Item = &'static str> {
    Input::all().filter_map(Input::file_name)
}

/// What a snapshot captures from its source, in the order its manifest lists them:
/// not `nft.txt`, `ipvsadm.txt` or the header-only dumps, forms of what people paste.
fn captured() -> impl Iterator<Item = Input> {
    Input::IPTABLES[..4]
        .iter()
        .copied()
        .chain([Input::NftJson, Input::NftRuleset])
        .chain(Input::SOCKETS)
        .chain(Input::NODE_FACTS)
        .chain(Input::cilium_maps())
        .chain([Input::ClusterState])
}

/// What one capture wrote.
#[derive(Debug)]
struct Teed {
    bytes: u64,
    /// The marker of a table was seen (for [`Input::NftJson`]).
    found: bool,
    /// Reading the source stopped with this error (the size limit, a broken pipe).
    read_error: Option<String>,
}

/// Finds a needle in a stream of chunks, across chunk boundaries.
struct Finder {
    needle: &'static [u8],
    carry: Vec<u8>,
    found: bool,
}

impl Finder {
    fn feed(&mut self, chunk: &[u8]) {
        if self.found || self.needle.is_empty() {
            self.found = true;
            return;
        }
        let keep = self.needle.len() - 1;
        let mut joined = std::mem::take(&mut self.carry);
        joined.extend_from_slice(&chunk[..chunk.len().min(keep)]);
        if memchr::memmem::find(&joined, self.needle).is_some()
            || memchr::memmem::find(chunk, self.needle).is_some()
        {
            self.found = true;
            return;
        }
        if chunk.len() >= keep {
            self.carry = chunk[chunk.len() - keep..].to_vec();
        } else {
            // The chunk is shorter than the needle: `joined` is the old carry + chunk.
            let cut = joined.len().saturating_sub(keep);
            self.carry = joined.split_off(cut);
        }
    }
}

/// Marks an error of writing the bundle (as opposed to reading the source).
#[derive(Debug)]
struct WriteFailed(io::Error);

impl std::fmt::Display for WriteFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for WriteFailed {}

fn written<T>(r: io::Result<T>) -> io::Result<T> {
    r.map_err(|e| io::Error::new(e.kind(), WriteFailed(e)))
}

/// Copies the stream into `path`. Write errors fail; read errors end the copy and are
/// returned in the result, beside what was read until then.
fn tee(r: &mut dyn BufRead, path: &Path, needle: Option<&'static [u8]>) -> io::Result<Teed> {
    let mut out = BufWriter::with_capacity(256 << 10, written(File::create(path))?);
    let mut finder = needle.map(|needle| Finder {
        needle,
        carry: Vec::new(),
        found: false,
    });
    let mut bytes = 0u64;
    let mut read_error = None;
    loop {
        let chunk = match r.fill_buf() {
            Ok([]) => break,
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                read_error = Some(e.to_string());
                break;
            }
        };
        written(out.write_all(chunk))?;
        if let Some(f) = &mut finder {
            f.feed(chunk);
        }
        let n = chunk.len();
        bytes += n as u64;
        r.consume(n);
    }
    written(out.flush())?;
    written(out.into_inner().map_err(|e| e.into_error()))?;
    Ok(Teed {
        bytes,
        found: finder.is_none_or(|f| f.found),
        read_error,
    })
}

fn write_error(path: &Path) -> impl FnOnce(io::Error) -> SnapshotError + '_ {
    move |source| SnapshotError::Write {
        path: path.to_path_buf(),
        source,
    }
}

fn prepare(out: &Path, force: bool) -> Result<(), SnapshotError> {
    match fs::read_dir(out) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                if !force {
                    return Err(SnapshotError::NotEmpty(out.to_path_buf()));
                }
                for name in bundle_files() {
                    let path = out.join(name);
                    match fs::remove_file(&path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(write_error(&path)(e)),
                    }
                }
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir_all(out).map_err(write_error(out)),
        Err(_) if out.exists() && !out.is_dir() => Err(SnapshotError::NotADirectory(out.to_path_buf())),
        Err(e) => Err(write_error(out)(e)),
    }
}

/// Captures `src` into the bundle directory `out` and returns the manifest written
/// there. Fails only when `out` cannot be used or written; a source that cannot be
/// read is an entry of the manifest.
pub fn write_snapshot<S: Source>(
    src: &S,
    out: &Path,
    opts: &SnapshotOptions,
) -> Result<Manifest, SnapshotError> {
    prepare(out, opts.force)?;
    let mut manifest = Manifest {
        version: MANIFEST_VERSION,
        portdrift: env!("CARGO_PKG_VERSION").to_string(),
        captured_at: jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
            .map(|t| t.to_string())
            .unwrap_or_default(),
        node: None,
        sources: Vec::new(),
    };
    for input in captured() {
        if let Some(entry) = capture(src, out, input)? {
            manifest.sources.push(entry);
        }
    }

    let node = opts.node.clone().or_else(|| read_node_name(src));
    if let Some(node) = &node {
        let path = out.join(Input::Node.name());
        fs::write(&path, format!("{node}\n")).map_err(write_error(&path))?;
    }
    manifest.node = node;

    let path = out.join(Input::Manifest.name());
    let document = Document::new(
        DocumentKind::Snapshot,
        manifest.node.as_deref(),
        jiff::Timestamp::now(),
        &manifest,
    );
    let mut text = serde_json::to_string_pretty(&document).map_err(|e| write_error(&path)(e.into()))?;
    text.push('\n');
    fs::write(&path, text).map_err(write_error(&path))?;
    Ok(manifest)
}

/// Captures one bundle file. None when the source has nothing to say about it (or it
/// is nothing a bundle holds).
fn capture<S: Source>(src: &S, out: &Path, input: Input) -> Result<Option<ManifestEntry>, SnapshotError> {
    let Some(name) = input.file_name() else {
        return Ok(None);
    };
    let dest = out.join(name);
    let parent = dest.parent().unwrap_or(out).to_path_buf();
    fs::create_dir_all(&parent).map_err(write_error(&parent))?;
    let tmp: PathBuf = parent.join(format!(
        ".{}.partial",
        dest.file_name().unwrap_or_default().to_string_lossy()
    ));
    let needle: Option<&'static [u8]> = (input == Input::NftJson).then_some(br#"{"table":"#);
    let tmp_for_consumer = tmp.clone();
    let fetched = src.fetch_bytes(input, move |r| tee(r, &tmp_for_consumer, needle));
    let Some(mut state) = fetched.state else {
        let _ = fs::remove_file(&tmp);
        return Ok(None);
    };
    let mut notes = fetched.notes;
    let teed = match fetched.value {
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            let _ = fs::remove_file(&tmp);
            if e.get_ref().is_some_and(|inner| inner.is::<WriteFailed>()) {
                return Err(write_error(&dest)(e));
            }
            // The source could not be opened or read.
            state = InputState::Error;
            notes.push(e.to_string());
            None
        }
        None => None,
    };
    let mut keep = false;
    if let Some(t) = &teed {
        if let Some(e) = &t.read_error
            && state != InputState::TooLarge
        {
            notes.push(format!("reading stopped: {e}"));
            if state == InputState::Ok {
                state = InputState::Error;
            }
        }
        if state == InputState::Ok && !t.found {
            // `nft -j list ruleset` on a node without any table.
            state = InputState::Empty;
        }
        keep = t.bytes > 0 && !matches!(state, InputState::Empty | InputState::Absent);
    }
    if keep {
        fs::rename(&tmp, &dest).map_err(write_error(&dest))?;
    } else {
        let _ = fs::remove_file(&tmp);
    }
    let label = src.label(input);
    Ok(Some(ManifestEntry {
        source: name.to_string(),
        origin: (label != name).then_some(label),
        status: state,
        file: keep,
        bytes: fetched.bytes,
        duration_ms: fetched.elapsed.map(|d| d.as_millis() as u64),
        notes,
    }))
}

#[cfg(test)]
mod tests;
