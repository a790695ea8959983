//! `iptables-save` / `ip6tables-save` text → NodePort rules.
//!
//! The parser streams the dump once, keeping only what NodePort analysis needs: the
//! dispatch rules of nat `KUBE-NODEPORTS` (kube-proxy's `-j KUBE-EXT-*` and the direct
//! `-j DNAT` operators paste), the filter-table REJECT/DROP/ACCEPT rules for NodePorts,
//! every jump between nat chains, and every DNAT. It then follows each dispatch rule
//! through `KUBE-EXT-*` → `KUBE-SVC-*`/`KUBE-SVL-*` → `KUBE-SEP-*` → DNAT.
//!
//! Rules are compared by meaning, not text: arguments are read by flag wherever the
//! kernel round-trip put them, addresses are parsed, and quoting is undone.

pub(crate) mod tokens;

use std::io::{self, BufRead};
use std::num::NonZeroU64;

use crate::decode::lines::BoundedLines;
use crate::heart::model::{Backend, Family, RuleDump, RuleText};

mod args;
mod cursor;
mod finish;
mod foreign;
mod graph;
mod header;
mod line_parser;
mod listing;
mod problems;
mod rules;
mod signals;
mod values;
mod walker;

pub use foreign::{ForeignDump, ForeignKind, sniff_foreign};
pub(crate) use header::header_backend;

use cursor::Cursor;
use graph::Graph;
use header::Header;
use problems::Problems;
use signals::SignalTally;

/// What the caller knows about a dump before reading it (from its file name or the
/// command that produced it). The dump's own header fills in what is not known.
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceHint {
    pub backend: Option<Backend>,
    pub family: Option<Family>,
    /// The dump shows every table the kernel has (a live read, or the tool run without
    /// `-t`): a table it lacks is absent from the node. Otherwise (a file, which may
    /// have been captured one table at a time, or `iptables -S`, the filter table alone)
    /// a missing table is not seen, and nothing is concluded missing from it.
    pub whole: bool,
}

/// Parses an iptables-save dump from a reader. Only I/O errors fail; anything the
/// parser does not understand is kept in [`RuleDump::unparsed`].
pub fn parse_save<R: BufRead>(reader: R, origin: &str, hint: SourceHint) -> io::Result<RuleDump> {
    let mut parser = Parser::new(origin, hint);
    let mut lines = BoundedLines::new(reader);
    while let Some(line) = lines.next_line()? {
        parser.line(line.number, line.bytes, line.truncated);
    }
    Ok(parser.finish())
}

/// Parses an iptables-save dump handed over one line at a time (without its newline),
/// as a reader of the kernel renders it.
pub struct LineParser {
    parser: Parser,
    line: u32,
}

impl LineParser {
    pub fn new(origin: &str, hint: SourceHint) -> LineParser {
        LineParser {
            parser: Parser::new(origin, hint),
            line: 0,
        }
    }

    pub(crate) fn line(&mut self, text: &str) {
        self.line += 1;
        self.parser.line(self.line, text.as_bytes(), false);
    }

    /// [`LineParser::line`] for a rule whose nf_tables handle the reader knows.
    pub fn line_with_handle(&mut self, text: &str, handle: Option<NonZeroU64>) {
        self.parser.cursor.handle = handle;
        self.line(text);
        self.parser.cursor.handle = None;
    }

    /// Lines handed over so far.
    pub fn lines(&self) -> u32 {
        self.line
    }

    pub fn finish(self) -> RuleDump {
        self.parser.finish()
    }
}

/// Parses an iptables-save dump held in memory.
pub fn parse_save_str(text: &str, origin: &str, hint: SourceHint) -> RuleDump {
    parse_save(text.as_bytes(), origin, hint).expect("reading from memory cannot fail")
}

/// One dump's parse: each line handed to the part of the state it concerns.
struct Parser {
    origin: String,
    hint: SourceHint,
    header: Header,
    cursor: Cursor,
    graph: Graph,
    tally: SignalTally,
    problems: Problems,
}

/// The tables NodePort analysis tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TableKind {
    Nat,
    Filter,
    /// mangle, raw, security: only counted, never needed for NodePorts.
    Other,
}

/// The rule line being read, with what its citation names.
#[derive(Debug, Clone, Copy)]
struct RuleLine<'a> {
    number: u32,
    text: &'a str,
    chain: &'a str,
    /// The rule's number in its chain.
    position: u32,
    handle: Option<NonZeroU64>,
}

impl RuleLine<'_> {
    fn rule_text(&self) -> RuleText {
        RuleText {
            text: self.text.into(),
            line: self.number,
            position: self.position,
            handle: self.handle,
        }
    }
}

#[cfg(test)]
mod tests;
