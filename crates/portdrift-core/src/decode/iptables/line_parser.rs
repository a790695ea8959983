//! The line parser: each line told by its kind (a table, a chain, a policy, a comment,
//! a rule) and handed to the part of the parser's state it concerns.

use crate::heart::visible::visible_bytes;

use super::TableKind;
use super::{Parser, SourceHint};

impl Parser {
    pub(super) fn new(origin: &str, hint: SourceHint) -> Parser {
        Parser {
            origin: origin.to_string(),
            hint,
            header: Default::default(),
            cursor: Default::default(),
            graph: Default::default(),
            tally: Default::default(),
            problems: Default::default(),
        }
    }

    pub(super) fn line(&mut self, number: u32, bytes: &[u8], truncated: bool) {
        let Some(text) = self.readable(number, bytes, truncated) else {
            return;
        };
        // Dumps end lines with `\n` (the reader strips `\r`); trailing blanks are rare
        // but harmless to drop. Byte-wise: no UTF-8 decoding on the hot path.
        let text = &text[..text.len()
            - text
                .bytes()
                .rev()
                .take_while(|b| matches!(b, b' ' | b'\t'))
                .count()];
        // `iptables-save -c` prefixes rules with `[packets:bytes] `.
        let body = match text.strip_prefix('[') {
            Some(rest) => match rest.split_once("] ") {
                Some((_, r)) => r,
                None => text,
            },
            None => text,
        };
        let save_line = self.line_body(number, text, body);
        self.problems.pasted_listing.save_lines |= save_line;
    }

    /// The line as text, None (and kept as unparsed) when it is not UTF-8 or was cut.
    fn readable<'a>(&mut self, number: u32, bytes: &'a [u8], truncated: bool) -> Option<&'a str> {
        let Ok(text) = std::str::from_utf8(bytes) else {
            // Each stray byte named (`\xff`), where a lossy decoding shows `�`.
            self.problems
                .unparsed(number, &visible_bytes(bytes), "not UTF-8 text");
            return None;
        };
        if truncated {
            self.problems.unparsed(number, text, "line longer than 64 KiB");
            return None;
        }
        Some(text)
    }

    /// A line without its counters (`body`): whether it is one of the dump's own kinds
    /// (a table, chain, rule, COMMIT).
    fn line_body(&mut self, number: u32, text: &str, body: &str) -> bool {
        match body.as_bytes().first() {
            None => false,
            Some(b'#') => {
                self.comment(number, body);
                false
            }
            Some(b'*') => {
                let whole = self.hint.whole;
                self.cursor
                    .open_table(number, &body[1..], whole, &mut self.problems);
                true
            }
            Some(b':') => {
                self.declare_chain(number, body);
                true
            }
            Some(b'-') if body.starts_with("-A ") => {
                self.cursor.end_policies();
                self.rule(number, body);
                true
            }
            Some(b'-') if body.starts_with("-P ") => {
                self.policy(number, body);
                true
            }
            Some(b'-') if body.starts_with("-N ") => {
                self.cursor.end_policies();
                self.new_chain(number, body);
                true
            }
            _ if body == "COMMIT" => {
                self.cursor.commit(number, &mut self.problems);
                true
            }
            _ if self.problems.pasted_listing.opens(body) => {
                self.problems.pasted_listing.open(number, body);
                false
            }
            _ => {
                self.problems
                    .unparsed(number, text, "not an iptables-save or iptables -S line");
                false
            }
        }
    }

    /// `-P CHAIN POLICY` (`iptables -S`).
    fn policy(&mut self, number: u32, text: &str) {
        match text[3..].split_ascii_whitespace().next() {
            Some(chain) => self.cursor.policy(chain),
            None => self.problems.unparsed(number, text, "policy without a chain"),
        }
    }

    /// `-N CHAIN` (`iptables -S`): a chain declaration.
    fn new_chain(&mut self, number: u32, text: &str) {
        match text[3..].split_ascii_whitespace().next() {
            Some(name) => self.declare(number, name),
            None => self
                .problems
                .unparsed(number, text, "chain declaration without a name"),
        }
    }

    /// `:CHAIN POLICY [counters]` (iptables-save): a chain declaration.
    fn declare_chain(&mut self, number: u32, text: &str) {
        let rest = &text[1..];
        let name = &rest[..memchr::memchr2(b' ', b'\t', rest.as_bytes()).unwrap_or(rest.len())];
        self.cursor.declaration(&rest[name.len()..]);
        if name.is_empty() {
            self.problems
                .unparsed(number, text, "chain declaration without a name");
            return;
        }
        if self.cursor.table.is_none() {
            // A fragment (`iptables-save | grep KUBE`): declared as `-N` would be.
            return self.new_chain(number, &format!("-N {name}"));
        }
        self.declare(number, name);
    }

    /// A chain declared in the current table, or (outside any table) where its name
    /// says.
    fn declare(&mut self, number: u32, name: &str) {
        self.tally.chain_name(name);
        match self.cursor.table {
            Some(table) => {
                if table == TableKind::Nat {
                    self.tally.nat_chain(name);
                }
                self.graph.declare(table, name, number);
            }
            None => {
                self.cursor.guessed_lines += 1;
                let table = self.graph.declare_guessed(name, number);
                self.cursor.note_table(table);
            }
        }
    }

    fn comment(&mut self, number: u32, text: &str) {
        if let Some(rest) = text.strip_prefix("# Generated by ") {
            self.header.generated_by(rest);
        } else if text.contains("is incompatible, use 'nft' tool") {
            // iptables-nft printing a table another tool wrote: its rules are not shown,
            // so this dump cannot be trusted as complete.
            self.problems
                .partial(format!("line {number}: {}", text.trim_start_matches("# ")));
        } else if text.contains("iptables-legacy tables present") {
            self.problems.note(format!(
                "line {number}: the tool says iptables-legacy tables are also present; read them with iptables-legacy-save"
            ));
        }
    }
}
