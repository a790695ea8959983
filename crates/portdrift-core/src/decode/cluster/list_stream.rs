//! Walks a JSON `List` document from a reader without holding it: the top-level
//! object is scanned here, and each element of its `items` array is cut out whole
//! (by bracket depth, strings skipped) and handed on as bytes, for serde_json to parse
//! from a slice. serde_json's own reader-based parser goes byte by byte through the
//! `Read` trait, which is much slower on a large file.
//!
//! The scanner only finds where values end; serde_json checks every value's syntax.

use std::io::Read;

use serde::de::IgnoredAny;

use crate::decode::cluster::error::{ClusterFileError, Position, syntax_error};
use crate::decode::cluster::probe::LooseStr;

/// What the walk finds, in document order.
pub(crate) enum ListEvent<'a> {
    /// The List's `kind` (None when it is not a string).
    Kind(Option<String>),
    /// One element of `items`, as its JSON text, and where it starts.
    Item(&'a [u8], Position),
}

/// Walks the top-level object read from `reader`, reporting its `kind` and each of
/// its `items` to `on_event`. Returns the kind.
pub(crate) fn walk_list<R: Read>(
    reader: R,
    mut on_event: impl FnMut(ListEvent<'_>) -> Result<(), ClusterFileError>,
) -> Result<Option<String>, ClusterFileError> {
    let mut scanner = Scanner::new(reader);
    scanner.skip_bom()?;
    scanner.skip_whitespace()?;
    match scanner.peek()? {
        Some(b'{') => scanner.advance(1),
        None => return Err(scanner.truncated()),
        Some(b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n') => {
            return Err(ClusterFileError::NotAList {
                found: "the document is not a JSON object".to_string(),
            });
        }
        Some(_) => return Err(scanner.syntax("expected a JSON object")),
    }
    let mut kind = None;
    let mut value = Vec::new();
    scanner.skip_whitespace()?;
    if scanner.peek()? == Some(b'}') {
        scanner.advance(1);
    } else {
        loop {
            let key = scanner.key()?;
            match key.as_str() {
                "items" => scanner.items(&mut value, &mut on_event)?,
                "kind" => {
                    let at = scanner.capture_value(&mut value)?;
                    kind = parse_slice::<LooseStr>(&value, at)?.0;
                    on_event(ListEvent::Kind(kind.clone()))?;
                }
                _ => {
                    let at = scanner.capture_value(&mut value)?;
                    parse_slice::<IgnoredAny>(&value, at)?;
                }
            }
            scanner.skip_whitespace()?;
            match scanner.peek()? {
                Some(b',') => scanner.advance(1),
                Some(b'}') => {
                    scanner.advance(1);
                    break;
                }
                None => return Err(scanner.truncated()),
                Some(_) => return Err(scanner.syntax("expected `,` or `}`")),
            }
        }
    }
    scanner.skip_whitespace()?;
    if scanner.peek()?.is_some() {
        return Err(scanner.syntax("trailing characters"));
    }
    Ok(kind)
}

/// Parses one value cut out of the document (starting at `at`), turning a syntax
/// error into one that points into the document.
pub(crate) fn parse_slice<'a, T: serde::Deserialize<'a>>(
    bytes: &'a [u8],
    at: Position,
) -> Result<T, ClusterFileError> {
    serde_json::from_slice(bytes).map_err(|e| syntax_error(&e, at))
}

const BUFFER: usize = 64 * 1024;

/// A buffered byte reader that knows its line and column.
struct Scanner<R> {
    reader: R,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    line: u64,
    column: u64,
}

impl<R: Read> Scanner<R> {
    fn new(reader: R) -> Self {
        Scanner {
            reader,
            buf: vec![0; BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
            line: 1,
            column: 1,
        }
    }

    fn position(&self) -> Position {
        Position {
            line: self.line,
            column: self.column,
        }
    }

    fn truncated(&self) -> ClusterFileError {
        ClusterFileError::Truncated {
            line: self.line,
            column: self.column,
        }
    }

    fn syntax(&self, message: &str) -> ClusterFileError {
        ClusterFileError::Syntax {
            line: self.line,
            column: self.column,
            message: message.to_string(),
        }
    }

    /// The buffered bytes not yet consumed, reading more when none are left; empty
    /// at the end of the input.
    fn fill(&mut self) -> Result<&[u8], ClusterFileError> {
        if self.start == self.end {
            self.start = 0;
            self.end = loop {
                match self.reader.read(&mut self.buf) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(ClusterFileError::Io(e)),
                }
            };
        }
        Ok(&self.buf[self.start..self.end])
    }

    fn peek(&mut self) -> Result<Option<u8>, ClusterFileError> {
        Ok(self.fill()?.first().copied())
    }

    /// Consumes `n` buffered bytes, keeping line and column.
    fn advance(&mut self, n: usize) {
        let consumed = &self.buf[self.start..self.start + n];
        let newlines = consumed.iter().filter(|&&b| b == b'\n').count() as u64;
        match consumed.iter().rposition(|&b| b == b'\n') {
            Some(last) => {
                self.line += newlines;
                self.column = (n - last) as u64;
            }
            None => self.column += n as u64,
        }
        self.start += n;
    }

    fn skip_bom(&mut self) -> Result<(), ClusterFileError> {
        // Fewer than three bytes buffered only happens at the very end of the input.
        if self.fill()?.starts_with(&[0xEF, 0xBB, 0xBF]) {
            self.start += 3;
        }
        Ok(())
    }

    fn skip_whitespace(&mut self) -> Result<(), ClusterFileError> {
        loop {
            let chunk = self.fill()?;
            if chunk.is_empty() {
                return Ok(());
            }
            let first_other = chunk
                .iter()
                .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
            let skip = first_other.unwrap_or(chunk.len());
            self.advance(skip);
            if first_other.is_some() {
                return Ok(());
            }
        }
    }

    /// Reads an object key and the `:` after it.
    fn key(&mut self) -> Result<String, ClusterFileError> {
        self.skip_whitespace()?;
        match self.peek()? {
            Some(b'"') => {}
            None => return Err(self.truncated()),
            Some(_) => return Err(self.syntax("expected an object key")),
        }
        let mut raw = Vec::new();
        let at = self.capture_value(&mut raw)?;
        let key = parse_slice::<String>(&raw, at)?;
        self.skip_whitespace()?;
        match self.peek()? {
            Some(b':') => self.advance(1),
            None => return Err(self.truncated()),
            Some(_) => return Err(self.syntax("expected `:`")),
        }
        self.skip_whitespace()?;
        Ok(key)
    }

    /// The `items` value: an array (each element handed to `on_event`) or null.
    fn items(
        &mut self,
        value: &mut Vec<u8>,
        on_event: &mut impl FnMut(ListEvent<'_>) -> Result<(), ClusterFileError>,
    ) -> Result<(), ClusterFileError> {
        match self.peek()? {
            Some(b'[') => self.advance(1),
            Some(b'n') => {
                let at = self.capture_value(value)?;
                return parse_slice::<()>(value, at);
            }
            None => return Err(self.truncated()),
            Some(_) => {
                return Err(ClusterFileError::NotAList {
                    found: "its items are not an array".to_string(),
                });
            }
        }
        self.skip_whitespace()?;
        if self.peek()? == Some(b']') {
            self.advance(1);
            return Ok(());
        }
        loop {
            self.skip_whitespace()?;
            let at = self.capture_value(value)?;
            on_event(ListEvent::Item(value, at))?;
            self.skip_whitespace()?;
            match self.peek()? {
                Some(b',') => self.advance(1),
                Some(b']') => {
                    self.advance(1);
                    return Ok(());
                }
                None => return Err(self.truncated()),
                Some(_) => return Err(self.syntax("expected `,` or `]`")),
            }
        }
    }

    /// Copies the JSON value that starts here into `out` (replacing its contents) and
    /// returns where it started. Only its extent is found here; its syntax is
    /// checked by whoever parses it.
    fn capture_value(&mut self, out: &mut Vec<u8>) -> Result<Position, ClusterFileError> {
        out.clear();
        let at = self.position();
        let mut cut = ValueCut::default();
        loop {
            let chunk = self.fill()?;
            if chunk.is_empty() {
                // A bare scalar may end with the input; anything else is cut short.
                return if cut.is_scalar_in_progress() && !out.is_empty() {
                    Ok(at)
                } else {
                    Err(self.truncated())
                };
            }
            let end = cut.find_end(chunk);
            let take = end.unwrap_or(chunk.len());
            out.extend_from_slice(&chunk[..take]);
            self.advance(take);
            if end.is_some() {
                return Ok(at);
            }
        }
    }
}

/// The bytes that matter inside a container: quotes and brackets.
const STRUCTURAL: [bool; 256] = {
    let mut table = [false; 256];
    table[b'"' as usize] = true;
    table[b'{' as usize] = true;
    table[b'}' as usize] = true;
    table[b'[' as usize] = true;
    table[b']' as usize] = true;
    table
};

/// Where a JSON value ends, found chunk by chunk (also for `list_chunks.rs`, which is
/// fed chunks rather than reading them).
#[derive(Debug, Default)]
pub(super) struct ValueCut {
    state: CutState,
    depth: usize,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum CutState {
    /// Nothing read yet.
    #[default]
    Start,
    /// Inside an object or array, outside strings.
    Nested,
    /// Inside a string; `nested` says whether the string is inside a container.
    Str { nested: bool, escaped: bool },
    /// A bare number, `true`, `false` or `null`.
    Scalar,
}

impl ValueCut {
    fn is_scalar_in_progress(&self) -> bool {
        self.state == CutState::Scalar
    }

    /// The length of `chunk` that completes the value, if it ends within `chunk`.
    pub(super) fn find_end(&mut self, chunk: &[u8]) -> Option<usize> {
        let mut i = 0;
        while i < chunk.len() {
            match self.state {
                CutState::Start => match chunk[i] {
                    b'{' | b'[' => {
                        self.depth = 1;
                        self.state = CutState::Nested;
                        i += 1;
                    }
                    b'"' => {
                        self.state = CutState::Str {
                            nested: false,
                            escaped: false,
                        };
                        i += 1;
                    }
                    // The byte is looked at again as the scalar's first.
                    _ => self.state = CutState::Scalar,
                },
                CutState::Str {
                    nested,
                    escaped: true,
                } => {
                    self.state = CutState::Str {
                        nested,
                        escaped: false,
                    };
                    i += 1;
                }
                CutState::Str {
                    nested,
                    escaped: false,
                } => match memchr::memchr2(b'"', b'\\', &chunk[i..]) {
                    None => i = chunk.len(),
                    Some(k) => {
                        i += k + 1;
                        if chunk[i - 1] == b'\\' {
                            self.state = CutState::Str {
                                nested,
                                escaped: true,
                            };
                        } else if nested {
                            self.state = CutState::Nested;
                        } else {
                            return Some(i);
                        }
                    }
                },
                CutState::Nested => {
                    // Most bytes of a pretty-printed document are indentation and
                    // scalars; skip them in a tight loop.
                    while i < chunk.len() && !STRUCTURAL[usize::from(chunk[i])] {
                        i += 1;
                    }
                    if i == chunk.len() {
                        break;
                    }
                    match chunk[i] {
                        b'"' => {
                            self.state = CutState::Str {
                                nested: true,
                                escaped: false,
                            }
                        }
                        b'{' | b'[' => self.depth += 1,
                        b'}' | b']' => {
                            self.depth -= 1;
                            if self.depth == 0 {
                                return Some(i + 1);
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                CutState::Scalar => {
                    if matches!(chunk[i], b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r') {
                        return Some(i);
                    }
                    i += 1;
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
