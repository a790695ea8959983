//! A line reader with a bound on line length.
//!
//! `BufRead::lines` would allocate a `String` per line and hold an arbitrarily long
//! line in memory (a dump with no newline is one line). Rule dumps are read through
//! this instead: one reused buffer, and a line longer than the bound is cut there and
//! flagged, so a hostile or corrupted dump costs bounded memory.

use std::io::{self, BufRead};

/// The longest line kept whole. kube-proxy's longest rules are a few hundred bytes.
pub const MAX_LINE: usize = 64 * 1024;

/// One line read by [`BoundedLines`].
pub struct Line<'a> {
    /// 1-based line number.
    pub number: u32,
    /// The line without its newline, cut at the bound.
    pub bytes: &'a [u8],
    /// The line was longer than the bound and has been cut.
    pub truncated: bool,
}

/// Reads lines, borrowing them straight from the reader's buffer when a whole line is
/// there (the common case), and copying into one reused buffer only when a line spans
/// two reads.
pub struct BoundedLines<R> {
    reader: R,
    buf: Vec<u8>,
    /// Bytes of the reader's buffer handed out as the last line, consumed on the next
    /// call (the line borrowed them until then).
    pending: usize,
    number: u32,
    max: usize,
    /// The input ended without a final newline (a sign of a truncated dump).
    pub ended_without_newline: bool,
}

impl<R: BufRead> BoundedLines<R> {
    pub fn new(reader: R) -> Self {
        Self::with_max(reader, MAX_LINE)
    }

    pub fn with_max(reader: R, max: usize) -> Self {
        BoundedLines {
            reader,
            buf: Vec::with_capacity(512),
            pending: 0,
            number: 0,
            max,
            ended_without_newline: false,
        }
    }

    /// The next line, or None at the end of input.
    pub fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        self.reader.consume(std::mem::take(&mut self.pending));
        // Fast path: the whole line is already in the reader's buffer.
        let available = fill(&mut self.reader)?;
        if available.is_empty() {
            return Ok(None);
        }
        if let Some(i) = memchr::memchr(b'\n', available)
            && i <= self.max
        {
            self.pending = i + 1;
            self.number = self.number.saturating_add(1);
            let available = fill(&mut self.reader)?;
            let mut line = &available[..i];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            return Ok(Some(Line {
                number: self.number,
                bytes: line,
                truncated: false,
            }));
        }
        self.copy_line()
    }

    /// The slow path: a line that spans reads, or is longer than the bound.
    fn copy_line(&mut self) -> io::Result<Option<Line<'_>>> {
        self.buf.clear();
        let mut truncated = false;
        loop {
            let available = fill(&mut self.reader)?;
            if available.is_empty() {
                self.ended_without_newline = true;
                break;
            }
            let (chunk, consumed, done) = match memchr::memchr(b'\n', available) {
                Some(i) => (&available[..i], i + 1, true),
                None => (available, available.len(), false),
            };
            let room = self.max.saturating_sub(self.buf.len());
            if chunk.len() > room {
                truncated = true;
            }
            self.buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
            self.reader.consume(consumed);
            if done {
                break;
            }
        }
        self.number = self.number.saturating_add(1);
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Ok(Some(Line {
            number: self.number,
            bytes: &self.buf,
            truncated,
        }))
    }
}

/// `fill_buf`, retried on EINTR. (The second call returns the buffered bytes without
/// reading; it exists so the borrow checker sees one borrow.)
fn fill<R: BufRead>(reader: &mut R) -> io::Result<&[u8]> {
    loop {
        match reader.fill_buf() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
            Ok(_) => break,
        }
    }
    reader.fill_buf()
}

/// Cuts a line to a readable length for reports (on a character boundary).
pub fn excerpt(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests;
