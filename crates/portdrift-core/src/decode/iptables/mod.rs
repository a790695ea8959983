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
use std::net::IpAddr;
use std::num::NonZeroU64;
use std::ops::Range;
use std::sync::Arc;

// FxHash: chain names are hashed once per rule line; SipHash's DoS resistance buys
// nothing for a dump read from the local kernel and costs measurably at 240k lines.

use crate::decode::lines::BoundedLines;
use crate::decode::name_index::NameIndex;
use crate::heart::model::{
    Backend, DestMatch, Family, MalformedRule, Protocol, RuleSource, RuleText, ServicePortRef, Unparsed,
    Verdict,
};

mod args;
mod foreign;
mod line_parser;

pub(crate) use line_parser::header_backend;
mod listing;
mod rules;
mod signals;
mod values;
mod walker;

pub use foreign::{ForeignDump, ForeignKind, sniff_foreign};
use listing::Listing;

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

/// How much of an unparsed line is kept for the report.
const EXCERPT: usize = 240;

/// Parses an iptables-save dump from a reader. Only I/O errors fail; anything the
/// parser does not understand is kept in [`RuleSource::unparsed`].
pub fn parse_save<R: BufRead>(reader: R, origin: &str, hint: SourceHint) -> io::Result<RuleSource> {
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
        self.parser.handle = handle;
        self.line(text);
        self.parser.handle = None;
    }

    /// Lines handed over so far.
    pub fn lines(&self) -> u32 {
        self.line
    }

    pub fn finish(self) -> RuleSource {
        self.parser.finish()
    }
}

/// Parses an iptables-save dump held in memory.
pub fn parse_save_str(text: &str, origin: &str, hint: SourceHint) -> RuleSource {
    parse_save(text.as_bytes(), origin, hint).expect("reading from memory cannot fail")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TableKind {
    Nat,
    Filter,
    /// mangle, raw, security: only counted, never needed for NodePorts.
    Other,
}

#[derive(Debug)]
struct Chain {
    name: Arc<str>,
    /// Line of the `:CHAIN` declaration; 0 when a rule jumps to a chain never declared.
    declared: u32,
    referenced: bool,
}

#[derive(Debug, Default)]
struct Table {
    chains: Vec<Chain>,
    /// Positions in `chains`, found by the chain's own name.
    index: NameIndex,
    /// Every jump (from chain, to chain) in dump order. Kept flat rather than a Vec
    /// per chain: a 10,000-Service node has ~60,000 chains, and a small allocation
    /// each cost more than the whole parse of their rules.
    jumps: Vec<(u32, u32)>,
}

impl Table {
    /// Whether the dump declares `name` in this table (a jump alone does not).
    fn declares(&self, name: &str) -> bool {
        self.find(name)
            .is_some_and(|id| self.chains[id as usize].declared != 0)
    }

    /// The chain called `name`, if the dump named it.
    fn find(&self, name: &str) -> Option<u32> {
        self.index.find(name, |id| &self.chains[id as usize].name)
    }

    fn chain_id(&mut self, name: &str, declared: u32) -> u32 {
        if let Some(id) = self.find(name) {
            if declared != 0 && self.chains[id as usize].declared == 0 {
                self.chains[id as usize].declared = declared;
            }
            return id;
        }
        let id = self.chains.len() as u32;
        self.chains.push(Chain {
            name: name.into(),
            declared,
            referenced: false,
        });
        let chains = &self.chains;
        self.index.insert(name, id, |other| &chains[other as usize].name);
        id
    }
}

#[derive(Debug)]
struct Dnat {
    ip: IpAddr,
    port: Option<u16>,
    chain: u32,
    rule: RuleText,
    /// The destination port the DNAT rule matches (read in CNI hostPort chains only).
    dport: Option<u16>,
}

/// A `CNI-HOSTPORT-DNAT` rule: the ports it matches and the chain it jumps to.
#[derive(Debug)]
struct HostPortEntry {
    protocol: Protocol,
    ports: Vec<u16>,
    chain: u32,
    rule: RuleText,
}

/// The CNI portmap plugin's dispatch chain, and the prefix of its per-container chains.
const CNI_HOSTPORT_CHAIN: &str = "CNI-HOSTPORT-DNAT";
const CNI_DNAT_CHAIN_PREFIX: &str = "CNI-DN-";

#[derive(Debug)]
enum DispatchTarget {
    Chain(u32),
    Dnat(u32),
    Verdict(Verdict),
}

#[derive(Debug)]
struct Dispatch {
    table: TableKind,
    chain: &'static str,
    protocol: Protocol,
    port: u16,
    dest: DestMatch,
    target: DispatchTarget,
    comment: Option<ServicePortRef>,
    undecoded_comment: Option<Range<u32>>,
    rule: RuleText,
}

struct Parser {
    origin: String,
    hint: SourceHint,
    header_backend: Option<Backend>,
    /// What in the header told the backend.
    header_backend_why: Option<String>,
    header_family: Option<Family>,
    saw_ipv6_address: bool,
    table: Option<TableKind>,
    table_name: String,
    table_open_line: u32,
    nat: Table,
    filter: Table,
    other_chains: Vec<Box<str>>,
    dnats: Vec<Dnat>,
    dispatch: Vec<Dispatch>,
    hostports: Vec<HostPortEntry>,
    last_nat_chain: Option<(Arc<str>, u32)>,
    unparsed: Vec<Unparsed>,
    notes: Vec<String>,
    /// Some table is not shown whole (no COMMIT, or no built-in chain declared).
    uncommitted: bool,
    /// In a `*nat` or `*filter` block of a dump read from a file: whether it has
    /// declared one of its built-in chains (`:PREROUTING ACCEPT [0:0]`), as iptables-save
    /// always does and restore input need not. None outside such a block.
    builtins_declared: Option<bool>,
    kube_rule_count: usize,
    /// `iptables -S` form: the table a run of `-P` lines named (None: not known).
    listing: Option<Listing>,
    /// Lines read outside any known table: their table was guessed from names.
    guessed_lines: u32,
    /// The tables the dump holds, by kind.
    saw_nat: bool,
    saw_filter: bool,
    /// How each proxy mode shows in nat `KUBE-SERVICES`: (iptables, IPVS) rules.
    services_dispatch: (u32, u32),
    /// kube-proxy's way in to its NodePort rules, as far as the nat table shows it:
    /// `PREROUTING -j KUBE-SERVICES`, `KUBE-SERVICES -j KUBE-NODEPORTS`.
    prerouting_to_services: bool,
    services_to_nodeports: bool,
    /// kube-proxy's filter-table REJECT and DROP rules read.
    filter_verdicts: u32,
    ipvs: Vec<String>,
    replacement: Option<(&'static str, String)>,
    /// The first of kube-proxy's chains declared (not kubelet's).
    kube_proxy_chain: Option<String>,
    malformed: Vec<MalformedRule>,
    /// Jumps to `KUBE-*` chains their table had not declared when the rule was read.
    undeclared_jumps: Vec<(TableKind, String, RuleText)>,
    /// A line of the dump's own kinds (a table, chain, rule, COMMIT) was read.
    saw_save_line: bool,
    /// The first line of an `iptables -L` listing in the dump, and its number.
    list_line: Option<(u32, String)>,
    /// The chain of the last rule read, and that rule's number in it: a save prints each
    /// chain's rules together, so counting a run numbers them without a map.
    chain_run: (String, u32),
    /// The nf_tables handle of the line being read, when its reader knows it.
    handle: Option<NonZeroU64>,
}

#[cfg(test)]
mod tests;
