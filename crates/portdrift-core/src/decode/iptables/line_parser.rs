//! The line parser: tables, chains, policies, comments and rules, one line at a time.

// FxHash: chain names are hashed once per rule line; SipHash's DoS resistance buys
// nothing for a dump read from the local kernel and costs measurably at 240k lines.

use crate::decode::lines::excerpt;
use crate::heart::kube_proxy;
use crate::heart::model::{Backend, Family, RuleText, Unparsed};
use crate::heart::visible::visible_bytes;

use tokens::TokenError;

use super::args::*;
use super::listing::*;
use super::values::*;
use super::*;

impl Parser {
    pub(super) fn new(origin: &str, hint: SourceHint) -> Parser {
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
            builtins_declared: None,
            kube_rule_count: 0,
            listing: None,
            guessed_lines: 0,
            saw_nat: false,
            saw_filter: false,
            services_dispatch: (0, 0),
            prerouting_to_services: false,
            services_to_nodeports: false,
            filter_verdicts: 0,
            ipvs: Vec::new(),
            replacement: None,
            saw_save_line: false,
            list_line: None,
            chain_run: (String::new(), 0),
            handle: None,
            kube_proxy_chain: None,
            malformed: Vec::new(),
            undeclared_jumps: Vec::new(),
        }
    }

    pub(super) fn unparsed(&mut self, line: u32, text: &str, reason: impl Into<String>) {
        self.unparsed.push(Unparsed {
            line,
            text: excerpt(text, EXCERPT),
            reason: reason.into(),
        });
    }

    pub(super) fn line(&mut self, number: u32, bytes: &[u8], truncated: bool) {
        let text = match std::str::from_utf8(bytes) {
            Ok(t) => t,
            Err(_) => {
                // Each stray byte named (`\xff`), where a lossy decoding shows `�`.
                self.unparsed(number, &visible_bytes(bytes), "not UTF-8 text");
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
        // Whether the line is one of the dump's own kinds (a table, chain, rule, COMMIT).
        let save_line = match body.as_bytes().first() {
            None => false,
            Some(b'#') => {
                self.comment(number, body);
                false
            }
            Some(b'*') => {
                self.open_table(number, &body[1..]);
                true
            }
            Some(b':') => {
                self.declare_chain(number, body);
                true
            }
            Some(b'-') if body.starts_with("-A ") => {
                self.end_policies();
                self.rule(number, body);
                true
            }
            Some(b'-') if body.starts_with("-P ") => {
                self.policy(number, body);
                true
            }
            Some(b'-') if body.starts_with("-N ") => {
                self.end_policies();
                self.new_chain(number, body);
                true
            }
            _ if body == "COMMIT" => {
                self.commit(number);
                true
            }
            _ if self.list_line.is_none() && foreign::opens_list(body) => {
                self.list_line = Some((number, body.to_string()));
                false
            }
            _ => {
                self.unparsed(number, text, "not an iptables-save or iptables -S line");
                false
            }
        };
        self.saw_save_line |= save_line;
    }

    /// `-P CHAIN POLICY` (`iptables -S`): a run of these opens a listing of one table.
    pub(super) fn policy(&mut self, number: u32, text: &str) {
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
    pub(super) fn end_policies(&mut self) {
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
    pub(super) fn end_listing(&mut self) {
        if self.listing.take().is_some() {
            self.table = None;
        }
    }

    pub(super) fn note_table(&mut self, table: Option<TableKind>) {
        match table {
            Some(TableKind::Nat) => self.saw_nat = true,
            Some(TableKind::Filter) => self.saw_filter = true,
            _ => {}
        }
    }

    /// `-N CHAIN` (`iptables -S`): a chain declaration.
    pub(super) fn new_chain(&mut self, number: u32, text: &str) {
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
    pub(super) fn note_chain_name(&mut self, name: &str) {
        if self.kube_proxy_chain.is_none() && name.starts_with("KUBE-") && !KUBELET_CHAINS.contains(&name) {
            self.kube_proxy_chain = Some(name.to_string());
        }
        if self.replacement.is_none()
            && let Some((_, who)) = REPLACEMENT_CHAINS.iter().find(|(p, _)| name.starts_with(p))
        {
            self.replacement = Some((who, name.to_string()));
        }
    }

    pub(super) fn declare_in_current(&mut self, name: &str, number: u32) {
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

    pub(super) fn note_ipvs(&mut self, trace: String) {
        if self.ipvs.len() < 3 && !self.ipvs.contains(&trace) {
            self.ipvs.push(trace);
        }
    }

    pub(super) fn comment(&mut self, number: u32, text: &str) {
        if let Some(rest) = text.strip_prefix("# Generated by ") {
            if rest.starts_with("ip6tables") {
                self.header_family = Some(Family::Ipv6);
            } else if rest.starts_with("iptables") {
                self.header_family = Some(Family::Ipv4);
            }
            if let Some((backend, why)) = header_backend(rest) {
                self.header_backend = Some(backend);
                self.header_backend_why = Some(why);
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

    /// The rule on line `number`, with its number in its chain and its handle.
    pub(super) fn rule_text(&self, number: u32, text: &str) -> RuleText {
        RuleText {
            text: text.into(),
            line: number,
            position: self.chain_run.1,
            handle: self.handle,
        }
    }

    pub(super) fn open_table(&mut self, number: u32, name: &str) {
        self.chain_run.1 = 0;
        self.chain_run.0.clear();
        self.end_listing();
        self.end_table_block();
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
        // A live read comes from the tools themselves: a chain they leave out is absent.
        let kube_proxy_table = matches!(self.table, Some(TableKind::Nat | TableKind::Filter));
        self.builtins_declared = (kube_proxy_table && !self.hint.whole).then_some(false);
        self.note_table(self.table);
    }

    pub(super) fn commit(&mut self, number: u32) {
        if self.listing.is_some() {
            self.end_listing();
            return;
        }
        self.end_table_block();
        // A fragment that starts inside a table ends it with a COMMIT of its own.
        if self.table.take().is_none() && self.guessed_lines == 0 {
            self.unparsed(number, "COMMIT", "COMMIT outside a table");
        }
    }

    /// The end of a `*table` block (its COMMIT, the next table, or the dump's end). A
    /// block that declared none of its built-in chains is restore input (what kube-proxy
    /// feeds iptables-restore, and logs), not a save: it holds the chains it changes, not
    /// the table, so nothing is concluded from what it leaves out.
    pub(super) fn end_table_block(&mut self) {
        if self.builtins_declared.take() == Some(false) {
            self.notes.push(format!(
                "table {} (line {}) declares none of its built-in chains (:PREROUTING ACCEPT …), as restore input does, not iptables-save: only part of the table is shown",
                self.table_name, self.table_open_line
            ));
            self.uncommitted = true;
        }
    }

    pub(super) fn declare_chain(&mut self, number: u32, text: &str) {
        let rest = &text[1..];
        let name = &rest[..memchr::memchr2(b' ', b'\t', rest.as_bytes()).unwrap_or(rest.len())];
        // A built-in chain has a policy; a chain of one's own has `-`.
        if self.builtins_declared.is_some()
            && rest[name.len()..]
                .split_ascii_whitespace()
                .next()
                .is_some_and(|p| p != "-")
        {
            self.builtins_declared = Some(true);
        }
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

    pub(super) fn rule(&mut self, number: u32, text: &str) {
        let after_a = text[3..].trim_start_matches(' ');
        let (chain, spec) = match memchr::memchr2(b' ', b'\t', after_a.as_bytes()) {
            Some(i) => (&after_a[..i], after_a[i + 1..].trim_start_matches(' ')),
            None => (after_a, ""),
        };
        if chain.starts_with("KUBE-") {
            self.kube_rule_count += 1;
        }
        if self.chain_run.0 == chain {
            self.chain_run.1 += 1;
        } else {
            self.chain_run.0.clear();
            self.chain_run.0.push_str(chain);
            self.chain_run.1 = 1;
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
                    let target = args.target.as_deref().unwrap_or("");
                    self.note_entry(chain, target);
                    self.note_ipvs_rule(chain, target, spec);
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
    pub(super) fn check_jump(&mut self, table: TableKind, target: &str, number: u32, text: &str) {
        if !target.starts_with("KUBE-") {
            return;
        }
        let declared = match table {
            TableKind::Nat => self.nat.declares(target),
            TableKind::Filter => self.filter.declares(target),
            TableKind::Other => return,
        };
        if !declared {
            self.undeclared_jumps
                .push((table, target.to_string(), self.rule_text(number, text)));
        }
    }

    /// A nat rule on the way in to kube-proxy's NodePort rules.
    pub(super) fn note_entry(&mut self, chain: &str, target: &str) {
        match (chain, target) {
            ("PREROUTING", "KUBE-SERVICES") => self.prerouting_to_services = true,
            ("KUBE-SERVICES", "KUBE-NODEPORTS") => self.services_to_nodeports = true,
            _ => {}
        }
    }

    /// What a nat rule outside the per-service chains says of the proxy mode: nat
    /// `KUBE-SERVICES` holds the dispatch of whichever mode synced last, and IPVS mode
    /// matches Service addresses with ipsets.
    pub(super) fn note_ipvs_rule(&mut self, chain: &str, target: &str, spec: &str) {
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
}

/// The backend the text after `# Generated by ` names, and why: the save tools of the
/// nf_tables backend say `(nf_tables)`; the legacy ones say `(legacy)`, or (before 1.8,
/// and plain `iptables-save` of a legacy build) nothing at all.
pub(crate) fn header_backend(rest: &str) -> Option<(Backend, String)> {
    let tool = rest.split_ascii_whitespace().next().unwrap_or("");
    if rest.contains("(nf_tables)") || tool.starts_with("xtables") || tool.contains("-nft-") {
        Some((
            Backend::IptablesNft,
            format!("the header names {tool} (nf_tables)"),
        ))
    } else if rest.contains("(legacy)") || tool.contains("-legacy-") {
        Some((
            Backend::IptablesLegacy,
            format!("the header names {tool} (legacy)"),
        ))
    } else if matches!(tool, "iptables-save" | "ip6tables-save") {
        // The nf_tables backend came with iptables 1.8, and its save tools say
        // `(nf_tables)` in this line; the legacy ones never name their backend.
        let why = match header_version(rest) {
            Some((major, minor)) if (major, minor) < (1, 8) => format!(
                "the header names {tool} v{major}.{minor}, which predates the nf_tables backend (1.8)"
            ),
            _ => format!(
                "the header names {tool} without (nf_tables), as only the legacy backend's tools print it"
            ),
        };
        Some((Backend::IptablesLegacy, why))
    } else {
        None
    }
}
