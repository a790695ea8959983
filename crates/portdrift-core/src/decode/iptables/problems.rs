//! What a dump leaves unknown: lines not read, rules kube-proxy never writes, jumps to
//! chains not declared, an `iptables -L` listing pasted in, and the notes that say what
//! is not shown.

use crate::decode::lines::excerpt;
use crate::heart::model::{MalformedRule, RuleText, Unparsed};

use super::TableKind;
use super::foreign::{self, ForeignDump, ForeignKind};
use super::graph::Graph;
use super::values::rule_chain;

/// How much of an unparsed line is kept for the report.
const EXCERPT: usize = 240;

#[derive(Debug, Default)]
pub(super) struct Problems {
    pub(super) unparsed: Vec<Unparsed>,
    pub(super) notes: Vec<String>,
    /// Some table is not shown whole (no COMMIT, or no built-in chain declared).
    uncommitted: bool,
    malformed: Vec<MalformedRule>,
    /// Jumps to `KUBE-*` chains their table had not declared when the rule was read.
    undeclared_jumps: Vec<UndeclaredJump>,
    pub(super) pasted_listing: PastedListing,
}

/// A rule jumping to a `KUBE-*` chain its table had not declared when it was read.
#[derive(Debug)]
struct UndeclaredJump {
    table: TableKind,
    target: String,
    rule: RuleText,
}

/// An `iptables -L` listing in the dump: its first line, and whether lines of the
/// dump's own kinds (a table, chain, rule, COMMIT) came with it.
#[derive(Debug, Default)]
pub(super) struct PastedListing {
    first: Option<ListLine>,
    pub(super) save_lines: bool,
}

#[derive(Debug)]
struct ListLine {
    number: u32,
    text: String,
}

impl PastedListing {
    /// Whether `body` is the first line of the first listing.
    pub(super) fn opens(&self, body: &str) -> bool {
        self.first.is_none() && foreign::opens_list(body)
    }

    pub(super) fn open(&mut self, number: u32, body: &str) {
        self.first = Some(ListLine {
            number,
            text: body.to_string(),
        });
    }

    /// What the capture shows instead of a dump, if a listing was found.
    pub(super) fn report(self) -> Option<String> {
        let first = self.first?;
        let kind = if self.save_lines {
            ForeignKind::MixedListing
        } else {
            ForeignKind::IptablesList
        };
        Some(ForeignDump::new(first.number, &first.text, kind).to_string())
    }
}

impl Problems {
    pub(super) fn unparsed(&mut self, line: u32, text: &str, reason: impl Into<String>) {
        self.unparsed.push(Unparsed {
            line,
            text: excerpt(text, EXCERPT),
            reason: reason.into(),
        });
    }

    pub(super) fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    /// A note saying a table is not shown whole.
    pub(super) fn partial(&mut self, note: String) {
        self.notes.push(note);
        self.uncommitted = true;
    }

    pub(super) fn malformed(&mut self, table: &str, chain: &str, rule: RuleText, problem: String) {
        self.malformed.push(MalformedRule {
            table: table.to_string(),
            chain: chain.to_string(),
            rule,
            problem,
        });
    }

    pub(super) fn undeclared_jump(&mut self, table: TableKind, target: &str, rule: RuleText) {
        self.undeclared_jumps.push(UndeclaredJump {
            table,
            target: target.to_string(),
            rule,
        });
    }

    /// Whether nothing was left unread and every table was shown whole.
    pub(super) fn none_hide_rules(&self) -> bool {
        !self.uncommitted && self.unparsed.is_empty()
    }

    /// Keeps as malformed the jumps to chains that the dump never declared, and says
    /// whether there were any. Called only on a dump that shows every declaration,
    /// where such a jump is proof.
    pub(super) fn settle_undeclared_jumps(&mut self, graph: &Graph) -> bool {
        let mut dangling: Option<(String, usize)> = None;
        for UndeclaredJump { table, target, rule } in std::mem::take(&mut self.undeclared_jumps) {
            let (t, name) = match table {
                TableKind::Nat => (&graph.nat, "nat"),
                _ => (&graph.filter, "filter"),
            };
            if t.declares(&target) {
                continue;
            }
            dangling.get_or_insert_with(|| (target.clone(), 0)).1 += 1;
            let chain = rule_chain(&rule.text).to_string();
            self.malformed.push(MalformedRule {
                table: name.to_string(),
                chain,
                problem: format!("jumps to {target}, a chain the {name} table does not declare"),
                rule,
            });
        }
        let Some((first, count)) = dangling else {
            return false;
        };
        // The kernel refuses a jump to a chain that does not exist and keeps a chain
        // while one leads to it: such a dump is not the kernel's whole picture.
        self.notes.push(format!(
            "{} to chains the dump does not declare (first: {first}), which the kernel never allows: the dump shows part of its tables (a chain cut out of a paste), or was printed by an iptables that does not match the one that wrote the rules (kubernetes#112477)",
            if count == 1 { "1 rule jumps".to_string() } else { format!("{count} rules jump") }
        ));
        true
    }

    /// The malformed rules, in dump order.
    pub(super) fn take_malformed(&mut self) -> Vec<MalformedRule> {
        let mut malformed = std::mem::take(&mut self.malformed);
        malformed.sort_by_key(|m| m.rule.line);
        malformed
    }
}
