//! `iptables-save` text → the whole ruleset repair plans from
//! ([`IptablesRuleset`]): every chain of every table with its rules as printed.

use crate::decode::iptables::tokens::tokens;
use crate::heart::repair::ruleset::{IptRule, IptTable, IptablesRuleset, rule_chain, rule_spec};

impl IptablesRuleset {
    /// Reads an `iptables-save` dump. Never fails: what it cannot read is a problem.
    pub fn parse(text: &str) -> IptablesRuleset {
        let mut out = IptablesRuleset::default();
        let mut open: Option<IptTable> = None;
        for (n, raw) in text.lines().enumerate() {
            let number = n + 1;
            let line = raw.trim_end_matches([' ', '\t', '\r']);
            if line.is_empty() {
                continue;
            }
            if let Some(comment) = line.strip_prefix('#') {
                if comment.contains("is incompatible, use 'nft' tool") {
                    out.problems.push(format!("line {number}: {}", comment.trim()));
                }
                continue;
            }
            if let Some(name) = line.strip_prefix('*') {
                if let Some(t) = open.take() {
                    out.problems.push(format!("table {} has no COMMIT", t.name));
                    out.tables.push(t);
                }
                // iptables-save prints each table once; a second one means a damaged
                // or spliced dump, and a delete planned from one copy could hit a rule
                // the kernel holds only as the other shows it.
                if out.tables.iter().any(|t| t.name == name) {
                    out.problems
                        .push(format!("line {number}: table {name} appears twice"));
                }
                open = Some(IptTable::new(name));
                continue;
            }
            let Some(table) = open.as_mut() else {
                out.problems.push(format!("line {number}: outside a table"));
                continue;
            };
            if line == "COMMIT" {
                out.tables.extend(open.take());
                continue;
            }
            if let Some(decl) = line.strip_prefix(':') {
                let mut words = decl.split(' ');
                let name = words.next().unwrap_or("");
                let policy = words.next().unwrap_or("-");
                if !table.declare_chain(name, policy != "-") {
                    out.problems.push(format!("line {number}: bad chain declaration"));
                }
                continue;
            }
            match read_rule(line) {
                Ok((chain, rule)) => match table.chain_mut(chain) {
                    Some(c) => c.rules.push(rule),
                    None => out
                        .problems
                        .push(format!("line {number}: rule in undeclared chain {chain}")),
                },
                Err(why) => out.problems.push(format!("line {number}: {why}")),
            }
        }
        if let Some(t) = open {
            out.problems
                .push(format!("table {} has no COMMIT: truncated", t.name));
            out.tables.push(t);
        }
        out
    }
}

/// Why a rule line of a dump could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum RuleLineError {
    #[error("not an iptables-save line")]
    NotASaveLine,
    #[error("unterminated quote")]
    UnterminatedQuote,
}

/// Splits `-A CHAIN spec` and finds its `-j`/`-g` target.
fn read_rule(line: &str) -> Result<(&str, IptRule), RuleLineError> {
    let chain = rule_chain(line).ok_or(RuleLineError::NotASaveLine)?;
    let spec = rule_spec(line).unwrap_or("");
    let mut target = None;
    let mut words = tokens(spec);
    while let Some(word) = words.next() {
        let word = word.map_err(|_| RuleLineError::UnterminatedQuote)?;
        if matches!(word.as_ref(), "-j" | "--jump" | "-g" | "--goto") {
            let value = words
                .next()
                .transpose()
                .map_err(|_| RuleLineError::UnterminatedQuote)?;
            target = value.map(|v| v.into_owned());
        }
    }
    Ok((
        chain,
        IptRule {
            line: line.to_string(),
            target,
        },
    ))
}

#[cfg(test)]
mod tests;
