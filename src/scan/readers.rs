//! Small readers of a fetched file's stream, shared by the reading path and the
//! snapshot writer.

use std::io::{self, BufRead, Read};

use crate::heart::input::Input;
use crate::sources::source::Source;

/// The largest sysctl, node name or health answer read.
const SMALL_FILE: u64 = 64 << 10;

/// Reads a small file whole (at most [`SMALL_FILE`] bytes), lossily as text.
pub(crate) fn read_small(r: &mut dyn BufRead) -> io::Result<String> {
    let mut bytes = Vec::new();
    r.take(SMALL_FILE).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Reads a stream whole.
pub(crate) fn read_all(r: &mut dyn BufRead) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    r.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The node's name as the source tells it (its `node` file); None when it tells none.
pub(crate) fn read_node_name<S: Source>(src: &S) -> Option<String> {
    let text = src.fetch_bytes(Input::Node, read_small).value?.ok()?;
    let name = text.trim();
    (!name.is_empty()).then(|| name.to_string())
}
