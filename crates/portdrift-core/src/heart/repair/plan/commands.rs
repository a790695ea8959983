//! The exact commands that apply an action: the program, its stdin script, and the
//! lines logs show.

use std::fmt::Write as _;

use super::{Op, RepairAction};
use crate::heart::repair::ruleset::{CANARY_CHAIN, iptables_tools, rule_spec};

impl RepairAction {
    /// The program and arguments that apply this action (its script goes to stdin).
    pub fn program(&self) -> (&'static str, [&'static str; 2]) {
        match self.op {
            Op::IptDeleteRule { .. } | Op::IptDeleteChain { .. } | Op::IptDeleteCanary { .. } => {
                let restore = iptables_tools(self.backend, self.family)
                    .map(|(_, r)| r)
                    .unwrap_or("iptables-nft-restore");
                // --noflush: touch nothing but what the script names; -w: wait for the
                // xtables lock, as kube-proxy does.
                (restore, ["--noflush", "-w"])
            }
            Op::NftDeleteElement { .. } | Op::NftDeleteChain { .. } => ("nft", ["-f", "-"]),
        }
    }

    /// The script the program reads on stdin: one transaction.
    pub fn script(&self) -> String {
        let mut s = String::new();
        match &self.op {
            Op::IptDeleteRule { table, chain, rule } => {
                let _ = writeln!(s, "*{table}");
                let _ = writeln!(s, "-D {chain} {}", rule_spec(rule).unwrap_or(""));
                s.push_str("COMMIT\n");
            }
            Op::IptDeleteChain { table, chain, rules } => {
                let _ = writeln!(s, "*{table}");
                for r in rules {
                    let _ = writeln!(s, "-D {chain} {}", rule_spec(r).unwrap_or(""));
                }
                let _ = writeln!(s, "-X {chain}");
                s.push_str("COMMIT\n");
            }
            Op::IptDeleteCanary { tables } => {
                for t in tables {
                    let _ = writeln!(s, "*{t}\n-X {CANARY_CHAIN}\nCOMMIT");
                }
            }
            Op::NftDeleteElement { table, map, key, .. } => {
                let _ = writeln!(s, "delete element {table} {map} {{ {key} }}");
            }
            Op::NftDeleteChain {
                table,
                chain,
                handles,
            } => {
                for h in handles {
                    // nft 1.0 takes chain names bare (kube-proxy writes them so);
                    // `nft_name_is_safe` keeps them to characters that need no quoting.
                    let _ = writeln!(s, "delete rule {table} {chain} handle {h}");
                }
                let _ = writeln!(s, "delete chain {table} {chain}");
            }
        }
        s
    }

    /// The whole command, as a person would type it.
    pub fn command_line(&self) -> String {
        let (program, args) = self.program();
        format!("{program} {} <<'EOF'\n{}EOF", args.join(" "), self.script())
    }

    /// One line for logs: what goes.
    pub fn describe(&self) -> String {
        let on = format!("{} {}", self.backend, self.family);
        match &self.op {
            Op::IptDeleteRule { table, rule, .. } => format!("delete rule ({on} {table}): {rule}"),
            Op::IptDeleteChain { table, chain, rules } => {
                format!(
                    "delete chain {chain} ({on} {table}) and its {} rules",
                    rules.len()
                )
            }
            Op::IptDeleteCanary { tables } => format!(
                "nudge kube-proxy: delete {CANARY_CHAIN} ({on} {}) so that it resyncs in full",
                tables.join(", ")
            ),
            Op::NftDeleteElement { table, map, text, .. } => {
                format!("delete element of {table} {map}: {text}")
            }
            Op::NftDeleteChain {
                table,
                chain,
                handles,
            } => {
                format!("delete chain {chain} ({table}) and its {} rules", handles.len())
            }
        }
    }

    pub fn is_nudge(&self) -> bool {
        matches!(self.op, Op::IptDeleteCanary { .. })
    }
}
