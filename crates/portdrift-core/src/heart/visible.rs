//! Untrusted text made safe to print: rule comments, process names and whole dumps come
//! from other people's nodes, and a control byte in them would drive the reader's
//! terminal (`ESC]0;…BEL` retitles it, `ESC[31m` recolours it, `CR` overwrites a line).
//! Every control character becomes a visible escape, `\x1b`, so what was there is shown
//! rather than obeyed or hidden.
//!
//! Hand-written: the few crates that escape strings (`strip-ansi-escapes`, the escape in
//! tracing-subscriber) either delete what they find, which hides evidence, or leave CR,
//! NUL and newlines through; this is a dozen lines over `char::is_control`.

use std::borrow::Cow;
use std::fmt::Write;

/// `s` with every control character (C0, DEL and C1, newlines included) escaped as
/// `\xNN`; borrowed when there is none, as almost always.
pub fn visible(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// As [`visible`], but a newline stays a newline: for whole texts whose lines portdrift
/// wrote itself, after each untrusted field in them went through [`visible`].
pub fn visible_lines(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

/// [`visible_lines`] of a text already owned: returned as it is when it holds no
/// control character.
pub fn into_visible_lines(text: String) -> String {
    match visible_lines(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(escaped) => escaped,
    }
}

/// Bytes that should be UTF-8 text, as [`visible`] text: each byte that is not part of a
/// valid character is shown as `\xNN` too, where a lossy decoding would show `�` and
/// lose which byte it was.
pub fn visible_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(&visible(chunk.valid()));
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

fn escape(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    let hidden = |c: char| c.is_control() && !(keep_newlines && c == '\n');
    if !s.chars().any(hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hidden(c) {
            // Every control character is below U+00A0: two hex digits name it.
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests;
