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

use std::borrow::Cow;
use std::io::{self, BufRead};
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::sync::Arc;

// FxHash: chain names are hashed once per rule line; SipHash's DoS resistance buys
// nothing for a dump read from the local kernel and costs measurably at 240k lines.
use rustc_hash::FxHashMap;

use crate::decode::lines::{BoundedLines, excerpt};
use crate::heart::kube_proxy;
use crate::heart::model::{
    Backend, DestMatch, DnatTarget, Family, HostPortRule, MalformedRule, NodePortRule, OrphanChain, Protocol,
    ProxyMode, ProxySignals, RuleIdentity, RuleSource, RuleText, ServicePortRef, Unparsed, Verdict,
};

use tokens::{TokenError, tokens};

/// What the caller knows about a dump before reading it (from its file name or the
/// command that produced it). The dump's own header fills in what is not known.
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceHint {
    pub backend: Option<Backend>,
    pub family: Option<Family>,
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
pub(crate) struct LineParser {
    parser: Parser,
    line: u32,
}

impl LineParser {
    pub(crate) fn new(origin: &str, hint: SourceHint) -> LineParser {
        LineParser {
            parser: Parser::new(origin, hint),
            line: 0,
        }
    }

    pub(crate) fn line(&mut self, text: &str) {
        self.line += 1;
        self.parser.line(self.line, text.as_bytes(), false);
    }

    /// Lines handed over so far.
    pub(crate) fn lines(&self) -> u32 {
        self.line
    }

    pub(crate) fn finish(self) -> RuleSource {
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
    index: FxHashMap<Arc<str>, u32>,
    /// Every jump (from chain, to chain) in dump order. Kept flat rather than a Vec
    /// per chain: a 10,000-Service node has ~60,000 chains, and a small allocation
    /// each cost more than the whole parse of their rules.
    jumps: Vec<(u32, u32)>,
}

impl Table {
    /// Whether the dump declares `name` in this table (a jump alone does not).
    fn declares(&self, name: &str) -> bool {
        self.index
            .get(name)
            .is_some_and(|&id| self.chains[id as usize].declared != 0)
    }

    fn chain_id(&mut self, name: &str, declared: u32) -> u32 {
        if let Some(&id) = self.index.get(name) {
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
        self.index.insert(name.into(), id);
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

/// The arguments of one rule that NodePort analysis reads.
#[derive(Debug, Default)]
struct RuleArgs<'a> {
    protocol: Option<Cow<'a, str>>,
    dest: Option<Cow<'a, str>>,
    dest_negated: bool,
    dport: Option<Cow<'a, str>>,
    /// `-m multiport --dports 80,443,30000:30010`.
    dports: Option<Cow<'a, str>>,
    comment: Option<Cow<'a, str>>,
    /// Where the comment's text starts, in bytes back from the end of the spec (which
    /// ends the rule's line): where a report finds the comment it left undecoded.
    comment_from_end: usize,
    target: Option<Cow<'a, str>>,
    to_destination: Option<Cow<'a, str>>,
    dst_type_local: bool,
    nfacct: bool,
}

/// Where the last `-j `/`-g ` option starts (at the start or after a blank).
fn last_jump(spec: &[u8]) -> Option<usize> {
    memchr::memrchr_iter(b'-', spec).find(|&i| {
        spec.get(i + 1).is_some_and(|b| matches!(b, b'j' | b'g'))
            && spec.get(i + 2) == Some(&b' ')
            && (i == 0 || spec[i - 1] == b' ')
    })
}

/// Blank-separated words (iptables-save separates arguments with single spaces).
fn words(s: &str) -> impl Iterator<Item = &str> {
    s.split_ascii_whitespace()
}

/// Filter chains that hold NodePort REJECT/DROP/ACCEPT rules.
const FILTER_DISPATCH_CHAINS: [&str; 3] = ["KUBE-EXTERNAL-SERVICES", "KUBE-SERVICES", "KUBE-NODEPORTS"];

impl<'a> RuleArgs<'a> {
    /// Reads only the target and its options. iptables-save prints the target last,
    /// so it follows the last ` -j `/` -g `; a quote after it (which kube-proxy never
    /// writes there) sends the line to the full reader instead.
    fn read_target(spec: &'a str) -> Option<RuleArgs<'a>> {
        let Some(at) = last_jump(spec.as_bytes()) else {
            return Some(RuleArgs::default());
        };
        let tail = &spec[at..];
        if memchr::memchr(b'"', tail.as_bytes()).is_some() {
            return None;
        }
        // `-j TARGET [target options]`: split by blanks, no quoting to undo.
        let mut words = words(&tail[3..]);
        let target = words.next()?;
        let mut args = RuleArgs {
            target: Some(Cow::Borrowed(target)),
            ..RuleArgs::default()
        };
        if target == "DNAT" {
            while let Some(w) = words.next() {
                if w == "--to-destination" {
                    args.to_destination = words.next().map(Cow::Borrowed);
                }
            }
        }
        Some(args)
    }

    fn read(spec: &'a str) -> Result<RuleArgs<'a>, TokenError> {
        let mut args = RuleArgs::default();
        let mut negate = false;
        let mut iter = tokens(spec);
        while let Some(tok) = iter.next() {
            let tok = tok?;
            let left = iter.rest();
            let mut value = || iter.next().transpose();
            match tok.as_ref() {
                "!" => {
                    negate = true;
                    continue;
                }
                "-p" | "--protocol" => args.protocol = if negate { None } else { value()? },
                "-d" | "--destination" => {
                    args.dest = value()?;
                    args.dest_negated = negate;
                }
                "--dport" | "--destination-port" => args.dport = if negate { None } else { value()? },
                "--dports" | "--destination-ports" => args.dports = if negate { None } else { value()? },
                "--comment" => {
                    let left = left.trim_start_matches([' ', '\t']);
                    args.comment_from_end = left.len() - usize::from(left.starts_with('"'));
                    args.comment = value()?;
                }
                "-j" | "--jump" | "-g" | "--goto" => args.target = value()?,
                "--to-destination" => args.to_destination = value()?,
                "--dst-type" => {
                    let v = value()?;
                    args.dst_type_local = !negate && v.as_deref() == Some("LOCAL");
                }
                "--nfacct-name" => args.nfacct = true,
                _ => {}
            }
            negate = false;
        }
        Ok(args)
    }
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
    uncommitted: bool,
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
    /// kube-proxy's filter-table REJECT and DROP rules read.
    filter_verdicts: u32,
    ipvs: Vec<String>,
    replacement: Option<(&'static str, String)>,
    /// The first of kube-proxy's chains declared (not kubelet's).
    kube_proxy_chain: Option<String>,
    malformed: Vec<MalformedRule>,
    /// Jumps to `KUBE-*` chains their table had not declared when the rule was read.
    undeclared_jumps: Vec<(TableKind, String, RuleText)>,
}

/// A run of `iptables -S` output: its `-P` lines name the built-in chains, which tell
/// the table (`-t nat -S` prints PREROUTING, INPUT, OUTPUT and POSTROUTING).
#[derive(Debug, Default)]
struct Listing {
    builtins: Vec<String>,
    /// Decided once the run's first non-policy line comes.
    table: Option<Option<TableKind>>,
}

impl Listing {
    fn table(&self) -> Option<TableKind> {
        let has = |c: &str| self.builtins.iter().any(|b| b == c);
        match (has("PREROUTING"), has("FORWARD"), has("POSTROUTING")) {
            // mangle has every built-in chain; raw only PREROUTING and OUTPUT.
            (true, true, _) => Some(TableKind::Other),
            (true, false, true) => Some(TableKind::Nat),
            (true, false, false) => Some(TableKind::Other),
            (false, true, _) => Some(TableKind::Filter),
            _ => None,
        }
    }
}

/// The chains of a kube-proxy replacement, by their prefix: Services are handled by
/// that project's own datapath where these exist and kube-proxy's dispatch does not.
const REPLACEMENT_CHAINS: [(&str, &str); 4] = [
    ("CILIUM_", "Cilium"),
    ("KUBE-ROUTER-", "kube-router"),
    // Calico's eBPF data plane keeps these iptables chains for what BPF leaves to them.
    ("cali-pre-ingress", "Calico (eBPF)"),
    ("cali-bpf", "Calico (eBPF)"),
];

/// kubelet's chains: they say nothing of kube-proxy (pkg/kubelet/kubelet_network_linux.go;
/// KUBE-MARK-DROP was kubelet's before KEP-3178).
const KUBELET_CHAINS: [&str; 4] = [
    "KUBE-FIREWALL",
    "KUBE-KUBELET-CANARY",
    "KUBE-IPTABLES-HINT",
    "KUBE-MARK-DROP",
];

/// nat chains only kube-proxy's IPVS mode writes.
const IPVS_CHAINS: [&str; 3] = ["KUBE-NODE-PORT", "KUBE-LOAD-BALANCER", "KUBE-LOOP-BACK"];

/// The table a line outside any known table belongs to, guessed from its chain and
/// target: kube-proxy's chain names say it for all but `KUBE-SERVICES` and
/// `KUBE-NODEPORTS`, which exist in both nat and filter and are told apart by what
/// they do.
fn guess_table(chain: &str, target: &str) -> TableKind {
    const FILTER_ONLY: [&str; 6] = [
        "INPUT",
        "FORWARD",
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-FORWARD",
        "KUBE-FIREWALL",
        "KUBE-PROXY-FIREWALL",
    ];
    if FILTER_ONLY.contains(&chain) {
        return TableKind::Filter;
    }
    if matches!(chain, "KUBE-SERVICES" | "KUBE-NODEPORTS" | "OUTPUT")
        && matches!(target, "REJECT" | "DROP" | "ACCEPT")
    {
        return TableKind::Filter;
    }
    TableKind::Nat
}

impl Parser {
    fn new(origin: &str, hint: SourceHint) -> Parser {
        Parser {
            origin: origin.to_string(),
            hint,
            header_backend: None,
            header_backend_why: None,
            header_family: None,
            saw_ipv6_address: false,
            table: None,
            table_name: String::new(),
            table_open_line: 0,
            nat: Table::default(),
            filter: Table::default(),
            other_chains: Vec::new(),
            dnats: Vec::new(),
            dispatch: Vec::new(),
            hostports: Vec::new(),
            last_nat_chain: None,
            unparsed: Vec::new(),
            notes: Vec::new(),
            uncommitted: false,
            kube_rule_count: 0,
            listing: None,
            guessed_lines: 0,
            saw_nat: false,
            saw_filter: false,
            services_dispatch: (0, 0),
            filter_verdicts: 0,
            ipvs: Vec::new(),
            replacement: None,
            kube_proxy_chain: None,
            malformed: Vec::new(),
            undeclared_jumps: Vec::new(),
        }
    }

    fn unparsed(&mut self, line: u32, text: &str, reason: impl Into<String>) {
        self.unparsed.push(Unparsed {
            line,
            text: excerpt(text, EXCERPT),
            reason: reason.into(),
        });
    }

    fn line(&mut self, number: u32, bytes: &[u8], truncated: bool) {
        let text = match std::str::from_utf8(bytes) {
            Ok(t) => t,
            Err(_) => {
                let lossy = String::from_utf8_lossy(bytes);
                self.unparsed(number, &lossy, "not UTF-8 text");
                return;
            }
        };
        if truncated {
            self.unparsed(number, text, "line longer than 64 KiB");
            return;
        }
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
        match body.as_bytes().first() {
            None => {}
            Some(b'#') => self.comment(number, body),
            Some(b'*') => self.open_table(number, &body[1..]),
            Some(b':') => self.declare_chain(number, body),
            Some(b'-') if body.starts_with("-A ") => {
                self.end_policies();
                self.rule(number, body)
            }
            Some(b'-') if body.starts_with("-P ") => self.policy(number, body),
            Some(b'-') if body.starts_with("-N ") => {
                self.end_policies();
                self.new_chain(number, body)
            }
            _ if body == "COMMIT" => self.commit(number),
            _ => self.unparsed(number, text, "not an iptables-save or iptables -S line"),
        }
    }

    /// `-P CHAIN POLICY` (`iptables -S`): a run of these opens a listing of one table.
    fn policy(&mut self, number: u32, text: &str) {
        let Some(chain) = text[3..].split_ascii_whitespace().next() else {
            self.unparsed(number, text, "policy without a chain");
            return;
        };
        if self.table.is_some() && self.listing.is_none() {
            // `-P` lines inside a `*table` block: the table is already known.
            return;
        }
        let listing = match &mut self.listing {
            Some(l) if l.table.is_none() => l,
            _ => {
                self.end_listing();
                self.listing.insert(Listing::default())
            }
        };
        listing.builtins.push(chain.to_string());
    }

    /// The first line after a run of `-P` lines: the run names its table.
    fn end_policies(&mut self) {
        let Some(listing) = &mut self.listing else { return };
        if listing.table.is_some() {
            return;
        }
        let table = listing.table();
        listing.table = Some(table);
        self.table = table;
        self.note_table(table);
    }

    /// A listing ends where the next begins, or with the dump: it needs no COMMIT.
    fn end_listing(&mut self) {
        if self.listing.take().is_some() {
            self.table = None;
        }
    }

    fn note_table(&mut self, table: Option<TableKind>) {
        match table {
            Some(TableKind::Nat) => self.saw_nat = true,
            Some(TableKind::Filter) => self.saw_filter = true,
            _ => {}
        }
    }

    /// `-N CHAIN` (`iptables -S`): a chain declaration.
    fn new_chain(&mut self, number: u32, text: &str) {
        let Some(name) = text[3..].split_ascii_whitespace().next() else {
            self.unparsed(number, text, "chain declaration without a name");
            return;
        };
        self.note_chain_name(name);
        if self.table.is_some() {
            self.declare_in_current(name, number);
            return;
        }
        // No table known: declare where the name says, in both for the names nat and
        // filter share.
        self.guessed_lines += 1;
        match guess_table(name, "") {
            TableKind::Filter => {
                self.saw_filter = true;
                self.filter.chain_id(name, number);
            }
            _ if matches!(name, "KUBE-SERVICES" | "KUBE-NODEPORTS" | "OUTPUT") => {
                self.nat.chain_id(name, number);
                self.filter.chain_id(name, number);
            }
            _ => {
                self.saw_nat = true;
                self.nat.chain_id(name, number);
            }
        }
    }

    /// Replacement chains and kube-proxy's own, wherever they are declared.
    fn note_chain_name(&mut self, name: &str) {
        if self.kube_proxy_chain.is_none() && name.starts_with("KUBE-") && !KUBELET_CHAINS.contains(&name) {
            self.kube_proxy_chain = Some(name.to_string());
        }
        if self.replacement.is_none()
            && let Some((_, who)) = REPLACEMENT_CHAINS.iter().find(|(p, _)| name.starts_with(p))
        {
            self.replacement = Some((who, name.to_string()));
        }
    }

    fn declare_in_current(&mut self, name: &str, number: u32) {
        match self.table {
            Some(TableKind::Other) if name.starts_with("KUBE-") => {
                self.other_chains.push(name.into());
            }
            Some(TableKind::Nat) => {
                if IPVS_CHAINS.contains(&name) {
                    self.note_ipvs(format!("chain {name}"));
                }
                self.nat.chain_id(name, number);
            }
            Some(TableKind::Filter) => {
                self.filter.chain_id(name, number);
            }
            Some(TableKind::Other) | None => {}
        }
    }

    fn note_ipvs(&mut self, trace: String) {
        if self.ipvs.len() < 3 && !self.ipvs.contains(&trace) {
            self.ipvs.push(trace);
        }
    }

    fn comment(&mut self, number: u32, text: &str) {
        if let Some(rest) = text.strip_prefix("# Generated by ") {
            if rest.starts_with("ip6tables") {
                self.header_family = Some(Family::Ipv6);
            } else if rest.starts_with("iptables") {
                self.header_family = Some(Family::Ipv4);
            }
            let tool = rest.split_ascii_whitespace().next().unwrap_or("");
            if rest.contains("(nf_tables)") || tool.starts_with("xtables") || tool.contains("-nft-") {
                self.header_backend = Some(Backend::IptablesNft);
                self.header_backend_why = Some(format!("the header names {tool} (nf_tables)"));
            } else if rest.contains("(legacy)") || tool.contains("-legacy-") {
                self.header_backend = Some(Backend::IptablesLegacy);
                self.header_backend_why = Some(format!("the header names {tool} (legacy)"));
            } else if matches!(tool, "iptables-save" | "ip6tables-save") {
                // The nf_tables backend came with iptables 1.8, and its save tools say
                // `(nf_tables)` in this line; the legacy ones never name their backend.
                let version = header_version(rest);
                self.header_backend = Some(Backend::IptablesLegacy);
                self.header_backend_why = Some(match version {
                    Some((major, minor)) if (major, minor) < (1, 8) => format!(
                        "the header names {tool} v{major}.{minor}, which predates the nf_tables backend (1.8)"
                    ),
                    _ => format!(
                        "the header names {tool} without (nf_tables), as only the legacy backend's tools print it"
                    ),
                });
            }
        } else if text.contains("is incompatible, use 'nft' tool") {
            // iptables-nft printing a table another tool wrote: its rules are not shown,
            // so this dump cannot be trusted as complete.
            self.notes
                .push(format!("line {number}: {}", text.trim_start_matches("# ")));
            self.uncommitted = true;
        } else if text.contains("iptables-legacy tables present") {
            self.notes.push(format!(
                "line {number}: the tool says iptables-legacy tables are also present; read them with iptables-legacy-save"
            ));
        }
    }

    fn open_table(&mut self, number: u32, name: &str) {
        self.end_listing();
        if self.table.is_some() {
            self.notes.push(format!(
                "table {} (line {}) has no COMMIT",
                self.table_name, self.table_open_line
            ));
            self.uncommitted = true;
        }
        self.table = Some(match name {
            "nat" => TableKind::Nat,
            "filter" => TableKind::Filter,
            _ => TableKind::Other,
        });
        self.table_name = name.to_string();
        self.table_open_line = number;
        self.note_table(self.table);
    }

    fn commit(&mut self, number: u32) {
        if self.listing.is_some() {
            self.end_listing();
            return;
        }
        // A fragment that starts inside a table ends it with a COMMIT of its own.
        if self.table.take().is_none() && self.guessed_lines == 0 {
            self.unparsed(number, "COMMIT", "COMMIT outside a table");
        }
    }

    fn declare_chain(&mut self, number: u32, text: &str) {
        let rest = &text[1..];
        let name = &rest[..memchr::memchr2(b' ', b'\t', rest.as_bytes()).unwrap_or(rest.len())];
        if name.is_empty() {
            self.unparsed(number, text, "chain declaration without a name");
            return;
        }
        match self.table {
            // A fragment (`iptables-save | grep KUBE`): declared where the name says.
            None => self.new_chain(number, &format!("-N {name}")),
            Some(_) => {
                self.note_chain_name(name);
                self.declare_in_current(name, number)
            }
        }
    }

    fn rule(&mut self, number: u32, text: &str) {
        let after_a = text[3..].trim_start_matches(' ');
        let (chain, spec) = match memchr::memchr2(b' ', b'\t', after_a.as_bytes()) {
            Some(i) => (&after_a[..i], after_a[i + 1..].trim_start_matches(' ')),
            None => (after_a, ""),
        };
        if chain.starts_with("KUBE-") {
            self.kube_rule_count += 1;
        }
        self.note_chain_name(chain);
        let kind = match self.table {
            Some(kind) => kind,
            None => {
                // A rule outside any table (`iptables -S CHAIN`, a fragment): its chain
                // and target say which.
                let target = RuleArgs::read_target(spec).and_then(|a| a.target);
                let kind = guess_table(chain, target.as_deref().unwrap_or(""));
                self.guessed_lines += 1;
                self.note_table(Some(kind));
                kind
            }
        };
        // Only dispatch chains need every argument; elsewhere the target (and a DNAT's
        // destination) is all that matters, read from the end of the line.
        let args = match kind {
            TableKind::Other => return,
            TableKind::Filter if !FILTER_DISPATCH_CHAINS.contains(&chain) => {
                if let Some(target) = RuleArgs::read_target(spec).and_then(|a| a.target) {
                    self.check_jump(TableKind::Filter, &target, number, text);
                }
                return;
            }
            TableKind::Nat if chain != "KUBE-NODEPORTS" && !is_cni_hostport_chain(chain) => {
                RuleArgs::read_target(spec).map_or_else(|| RuleArgs::read(spec), Ok)
            }
            _ => RuleArgs::read(spec),
        };
        let args = match args {
            Ok(a) => a,
            Err(TokenError::UnterminatedQuote) => {
                self.unparsed(number, text, "unterminated quote");
                return;
            }
        };
        if args.dest.as_deref().is_some_and(|d| d.contains(':'))
            || args.to_destination.as_deref().is_some_and(|d| d.starts_with('['))
        {
            self.saw_ipv6_address = true;
        }
        match kind {
            TableKind::Nat => {
                if kube_proxy::chain_hash(chain).is_none() {
                    self.note_ipvs_rule(chain, args.target.as_deref().unwrap_or(""), spec);
                }
                self.nat_rule(number, text, chain, &args)
            }
            TableKind::Filter => {
                if let Some(target) = args.target.as_deref() {
                    self.check_jump(TableKind::Filter, target, number, text);
                }
                self.filter_rule(number, text, chain, &args)
            }
            TableKind::Other => {}
        }
    }

    /// Remembers a jump to a `KUBE-*` chain that `table` has not declared: kube-proxy
    /// never writes one, and iptables itself refuses to load one.
    fn check_jump(&mut self, table: TableKind, target: &str, number: u32, text: &str) {
        if !target.starts_with("KUBE-") {
            return;
        }
        let declared = match table {
            TableKind::Nat => self.nat.declares(target),
            TableKind::Filter => self.filter.declares(target),
            TableKind::Other => return,
        };
        if !declared {
            self.undeclared_jumps.push((
                table,
                target.to_string(),
                RuleText {
                    text: text.into(),
                    line: number,
                },
            ));
        }
    }

    /// What a nat rule outside the per-service chains says of the proxy mode: nat
    /// `KUBE-SERVICES` holds the dispatch of whichever mode synced last, and IPVS mode
    /// matches Service addresses with ipsets.
    fn note_ipvs_rule(&mut self, chain: &str, target: &str, spec: &str) {
        if IPVS_CHAINS.contains(&chain) {
            self.note_ipvs(format!("chain {chain}"));
        }
        let ipset = memchr::memmem::find(spec.as_bytes(), b"--match-set KUBE-").map(|at| {
            spec[at + "--match-set ".len()..]
                .split_ascii_whitespace()
                .next()
                .unwrap_or("")
                .to_string()
        });
        if let Some(set) = &ipset {
            self.note_ipvs(format!("ipset {set}"));
        }
        if chain != "KUBE-SERVICES" {
            return;
        }
        if ipset.is_some() || IPVS_CHAINS.contains(&target) {
            self.services_dispatch.1 += 1;
        } else if target == "KUBE-NODEPORTS"
            || target.starts_with("KUBE-XLB-")
            || kube_proxy::chain_hash(target).is_some()
        {
            self.services_dispatch.0 += 1;
        }
    }

    fn nat_rule(&mut self, number: u32, text: &str, chain: &str, args: &RuleArgs<'_>) {
        // iptables-save prints a chain's rules together: remember the last chain.
        let chain_id = match &self.last_nat_chain {
            Some((name, id)) if **name == *chain => *id,
            _ => {
                let id = self.nat.chain_id(chain, 0);
                self.last_nat_chain = Some((self.nat.chains[id as usize].name.clone(), id));
                id
            }
        };
        let target = args.target.as_deref().unwrap_or("");
        let mut dispatch_target = None;
        if target == "DNAT" {
            let kube_chain = chain.starts_with("KUBE-");
            match args.to_destination.as_deref().map(parse_dnat_destination) {
                Some(Ok((ip, port))) if kube_chain && (ip.is_unspecified() || port == Some(0)) => {
                    self.malformed_rule(
                        "nat",
                        chain,
                        number,
                        text,
                        format!(
                            "DNATs to {}, an address no packet can be sent to",
                            args.to_destination.as_deref().unwrap_or("")
                        ),
                    );
                    return;
                }
                Some(Ok((ip, port))) => {
                    let id = self.dnats.len() as u32;
                    self.dnats.push(Dnat {
                        ip,
                        port,
                        chain: chain_id,
                        rule: RuleText {
                            text: text.into(),
                            line: number,
                        },
                        dport: args.dport.as_deref().and_then(|p| p.parse().ok()),
                    });
                    dispatch_target = Some(DispatchTarget::Dnat(id));
                }
                Some(Err(reason)) => {
                    self.unparsed(number, text, reason);
                    return;
                }
                None if kube_chain => {
                    self.malformed_rule(
                        "nat",
                        chain,
                        number,
                        text,
                        "is a DNAT without a destination (--to-destination)".into(),
                    );
                    return;
                }
                None => {
                    self.unparsed(number, text, "DNAT without --to-destination");
                    return;
                }
            }
        } else if let Some(&target_id) = self.nat.index.get(target) {
            if self.nat.chains[target_id as usize].declared == 0 {
                self.check_jump(TableKind::Nat, target, number, text);
            }
            self.nat.jumps.push((chain_id, target_id));
            self.nat.chains[target_id as usize].referenced = true;
            dispatch_target = Some(DispatchTarget::Chain(target_id));
        } else if target.starts_with("KUBE-") {
            // A jump to a chain the dump never declares: keep it so the path can say so.
            self.check_jump(TableKind::Nat, target, number, text);
            let target_id = self.nat.chain_id(target, 0);
            self.nat.jumps.push((chain_id, target_id));
            self.nat.chains[target_id as usize].referenced = true;
            dispatch_target = Some(DispatchTarget::Chain(target_id));
        }
        if chain == CNI_HOSTPORT_CHAIN {
            if let Some(DispatchTarget::Chain(target_id)) = dispatch_target {
                self.push_hostport(number, text, args, target_id);
            }
            return;
        }
        if chain != "KUBE-NODEPORTS" {
            return;
        }
        // KUBE-MARK-MASQ only marks; the next rule decides (pre-1.24 layout).
        if matches!(target, "KUBE-MARK-MASQ" | "KUBE-MARK-DROP" | "RETURN" | "") {
            return;
        }
        let Some(target) = dispatch_target else {
            self.unparsed(
                number,
                text,
                format!("NodePort rule with an unexpected target {target}"),
            );
            return;
        };
        self.push_dispatch(number, text, "KUBE-NODEPORTS", TableKind::Nat, args, target);
    }

    fn malformed_rule(&mut self, table: &str, chain: &str, number: u32, text: &str, problem: String) {
        self.malformed.push(MalformedRule {
            table: table.to_string(),
            chain: chain.to_string(),
            rule: RuleText {
                text: text.into(),
                line: number,
            },
            problem,
        });
    }

    fn push_hostport(&mut self, number: u32, text: &str, args: &RuleArgs<'_>, chain: u32) {
        let Some(protocol) = args.protocol.as_deref().and_then(Protocol::parse) else {
            return;
        };
        let ports = match (args.dports.as_deref(), args.dport.as_deref()) {
            (Some(list), _) => parse_port_list(list),
            (None, Some(p)) => parse_port_list(p),
            (None, None) => None,
        };
        let Some(ports) = ports else {
            self.unparsed(number, text, "hostPort rule without a readable destination port");
            return;
        };
        self.hostports.push(HostPortEntry {
            protocol,
            ports,
            chain,
            rule: RuleText {
                text: text.into(),
                line: number,
            },
        });
    }

    fn filter_rule(&mut self, number: u32, text: &str, chain: &str, args: &RuleArgs<'_>) {
        let target = args.target.as_deref().unwrap_or("");
        // The iptables proxier's per-Service verdicts (a clusterIP's REJECT for a Service
        // without endpoints, too) show its mode where the nat table is not in the dump.
        if matches!(chain, "KUBE-SERVICES" | "KUBE-EXTERNAL-SERVICES") && matches!(target, "REJECT" | "DROP")
        {
            self.filter_verdicts += 1;
        }
        let (chain_name, verdict) = match (chain, target) {
            ("KUBE-EXTERNAL-SERVICES", "REJECT") if args.dst_type_local => {
                ("KUBE-EXTERNAL-SERVICES", Verdict::Reject)
            }
            ("KUBE-EXTERNAL-SERVICES", "DROP") if args.dst_type_local => {
                ("KUBE-EXTERNAL-SERVICES", Verdict::Drop)
            }
            // Releases before KUBE-EXTERNAL-SERVICES wrote NodePort REJECTs here.
            ("KUBE-SERVICES", "REJECT") if args.dst_type_local => ("KUBE-SERVICES", Verdict::Reject),
            ("KUBE-NODEPORTS", "ACCEPT") => ("KUBE-NODEPORTS", Verdict::HealthCheckAccept),
            _ => return,
        };
        self.push_dispatch(
            number,
            text,
            chain_name,
            TableKind::Filter,
            args,
            DispatchTarget::Verdict(verdict),
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn push_dispatch(
        &mut self,
        number: u32,
        text: &str,
        chain: &'static str,
        table: TableKind,
        args: &RuleArgs<'_>,
        target: DispatchTarget,
    ) {
        let Some(protocol) = args.protocol.as_deref().and_then(Protocol::parse) else {
            self.unparsed(
                number,
                text,
                "NodePort rule without a tcp/udp/sctp protocol match",
            );
            return;
        };
        let Some(port) = args.dport.as_deref().and_then(|p| p.parse::<u16>().ok()) else {
            self.unparsed(number, text, "NodePort rule without a single destination port");
            return;
        };
        let dest = match args.dest.as_deref() {
            None => DestMatch::Any,
            Some(d) if !args.dest_negated && args.nfacct && is_loopback_net(d) => DestMatch::Localhost,
            Some(d) if !args.dest_negated && is_loopback_net(d) => DestMatch::Localhost,
            Some(d) if args.dest_negated => DestMatch::Addr(format!("!{d}")),
            Some(d) => DestMatch::Addr(d.to_string()),
        };
        // A jump to one of kube-proxy's hashed chains names its Service by the hash;
        // its comment is decoded only when a report needs it (`undecoded_comment`),
        // which saves three allocations per rule on a healthy node.
        let hashed = match target {
            DispatchTarget::Chain(id) => kube_proxy::chain_hash(&self.nat.chains[id as usize].name).is_some(),
            _ => false,
        };
        let (comment, undecoded_comment) = if hashed {
            (None, comment_service_span(text, args))
        } else {
            (args.comment.as_deref().and_then(service_of_comment), None)
        };
        self.dispatch.push(Dispatch {
            table,
            chain,
            protocol,
            port,
            dest,
            target,
            comment,
            undecoded_comment,
            rule: RuleText {
                text: text.into(),
                line: number,
            },
        });
    }

    fn finish(mut self) -> RuleSource {
        self.end_policies();
        self.end_listing();
        if let Some(_open) = self.table.take() {
            self.notes.push(format!(
                "table {} (line {}) has no COMMIT: the dump looks truncated",
                self.table_name, self.table_open_line
            ));
            self.uncommitted = true;
        }
        if self.guessed_lines > 0 {
            self.notes.push(format!(
                "{} lines stand outside any table (an `iptables -S` listing without its -P lines, or a fragment): their table was told by their chains, and the dump is not trusted to show what is missing",
                self.guessed_lines
            ));
        }
        let backend = self.decide_backend();
        let family = self
            .hint
            .family
            .or(self.header_family)
            .unwrap_or(if self.saw_ipv6_address {
                Family::Ipv6
            } else {
                Family::Ipv4
            });
        let has_kube_proxy = self.nat.index.contains_key("KUBE-SERVICES")
            || self.nat.index.contains_key("KUBE-NODEPORTS")
            || self.filter.index.contains_key("KUBE-EXTERNAL-SERVICES");
        let has_canary = self.nat.index.contains_key("KUBE-PROXY-CANARY")
            || self.filter.index.contains_key("KUBE-PROXY-CANARY")
            || self.other_chains.iter().any(|c| &**c == "KUBE-PROXY-CANARY");
        // Growth by doubling leaves up to half of each list unused, and the resolution
        // below builds its output next to them, at the read's peak.
        self.dispatch.shrink_to_fit();
        self.dnats.shrink_to_fit();
        self.nat.jumps.shrink_to_fit();
        self.nat.chains.shrink_to_fit();
        let nodeports = resolve_dispatch(&mut self, backend, family);
        let hostports = resolve_hostports(&self);
        let mut orphans: Vec<OrphanChain> = Vec::new();
        let mut orphan_ids = FxHashMap::default();
        for (id, c) in self.nat.chains.iter().enumerate() {
            if c.declared != 0 && !c.referenced && kube_proxy::chain_hash(&c.name).is_some() {
                orphan_ids.insert(id as u32, orphans.len());
                orphans.push(OrphanChain {
                    backend,
                    family,
                    table: "nat".into(),
                    chain: c.name.to_string(),
                    line: c.declared,
                    dnat: None,
                });
            }
        }
        for d in &self.dnats {
            if let (Some(&i), Some(port)) = (orphan_ids.get(&d.chain), d.port) {
                orphans[i].dnat.get_or_insert(SocketAddr::new(d.ip, port));
            }
        }
        let complete = !self.uncommitted && self.unparsed.is_empty() && self.guessed_lines == 0;
        let signals = self.signals();
        let gaps = self.gaps(has_kube_proxy || signals.iptables_mode);
        let mut malformed = std::mem::take(&mut self.malformed);
        // A jump to an undeclared chain is proof only where the dump shows every
        // declaration.
        if complete {
            for (table, target, rule) in std::mem::take(&mut self.undeclared_jumps) {
                let (t, name) = match table {
                    TableKind::Nat => (&self.nat, "nat"),
                    _ => (&self.filter, "filter"),
                };
                if t.declares(&target) {
                    continue;
                }
                let chain = rule_chain(&rule.text).to_string();
                malformed.push(MalformedRule {
                    table: name.to_string(),
                    chain,
                    problem: format!("jumps to {target}, a chain the {name} table does not declare"),
                    rule,
                });
            }
        }
        malformed.sort_by_key(|m| m.rule.line);
        RuleSource {
            origin: self.origin,
            backend,
            family,
            nodeports,
            hostports,
            orphans,
            unparsed: self.unparsed,
            has_kube_proxy,
            has_canary,
            kube_rule_count: self.kube_rule_count,
            complete,
            notes: self.notes,
            signals,
            gaps,
            malformed,
        }
    }

    /// The backend: the caller's, else the header's, and the notes say how it was
    /// decided when the caller did not know.
    fn decide_backend(&mut self) -> Backend {
        if let (Some(h), Some(b)) = (self.hint.backend, self.header_backend)
            && h != b
        {
            self.notes
                .push(format!("the file name says {h} but the dump's header says {b}"));
        }
        if let Some(b) = self.hint.backend {
            return b;
        }
        let (backend, how) = match (self.header_backend, &self.header_backend_why) {
            (Some(b), Some(why)) => (b, format!("backend {b}: {why}")),
            (Some(b), None) => (b, format!("backend {b}: from the dump's header")),
            (None, _) => (
                Backend::IptablesNft,
                "the dump does not say which iptables backend wrote it (no `# Generated by` header naming nf_tables or legacy); reported as iptables-nft".to_string(),
            ),
        };
        self.notes.push(how);
        backend
    }

    fn signals(&self) -> ProxySignals {
        // The iptables proxier's NodePort chains, or its filter verdicts for NodePorts
        // (which a dump of the filter table alone still shows).
        let iptables_mode = self.nat.index.keys().any(|c| {
            &**c == "KUBE-NODEPORTS" || c.starts_with("KUBE-XLB-") || kube_proxy::chain_hash(c).is_some()
        }) || self.filter_verdicts > 0;
        let (iptables, ipvs) = self.services_dispatch;
        let services_dispatch = match (iptables, ipvs) {
            (0, 0) => None,
            (i, v) if v > i => Some(ProxyMode::Ipvs),
            _ => Some(ProxyMode::Iptables),
        };
        ProxySignals {
            iptables_mode,
            services_dispatch,
            ipvs: self.ipvs.clone(),
            replacement: self.replacement.clone(),
            kube_proxy_chain: self.kube_proxy_chain.clone(),
        }
    }

    /// kube-proxy writes to both nat and filter: a dump that holds its chains in one and
    /// leaves the other table out (`iptables-save -t nat`, `iptables -t nat -S`) cannot
    /// show what the other holds.
    fn gaps(&self, has_kube_proxy: bool) -> Vec<String> {
        let mut gaps = Vec::new();
        if !has_kube_proxy {
            return gaps;
        }
        if !self.saw_nat {
            gaps.push(format!(
                "{} holds no nat table, where kube-proxy's NodePort forwarding lives: stale, duplicate and missing forwarding rules were not checked in it",
                self.origin
            ));
        }
        if !self.saw_filter {
            gaps.push(format!(
                "{} holds no filter table: kube-proxy's REJECT and DROP rules for NodePorts (Services without endpoints, Local traffic policy without a local endpoint) were not seen",
                self.origin
            ));
        }
        gaps
    }
}

/// The chain of a rule line (`-A CHAIN ...`).
fn rule_chain(text: &str) -> &str {
    text.strip_prefix("-A ")
        .and_then(|r| r.split_ascii_whitespace().next())
        .unwrap_or("")
}

/// The version in an iptables-save header (`iptables-save v1.6.1 on ...`).
fn header_version(header: &str) -> Option<(u32, u32)> {
    let v = header
        .split_ascii_whitespace()
        .find_map(|w| w.strip_prefix('v'))?;
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// kube-proxy's comments start with the Service port (`ns/svc:port`, then words like
/// `cluster IP` or `has no endpoints`).
fn service_of_comment(comment: &str) -> Option<ServicePortRef> {
    comment.split(' ').next().and_then(ServicePortRef::parse)
}

/// Where in the rule's line the comment's first word (its Service port) is written.
fn comment_service_span(text: &str, args: &RuleArgs<'_>) -> Option<Range<u32>> {
    let word = args.comment.as_deref()?.split(' ').next()?;
    let start = text.len().checked_sub(args.comment_from_end)?;
    Some(u32::try_from(start).ok()?..u32::try_from(start + word.len()).ok()?)
}

fn is_cni_hostport_chain(chain: &str) -> bool {
    chain == CNI_HOSTPORT_CHAIN || chain.starts_with(CNI_DNAT_CHAIN_PREFIX)
}

/// `80`, `80,443`, `30000:30010` (multiport's list and ranges). Ranges wider than the
/// whole NodePort range are not hostPorts and are refused rather than expanded.
fn parse_port_list(list: &str) -> Option<Vec<u16>> {
    let mut ports = Vec::new();
    for part in list.split(',') {
        match part.split_once(':') {
            Some((a, b)) => {
                let (a, b): (u16, u16) = (a.parse().ok()?, b.parse().ok()?);
                if a > b || b - a > 4096 {
                    return None;
                }
                ports.extend(a..=b);
            }
            None => ports.push(part.parse().ok()?),
        }
    }
    Some(ports)
}

fn is_loopback_net(d: &str) -> bool {
    d.starts_with("127.") || d.starts_with("::1/") || d == "::1"
}

/// Parses `--to-destination`: `10.1.2.3:80`, `[fd00::1]:80`, or an address alone.
fn parse_dnat_destination(s: &str) -> Result<(IpAddr, Option<u16>), String> {
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Ok((sa.ip(), Some(sa.port())));
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok((ip, None));
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']'))
        && let Ok(ip) = inner.parse::<IpAddr>()
    {
        return Ok((ip, None));
    }
    Err(format!(
        "DNAT destination {s:?} is not one address and port (ranges are not kube-proxy's)"
    ))
}

/// Each hostPort rule with the DNATs of its `CNI-DN-*` chain that match its port.
fn resolve_hostports(p: &Parser) -> Vec<HostPortRule> {
    let mut out = Vec::new();
    for entry in &p.hostports {
        for &port in &entry.ports {
            let targets = p
                .dnats
                .iter()
                .filter(|d| d.chain == entry.chain && d.dport.is_none_or(|dp| dp == port))
                .map(|d| SocketAddr::new(d.ip, d.port.unwrap_or(port)))
                .collect();
            out.push(HostPortRule {
                protocol: entry.protocol,
                port,
                targets,
                rule: entry.rule.clone(),
            });
        }
    }
    out
}

/// Where one chain leads: computed once per chain that dispatch rules enter, since
/// kube-proxy's localhost twin and the main rule share their `KUBE-EXT-*` chain.
#[derive(Clone)]
struct Reach {
    path: Arc<[Arc<str>]>,
    targets: Arc<[DnatTarget]>,
    external: Arc<[SocketAddr]>,
    dangling: Option<String>,
    hash: Option<Arc<str>>,
}

/// Items grouped by chain, in dump order within each chain (compressed sparse rows).
struct ByChain {
    start: Vec<u32>,
    items: Vec<u32>,
}

impl ByChain {
    fn build(chains: usize, pairs: impl Iterator<Item = (u32, u32)> + Clone) -> ByChain {
        let mut start = vec![0u32; chains + 1];
        for (chain, _) in pairs.clone() {
            start[chain as usize + 1] += 1;
        }
        for i in 0..chains {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut items = vec![0u32; start[chains] as usize];
        for (chain, item) in pairs {
            items[fill[chain as usize] as usize] = item;
            fill[chain as usize] += 1;
        }
        ByChain { start, items }
    }

    fn of(&self, chain: u32) -> &[u32] {
        &self.items[self.start[chain as usize] as usize..self.start[chain as usize + 1] as usize]
    }
}

/// Follows every dispatch rule to the DNATs it reaches.
fn resolve_dispatch(p: &mut Parser, backend: Backend, family: Family) -> Vec<NodePortRule> {
    let nat: Arc<str> = Arc::from("nat");
    let filter: Arc<str> = Arc::from("filter");
    let dispatch_chains: [Arc<str>; 3] = [
        Arc::from("KUBE-NODEPORTS"),
        Arc::from("KUBE-EXTERNAL-SERVICES"),
        Arc::from("KUBE-SERVICES"),
    ];
    let dispatch = std::mem::take(&mut p.dispatch);
    let p = &*p;
    let chains = p.nat.chains.len();
    // Keyed by the chains dispatch rules start at (one per Service port), not a slot for
    // each of a large node's 66,000 chains.
    let mut memo: FxHashMap<u32, Reach> = FxHashMap::default();
    let mut walker = Walker {
        path: Vec::new(),
        targets: Vec::new(),
        seen: vec![0; chains],
        generation: 0,
        stack: Vec::new(),
        jumps: ByChain::build(chains, p.nat.jumps.iter().copied()),
        dnats: ByChain::build(
            chains,
            p.dnats.iter().enumerate().map(|(i, d)| (d.chain, i as u32)),
        ),
    };
    // Most rules reach no target bypassing the cluster chain (externalTrafficPolicy
    // Cluster): they share one empty list.
    let no_targets: Arc<[SocketAddr]> = Arc::new([]);
    let mut out = Vec::with_capacity(dispatch.len());
    for d in dispatch {
        let table = if d.table == TableKind::Nat {
            nat.clone()
        } else {
            filter.clone()
        };
        let chain = dispatch_chains
            .iter()
            .find(|c| ***c == *d.chain)
            .cloned()
            .unwrap_or_else(|| Arc::from(d.chain));
        let mut rule = NodePortRule {
            backend,
            family,
            protocol: d.protocol,
            port: d.port,
            dest: d.dest,
            verdict: Verdict::Forward,
            path: Arc::new([]),
            targets: Arc::new([]),
            external_targets: no_targets.clone(),
            comment_service: d.comment,
            undecoded_comment: d.undecoded_comment,
            chain_hash: None,
            dangling: None,
            identity: RuleIdentity::Iptables {
                table,
                chain,
                rule: d.rule.text.clone(),
            },
            rule: d.rule,
        };
        match d.target {
            DispatchTarget::Verdict(v) => rule.verdict = v,
            DispatchTarget::Dnat(id) => {
                let target = dnat_target(p, &nat, &p.dnats[id as usize], d.port);
                rule.external_targets = Arc::new([target.addr]);
                rule.targets = Arc::new([target]);
            }
            DispatchTarget::Chain(start) => {
                let reach = memo
                    .entry(start)
                    .or_insert_with(|| walker.reach(p, &nat, start, d.port, &no_targets))
                    .clone();
                rule.path = reach.path;
                rule.targets = reach.targets;
                rule.external_targets = reach.external;
                rule.dangling = reach.dangling;
                rule.chain_hash = reach.hash;
            }
        }
        out.push(rule);
    }
    out
}

/// Depth-first walk over nat chains with a generation-stamped visited set, so no set
/// is allocated per walk.
struct Walker {
    path: Vec<Arc<str>>,
    targets: Vec<DnatTarget>,
    seen: Vec<u32>,
    generation: u32,
    stack: Vec<u32>,
    jumps: ByChain,
    dnats: ByChain,
}

impl Walker {
    fn reach(
        &mut self,
        p: &Parser,
        nat: &Arc<str>,
        start: u32,
        node_port: u16,
        no_targets: &Arc<[SocketAddr]>,
    ) -> Reach {
        let external = self.external(p, start, node_port);
        let external = if external.is_empty() {
            no_targets.clone()
        } else {
            external.into()
        };
        self.generation += 1;
        self.stack.clear();
        self.stack.push(start);
        self.seen[start as usize] = self.generation;
        // Scratch buffers reused across walks: each Reach then costs one allocation
        // per shared slice.
        let mut path = std::mem::take(&mut self.path);
        let mut targets = std::mem::take(&mut self.targets);
        let mut dangling = None;
        while let Some(id) = self.stack.pop() {
            let chain = &p.nat.chains[id as usize];
            if chain.declared == 0 && dangling.is_none() {
                dangling = Some(chain.name.to_string());
            }
            if &*chain.name != "KUBE-MARK-MASQ" {
                path.push(chain.name.clone());
            }
            for &dnat in self.dnats.of(id) {
                targets.push(dnat_target(p, nat, &p.dnats[dnat as usize], node_port));
            }
            // Reverse so the first jump in the chain is walked first.
            for &next in self.jumps.of(id).iter().rev() {
                if self.seen[next as usize] != self.generation {
                    self.seen[next as usize] = self.generation;
                    self.stack.push(next);
                }
            }
        }
        let first = &p.nat.chains[start as usize].name;
        let reach = Reach {
            path: path.drain(..).collect(),
            targets: targets.drain(..).collect(),
            external,
            dangling,
            hash: kube_proxy::chain_hash(first).map(Arc::from),
        };
        self.path = path;
        self.targets = targets;
        reach
    }
}

impl Walker {
    /// The DNAT addresses reachable from `start` without entering a `KUBE-SVC-*` chain:
    /// what a client outside the node reaches when kube-proxy's externalTrafficPolicy
    /// Local layout sends only pod and host traffic to the cluster chain.
    fn external(&mut self, p: &Parser, start: u32, node_port: u16) -> Vec<SocketAddr> {
        self.generation += 1;
        self.stack.clear();
        self.stack.push(start);
        self.seen[start as usize] = self.generation;
        let mut out = Vec::new();
        while let Some(id) = self.stack.pop() {
            for &dnat in self.dnats.of(id) {
                let d = &p.dnats[dnat as usize];
                out.push(SocketAddr::new(d.ip, d.port.unwrap_or(node_port)));
            }
            for &next in self.jumps.of(id).iter().rev() {
                if self.seen[next as usize] != self.generation
                    && !p.nat.chains[next as usize].name.starts_with("KUBE-SVC-")
                {
                    self.seen[next as usize] = self.generation;
                    self.stack.push(next);
                }
            }
        }
        out
    }
}

fn dnat_target(p: &Parser, nat: &Arc<str>, d: &Dnat, node_port: u16) -> DnatTarget {
    let chain = &p.nat.chains[d.chain as usize].name;
    DnatTarget {
        addr: SocketAddr::new(d.ip, d.port.unwrap_or(node_port)),
        chain: chain.clone(),
        rule: d.rule.clone(),
        identity: RuleIdentity::Iptables {
            table: nat.clone(),
            chain: chain.clone(),
            rule: d.rule.text.clone(),
        },
    }
}

#[cfg(test)]
mod tests;
