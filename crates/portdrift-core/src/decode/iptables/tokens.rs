//! Splitting an iptables-save rule into its arguments.
//!
//! iptables-save quotes an argument with `"` when it holds anything outside a small
//! safe set, escaping `"` and `\` inside with a backslash (`xtables_save_string`).
//! Tokens borrow from the line; only an argument with escapes is copied.

use std::borrow::Cow;

/// Why a line could not be split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    UnterminatedQuote,
}

/// Iterator over the arguments of one rule line.
pub struct Tokens<'a> {
    rest: &'a str,
}

pub fn tokens(line: &str) -> Tokens<'_> {
    Tokens { rest: line }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = Result<Cow<'a, str>, TokenError>;

    fn next(&mut self) -> Option<Self::Item> {
        // Byte-wise: separators and quotes are ASCII, so every cut falls on a char
        // boundary, and scanning bytes avoids decoding UTF-8 on the hottest path.
        let bytes = self.rest.as_bytes();
        let start = bytes
            .iter()
            .position(|&b| b != b' ' && b != b'\t')
            .unwrap_or(bytes.len());
        let s = &self.rest[start..];
        if s.is_empty() {
            self.rest = s;
            return None;
        }
        if let Some(quoted) = s.strip_prefix('"') {
            return Some(self.take_quoted(quoted));
        }
        // Tokens are a few bytes long: a plain loop beats memchr's per-call setup.
        let end = s
            .as_bytes()
            .iter()
            .position(|&b| b == b' ' || b == b'\t')
            .unwrap_or(s.len());
        self.rest = &s[end..];
        Some(Ok(Cow::Borrowed(&s[..end])))
    }
}

impl<'a> Tokens<'a> {
    /// What is left of the line after the tokens taken so far.
    pub fn rest(&self) -> &'a str {
        self.rest
    }

    fn take_quoted(&mut self, body: &'a str) -> Result<Cow<'a, str>, TokenError> {
        let bytes = body.as_bytes();
        let mut i = 0;
        let mut escaped = false;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' if i + 1 < bytes.len() => {
                    escaped = true;
                    i += 2;
                    continue;
                }
                b'"' => {
                    let raw = &body[..i];
                    self.rest = &body[i + 1..];
                    return Ok(if escaped {
                        Cow::Owned(unescape(raw))
                    } else {
                        Cow::Borrowed(raw)
                    });
                }
                _ => i += 1,
            }
        }
        self.rest = "";
        Err(TokenError::UnterminatedQuote)
    }
}

fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests;
