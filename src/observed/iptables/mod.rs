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

mod tokens;

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, BufRead};
use std::net::{IpAddr, SocketAddr};

use crate::kube_proxy;
use crate::model::{
    Backend, DestMatch, DnatTarget, Family, NodePortRule, OrphanChain, Protocol, RuleIdentity, RuleSource,
    RuleText, ServicePortRef, Unparsed, Verdict,
};
use crate::observed::lines::{BoundedLines, excerpt};

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
    name: Box<str>,
    /// Line of the `:CHAIN` declaration; 0 when a rule jumps to a chain never declared.
    declared: u32,
    jumps: Vec<u32>,
    dnats: Vec<u32>,
    referenced: bool,
}

#[derive(Debug, Default)]
struct Table {
    chains: Vec<Chain>,
    index: HashMap<Box<str>, u32>,
}

impl Table {
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
            jumps: Vec::new(),
            dnats: Vec::new(),
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
    spec_at: usize,
}

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
    rule: RuleText,
    spec_at: usize,
}

/// The arguments of one rule that NodePort analysis reads.
#[derive(Debug, Default)]
struct RuleArgs<'a> {
    protocol: Option<Cow<'a, str>>,
    dest: Option<Cow<'a, str>>,
    dest_negated: bool,
    dport: Option<Cow<'a, str>>,
    comment: Option<Cow<'a, str>>,
    target: Option<Cow<'a, str>>,
    to_destination: Option<Cow<'a, str>>,
    dst_type_local: bool,
    nfacct: bool,
}

impl<'a> RuleArgs<'a> {
    fn read(spec: &'a str) -> Result<RuleArgs<'a>, TokenError> {
        let mut args = RuleArgs::default();
        let mut negate = false;
        let mut iter = tokens(spec);
        while let Some(tok) = iter.next() {
            let tok = tok?;
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
                "--comment" => args.comment = value()?,
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
    unparsed: Vec<Unparsed>,
    notes: Vec<String>,
    uncommitted: bool,
    kube_rule_count: usize,
}

impl Parser {
    fn new(origin: &str, hint: SourceHint) -> Parser {
        Parser {
            origin: origin.to_string(),
            hint,
            header_backend: None,
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
            unparsed: Vec::new(),
            notes: Vec::new(),
            uncommitted: false,
            kube_rule_count: 0,
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
        let text = text.trim_end();
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
            Some(b'-') if body.starts_with("-A ") => self.rule(number, body),
            _ if body == "COMMIT" => self.commit(number),
            _ => self.unparsed(number, text, "not an iptables-save line"),
        }
    }

    fn comment(&mut self, number: u32, text: &str) {
        if let Some(rest) = text.strip_prefix("# Generated by ") {
            if rest.starts_with("ip6tables") {
                self.header_family = Some(Family::Ipv6);
            } else if rest.starts_with("iptables") {
                self.header_family = Some(Family::Ipv4);
            }
            if rest.contains("(nf_tables)") {
                self.header_backend = Some(Backend::IptablesNft);
            } else if rest.contains("(legacy)") {
                self.header_backend = Some(Backend::IptablesLegacy);
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
    }

    fn commit(&mut self, number: u32) {
        if self.table.take().is_none() {
            self.unparsed(number, "COMMIT", "COMMIT outside a table");
        }
    }

    fn current_table(&mut self) -> Option<(TableKind, &mut Table)> {
        match self.table? {
            TableKind::Nat => Some((TableKind::Nat, &mut self.nat)),
            TableKind::Filter => Some((TableKind::Filter, &mut self.filter)),
            TableKind::Other => None,
        }
    }

    fn declare_chain(&mut self, number: u32, text: &str) {
        let name = text[1..].split([' ', '\t']).next().unwrap_or("");
        if name.is_empty() {
            self.unparsed(number, text, "chain declaration without a name");
            return;
        }
        match self.table {
            None => self.unparsed(number, text, "chain declared outside a table"),
            Some(TableKind::Other) => {
                if name.starts_with("KUBE-") {
                    self.other_chains.push(name.into());
                }
            }
            Some(_) => {
                if let Some((_, table)) = self.current_table() {
                    table.chain_id(name, number);
                }
            }
        }
    }

    fn rule(&mut self, number: u32, text: &str) {
        let after_a = &text[3..];
        let after_a = after_a.trim_start();
        let (chain, spec) = match after_a.split_once([' ', '\t']) {
            Some((c, s)) => (c, s.trim_start()),
            None => (after_a, ""),
        };
        let spec_at = text.len() - spec.len();
        if self.table.is_none() {
            self.unparsed(number, text, "rule outside a table");
            return;
        }
        if chain.starts_with("KUBE-") {
            self.kube_rule_count += 1;
        }
        let Some((kind, _)) = self.current_table() else {
            return;
        };
        let args = match RuleArgs::read(spec) {
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
            TableKind::Nat => self.nat_rule(number, text, chain, spec_at, &args),
            TableKind::Filter => self.filter_rule(number, text, chain, spec_at, &args),
            TableKind::Other => {}
        }
    }

    fn nat_rule(&mut self, number: u32, text: &str, chain: &str, spec_at: usize, args: &RuleArgs<'_>) {
        let chain_id = self.nat.chain_id(chain, 0);
        let target = args.target.as_deref().unwrap_or("");
        let mut dispatch_target = None;
        if target == "DNAT" {
            match args.to_destination.as_deref().map(parse_dnat_destination) {
                Some(Ok((ip, port))) => {
                    let id = self.dnats.len() as u32;
                    self.dnats.push(Dnat {
                        ip,
                        port,
                        chain: chain_id,
                        rule: RuleText {
                            text: text.to_string(),
                            line: number,
                        },
                        spec_at,
                    });
                    self.nat.chains[chain_id as usize].dnats.push(id);
                    dispatch_target = Some(DispatchTarget::Dnat(id));
                }
                Some(Err(reason)) => {
                    self.unparsed(number, text, reason);
                    return;
                }
                None => {
                    self.unparsed(number, text, "DNAT without --to-destination");
                    return;
                }
            }
        } else if let Some(&target_id) = self.nat.index.get(target) {
            self.nat.chains[chain_id as usize].jumps.push(target_id);
            self.nat.chains[target_id as usize].referenced = true;
            dispatch_target = Some(DispatchTarget::Chain(target_id));
        } else if target.starts_with("KUBE-") {
            // A jump to a chain the dump never declares: keep it so the path can say so.
            let target_id = self.nat.chain_id(target, 0);
            self.nat.chains[chain_id as usize].jumps.push(target_id);
            self.nat.chains[target_id as usize].referenced = true;
            dispatch_target = Some(DispatchTarget::Chain(target_id));
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
        self.push_dispatch(
            number,
            text,
            "KUBE-NODEPORTS",
            TableKind::Nat,
            spec_at,
            args,
            target,
        );
    }

    fn filter_rule(&mut self, number: u32, text: &str, chain: &str, spec_at: usize, args: &RuleArgs<'_>) {
        let target = args.target.as_deref().unwrap_or("");
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
            spec_at,
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
        spec_at: usize,
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
        let comment = args
            .comment
            .as_deref()
            .and_then(|c| c.split(' ').next())
            .and_then(ServicePortRef::parse);
        self.dispatch.push(Dispatch {
            table,
            chain,
            protocol,
            port,
            dest,
            target,
            comment,
            rule: RuleText {
                text: text.to_string(),
                line: number,
            },
            spec_at,
        });
    }

    fn finish(mut self) -> RuleSource {
        if let Some(_open) = self.table.take() {
            self.notes.push(format!(
                "table {} (line {}) has no COMMIT: the dump looks truncated",
                self.table_name, self.table_open_line
            ));
            self.uncommitted = true;
        }
        let backend = self.hint.backend.or(self.header_backend).unwrap_or_else(|| {
            self.notes
                .push("the dump does not say which iptables backend wrote it; assuming iptables-nft".into());
            Backend::IptablesNft
        });
        if let (Some(h), Some(b)) = (self.hint.backend, self.header_backend)
            && h != b
        {
            self.notes
                .push(format!("the file name says {h} but the dump's header says {b}"));
        }
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
        let nodeports = resolve_dispatch(&self, backend, family);
        let orphans = self
            .nat
            .chains
            .iter()
            .filter(|c| c.declared != 0 && !c.referenced && kube_proxy::chain_hash(&c.name).is_some())
            .map(|c| OrphanChain {
                backend,
                family,
                table: "nat".into(),
                chain: c.name.to_string(),
                line: c.declared,
            })
            .collect();
        let complete = !self.uncommitted && self.unparsed.is_empty();
        RuleSource {
            origin: self.origin,
            backend,
            family,
            nodeports,
            orphans,
            unparsed: self.unparsed,
            has_kube_proxy,
            has_canary,
            kube_rule_count: self.kube_rule_count,
            complete,
            notes: self.notes,
        }
    }
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

/// Follows every dispatch rule to the DNATs it reaches.
fn resolve_dispatch(p: &Parser, backend: Backend, family: Family) -> Vec<NodePortRule> {
    let mut seen = vec![0u32; p.nat.chains.len()];
    let mut generation = 0u32;
    let mut stack = Vec::new();
    let mut out = Vec::with_capacity(p.dispatch.len());
    for d in &p.dispatch {
        generation += 1;
        let mut rule = NodePortRule {
            backend,
            family,
            protocol: d.protocol,
            port: d.port,
            dest: d.dest.clone(),
            verdict: Verdict::Forward,
            path: Vec::new(),
            targets: Vec::new(),
            comment_service: d.comment.clone(),
            chain_hash: None,
            dangling: None,
            rule: d.rule.clone(),
            identity: iptables_identity(d.table, d.chain, &d.rule.text, d.spec_at),
        };
        match d.target {
            DispatchTarget::Verdict(v) => rule.verdict = v,
            DispatchTarget::Dnat(id) => rule.targets.push(dnat_target(p, &p.dnats[id as usize], d.port)),
            DispatchTarget::Chain(start) => {
                rule.chain_hash =
                    kube_proxy::chain_hash(&p.nat.chains[start as usize].name).map(str::to_string);
                stack.clear();
                stack.push(start);
                seen[start as usize] = generation;
                while let Some(id) = stack.pop() {
                    let chain = &p.nat.chains[id as usize];
                    if chain.declared == 0 && rule.dangling.is_none() {
                        rule.dangling = Some(chain.name.to_string());
                    }
                    if chain.name.as_ref() != "KUBE-MARK-MASQ" {
                        rule.path.push(chain.name.to_string());
                    }
                    for &dnat in &chain.dnats {
                        rule.targets.push(dnat_target(p, &p.dnats[dnat as usize], d.port));
                    }
                    // Reverse so the first jump in the chain is visited first.
                    for &next in chain.jumps.iter().rev() {
                        if seen[next as usize] != generation {
                            seen[next as usize] = generation;
                            stack.push(next);
                        }
                    }
                }
            }
        }
        out.push(rule);
    }
    out
}

fn dnat_target(p: &Parser, d: &Dnat, node_port: u16) -> DnatTarget {
    let chain = &p.nat.chains[d.chain as usize].name;
    DnatTarget {
        addr: SocketAddr::new(d.ip, d.port.unwrap_or(node_port)),
        chain: chain.to_string(),
        rule: d.rule.clone(),
        identity: iptables_identity(TableKind::Nat, chain, &d.rule.text, d.spec_at),
    }
}

fn iptables_identity(table: TableKind, chain: &str, text: &str, spec_at: usize) -> RuleIdentity {
    RuleIdentity::Iptables {
        table: match table {
            TableKind::Nat => "nat",
            TableKind::Filter => "filter",
            TableKind::Other => "other",
        }
        .to_string(),
        chain: chain.to_string(),
        spec: text.get(spec_at..).unwrap_or("").to_string(),
    }
}

#[cfg(test)]
mod tests;
