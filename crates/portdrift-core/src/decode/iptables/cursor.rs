//! Where the parser is in a dump: the table of the lines being read (a `*table` block,
//! an `iptables -S` listing's run of `-P` lines, or a guess from names), the tables seen,
//! and the place of the rule being read.

use std::num::NonZeroU64;

use super::args::RuleArgs;
use super::listing::{Listing, guess_table};
use super::problems::Problems;
use super::{RuleLine, TableKind};

#[derive(Debug, Default)]
pub(super) struct Cursor {
    /// The table of the lines being read; None outside any.
    pub(super) table: Option<TableKind>,
    block: Block,
    /// In a `*nat` or `*filter` block of a dump read from a file: whether it has
    /// declared one of its built-in chains (`:PREROUTING ACCEPT [0:0]`), as iptables-save
    /// always does and restore input need not. None outside such a block.
    builtins_declared: Option<bool>,
    /// `iptables -S` form: the table a run of `-P` lines named (None: not known).
    listing: Option<Listing>,
    /// Lines read outside any known table: their table was guessed from names.
    pub(super) guessed_lines: u32,
    pub(super) seen: TablesSeen,
    run: ChainRun,
    /// The nf_tables handle of the line being read, when its reader knows it.
    pub(super) handle: Option<NonZeroU64>,
}

/// The `*table` block last opened: its name and the line that opened it.
#[derive(Debug, Default)]
struct Block {
    name: String,
    line: u32,
}

/// The tables the dump holds.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct TablesSeen {
    pub(super) nat: bool,
    pub(super) filter: bool,
}

/// The chain of the last rule read, and that rule's number in it: a save prints each
/// chain's rules together, so counting a run numbers them without a map.
#[derive(Debug, Default)]
struct ChainRun {
    chain: String,
    position: u32,
}

impl Cursor {
    /// `-P CHAIN POLICY` (`iptables -S`): a run of these opens a listing of one table.
    pub(super) fn policy(&mut self, chain: &str) {
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
    fn end_listing(&mut self) {
        if self.listing.take().is_some() {
            self.table = None;
        }
    }

    pub(super) fn note_table(&mut self, table: Option<TableKind>) {
        match table {
            Some(TableKind::Nat) => self.seen.nat = true,
            Some(TableKind::Filter) => self.seen.filter = true,
            _ => {}
        }
    }

    /// `*name`. `whole`: the dump comes from the tools themselves, so a chain they
    /// leave out is absent.
    pub(super) fn open_table(&mut self, number: u32, name: &str, whole: bool, problems: &mut Problems) {
        self.run.position = 0;
        self.run.chain.clear();
        self.end_listing();
        self.end_table_block(problems);
        if self.table.is_some() {
            problems.partial(format!(
                "table {} (line {}) has no COMMIT",
                self.block.name, self.block.line
            ));
        }
        self.table = Some(match name {
            "nat" => TableKind::Nat,
            "filter" => TableKind::Filter,
            _ => TableKind::Other,
        });
        self.block.name.clear();
        self.block.name.push_str(name);
        self.block.line = number;
        let kube_proxy_table = matches!(self.table, Some(TableKind::Nat | TableKind::Filter));
        self.builtins_declared = (kube_proxy_table && !whole).then_some(false);
        self.note_table(self.table);
    }

    pub(super) fn commit(&mut self, number: u32, problems: &mut Problems) {
        if self.listing.is_some() {
            self.end_listing();
            return;
        }
        self.end_table_block(problems);
        // A fragment that starts inside a table ends it with a COMMIT of its own.
        if self.table.take().is_none() && self.guessed_lines == 0 {
            problems.unparsed(number, "COMMIT", "COMMIT outside a table");
        }
    }

    /// The end of a `*table` block (its COMMIT, the next table, or the dump's end). A
    /// block that declared none of its built-in chains is restore input (what kube-proxy
    /// feeds iptables-restore, and logs), not a save: it holds the chains it changes, not
    /// the table, so nothing is concluded from what it leaves out.
    fn end_table_block(&mut self, problems: &mut Problems) {
        if self.builtins_declared.take() == Some(false) {
            problems.partial(format!(
                "table {} (line {}) declares none of its built-in chains (:PREROUTING ACCEPT …), as restore input does, not iptables-save: only part of the table is shown",
                self.block.name, self.block.line
            ));
        }
    }

    /// `:CHAIN POLICY [counters]`, given what follows the name: a built-in chain has a
    /// policy; a chain of one's own has `-`.
    pub(super) fn declaration(&mut self, after_name: &str) {
        if self.builtins_declared.is_some()
            && after_name
                .split_ascii_whitespace()
                .next()
                .is_some_and(|p| p != "-")
        {
            self.builtins_declared = Some(true);
        }
    }

    /// The end of the dump: what is left open is closed, and the notes say what that
    /// leaves unknown.
    pub(super) fn close(&mut self, problems: &mut Problems) {
        self.end_policies();
        self.end_listing();
        self.end_table_block(problems);
        if let Some(_open) = self.table.take() {
            problems.partial(format!(
                "table {} (line {}) has no COMMIT: the dump looks truncated",
                self.block.name, self.block.line
            ));
        }
        if self.guessed_lines > 0 {
            problems.note(format!(
                "{} lines stand outside any table (an `iptables -S` listing without its -P lines, or a fragment): their table was told by their chains, and the dump is not trusted to show what is missing",
                self.guessed_lines
            ));
        }
    }

    /// A rule line in `chain`: the place its citation gives it.
    pub(super) fn rule_line<'a>(&mut self, number: u32, text: &'a str, chain: &'a str) -> RuleLine<'a> {
        if self.run.chain == chain {
            self.run.position += 1;
        } else {
            self.run.chain.clear();
            self.run.chain.push_str(chain);
            self.run.position = 1;
        }
        RuleLine {
            number,
            text,
            chain,
            position: self.run.position,
            handle: self.handle,
        }
    }

    /// The table of a rule in `chain` with arguments `spec`: the current one, else (a
    /// rule outside any table: `iptables -S CHAIN`, a fragment) what its chain and
    /// target say.
    pub(super) fn rule_table(&mut self, chain: &str, spec: &str) -> TableKind {
        if let Some(kind) = self.table {
            return kind;
        }
        let target = RuleArgs::read_target(spec).and_then(|a| a.target);
        let kind = guess_table(chain, target.as_deref().unwrap_or(""));
        self.guessed_lines += 1;
        self.note_table(Some(kind));
        kind
    }
}
