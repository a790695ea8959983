//! Rule lines (`-A CHAIN ...`): each read as far as NodePort analysis needs, and kept in
//! the chain graph as a jump, a DNAT, a dispatch or a hostPort rule.

use crate::heart::kube_proxy;
use crate::heart::model::Verdict;

use super::args::{FILTER_DISPATCH_CHAINS, RuleArgs};
use super::graph::{DispatchChain, DispatchTarget, Refused};
use super::tokens::TokenError;
use super::values::{CNI_HOSTPORT_CHAIN, is_cni_hostport_chain};
use super::{Parser, RuleLine, TableKind};

impl Parser {
    /// `-A CHAIN ARGS`.
    pub(super) fn rule(&mut self, number: u32, text: &str) {
        let (chain, spec) = split_rule(text);
        if chain.starts_with("KUBE-") {
            self.tally.kube_rules += 1;
        }
        let rule = self.cursor.rule_line(number, text, chain);
        self.tally.chain_name(chain);
        let kind = self.cursor.rule_table(chain, spec);
        let Some(args) = self.read_args(kind, &rule, spec) else {
            return;
        };
        self.header.addresses(&args);
        match kind {
            TableKind::Nat => {
                if kube_proxy::chain_hash(chain).is_none() {
                    self.tally
                        .nat_rule(chain, args.target.as_deref().unwrap_or(""), spec);
                }
                self.nat_rule(&rule, &args)
            }
            TableKind::Filter => {
                if let Some(target) = args.target.as_deref() {
                    self.check_jump(TableKind::Filter, target, &rule);
                }
                self.filter_rule(&rule, &args)
            }
            TableKind::Other => {}
        }
    }

    /// The arguments of a rule in a table of `kind`, as far as they are needed: only
    /// dispatch chains need every one; elsewhere the target (and a DNAT's destination)
    /// is all that matters, read from the end of the line. None when nothing more is
    /// needed, or the line cannot be read.
    fn read_args<'a>(&mut self, kind: TableKind, rule: &RuleLine<'_>, spec: &'a str) -> Option<RuleArgs<'a>> {
        let chain = rule.chain;
        let args = match kind {
            TableKind::Other => return None,
            TableKind::Filter if !FILTER_DISPATCH_CHAINS.contains(&chain) => {
                if let Some(target) = RuleArgs::read_target(spec).and_then(|a| a.target) {
                    self.check_jump(TableKind::Filter, &target, rule);
                }
                return None;
            }
            TableKind::Nat if chain != "KUBE-NODEPORTS" && !is_cni_hostport_chain(chain) => {
                RuleArgs::read_target(spec).map_or_else(|| RuleArgs::read(spec), Ok)
            }
            _ => RuleArgs::read(spec),
        };
        match args {
            Ok(a) => Some(a),
            Err(TokenError::UnterminatedQuote) => {
                self.problems
                    .unparsed(rule.number, rule.text, "unterminated quote");
                None
            }
        }
    }

    /// Remembers a jump to a `KUBE-*` chain that `table` has not declared: kube-proxy
    /// never writes one, and iptables itself refuses to load one.
    fn check_jump(&mut self, table: TableKind, target: &str, rule: &RuleLine<'_>) {
        if !target.starts_with("KUBE-") {
            return;
        }
        let Some(declared) = self.graph.table(table).map(|t| t.declares(target)) else {
            return;
        };
        if !declared {
            self.problems.undeclared_jump(table, target, rule.rule_text());
        }
    }

    /// A nat rule: its jump or DNAT kept in the graph, and the hostPort or NodePort
    /// dispatch rule it is, if it is one.
    fn nat_rule(&mut self, rule: &RuleLine<'_>, args: &RuleArgs<'_>) {
        let chain = self.graph.nat_chain(rule.chain);
        let target = args.target.as_deref().unwrap_or("");
        let kept = if target == "DNAT" {
            match self.graph.dnat(chain, rule, args) {
                Ok(id) => Some(DispatchTarget::Dnat(id)),
                Err(refused) => return self.refuse(rule, refused),
            }
        } else {
            self.nat_jump(chain, target, rule).map(DispatchTarget::Chain)
        };
        if rule.chain == CNI_HOSTPORT_CHAIN {
            if let Some(DispatchTarget::Chain(to)) = kept
                && let Err(refused) = self.graph.hostport(rule, args, to)
            {
                self.refuse(rule, refused);
            }
            return;
        }
        // Only KUBE-NODEPORTS dispatches; KUBE-MARK-MASQ only marks, and the next rule
        // decides (pre-1.24 layout).
        if rule.chain != "KUBE-NODEPORTS"
            || matches!(target, "KUBE-MARK-MASQ" | "KUBE-MARK-DROP" | "RETURN" | "")
        {
            return;
        }
        let Some(kept) = kept else {
            let reason = format!("NodePort rule with an unexpected target {target}");
            return self.refuse(rule, Refused::Unreadable(reason));
        };
        if let Err(refused) = self
            .graph
            .dispatch(rule, args, DispatchChain::NAT_NODEPORTS, kept)
        {
            self.refuse(rule, refused);
        }
    }

    /// Keeps a nat rule's jump from chain `from` to `target`, and returns the target's
    /// id: None when the target is not a chain (a built-in target, or another owner's
    /// extension).
    fn nat_jump(&mut self, from: u32, target: &str, rule: &RuleLine<'_>) -> Option<u32> {
        let to = match self.graph.nat.find(target) {
            Some(to) => to,
            // A jump to a chain the dump never declares: keep it so the path can say so.
            None if target.starts_with("KUBE-") => self.graph.nat.chain_id(target, 0),
            None => return None,
        };
        if self.graph.nat.chains[to as usize].declared == 0 {
            self.check_jump(TableKind::Nat, target, rule);
        }
        self.graph.nat.jump(from, to);
        Some(to)
    }

    /// A filter rule in a chain that holds NodePort verdicts.
    fn filter_rule(&mut self, rule: &RuleLine<'_>, args: &RuleArgs<'_>) {
        let target = args.target.as_deref().unwrap_or("");
        self.tally.filter_rule(rule.chain, target);
        let Some((chain, verdict)) = filter_dispatch(rule.chain, target, args) else {
            return;
        };
        let target = DispatchTarget::Verdict(verdict);
        if let Err(refused) = self.graph.dispatch(rule, args, chain, target) {
            self.refuse(rule, refused);
        }
    }

    /// A nat rule not kept, reported for what it is.
    fn refuse(&mut self, rule: &RuleLine<'_>, refused: Refused) {
        match refused {
            Refused::Unreadable(reason) => self.problems.unparsed(rule.number, rule.text, reason),
            Refused::Malformed(problem) => {
                self.problems
                    .malformed("nat", rule.chain, rule.rule_text(), problem)
            }
        }
    }
}

/// The chain and the arguments of a rule line (`-A CHAIN ARGS`).
fn split_rule(text: &str) -> (&str, &str) {
    let after_a = text[3..].trim_start_matches(' ');
    match memchr::memchr2(b' ', b'\t', after_a.as_bytes()) {
        Some(i) => (&after_a[..i], after_a[i + 1..].trim_start_matches(' ')),
        None => (after_a, ""),
    }
}

/// The NodePort verdict a filter rule in `chain` with `target` gives, and the chain the
/// report names it by.
fn filter_dispatch(chain: &str, target: &str, args: &RuleArgs<'_>) -> Option<(DispatchChain, Verdict)> {
    let (name, verdict) = match (chain, target) {
        ("KUBE-EXTERNAL-SERVICES", "REJECT") if args.dst_type_local => {
            ("KUBE-EXTERNAL-SERVICES", Verdict::Reject)
        }
        ("KUBE-EXTERNAL-SERVICES", "DROP") if args.dst_type_local => {
            ("KUBE-EXTERNAL-SERVICES", Verdict::Drop)
        }
        // Releases before KUBE-EXTERNAL-SERVICES wrote NodePort REJECTs here.
        ("KUBE-SERVICES", "REJECT") if args.dst_type_local => ("KUBE-SERVICES", Verdict::Reject),
        ("KUBE-NODEPORTS", "ACCEPT") => ("KUBE-NODEPORTS", Verdict::HealthCheckAccept),
        _ => return None,
    };
    Some((DispatchChain::filter(name), verdict))
}
