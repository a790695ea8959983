//! The end of a dump: its rules resolved, and what the dump lacks.

use crate::heart::model::{Lookup, RuleDump};

use super::Parser;
use super::walker::{resolve_dispatch, resolve_hostports};

impl Parser {
    pub(super) fn finish(mut self) -> RuleDump {
        self.cursor.close(&mut self.problems);
        let backend = self.header.decide_backend(&self.hint, &mut self.problems);
        let family = self.header.family(&self.hint);
        let has_kube_proxy = self.graph.has_kube_proxy();
        let has_canary = self.graph.has_canary();
        self.graph.shrink();
        let nodeports = resolve_dispatch(&mut self.graph, backend, family);
        let hostports = resolve_hostports(&self.graph);
        let orphans = self.graph.orphans(backend, family);
        let complete = self.complete();
        let signals = self
            .tally
            .signals(&self.graph.nat, self.cursor.seen.filter || self.hint.whole);
        let gaps = self.gaps(has_kube_proxy || signals.iptables_mode);
        let missing_entry = self.tally.missing_entry(self.cursor.seen.nat, &self.graph.nat);
        RuleDump {
            lookup: Lookup::Lines,
            backend,
            family,
            nodeports,
            hostports,
            orphans,
            has_kube_proxy,
            has_canary,
            kube_rule_count: self.tally.kube_rules,
            complete,
            signals,
            gaps,
            malformed: self.problems.take_malformed(),
            forwarding_shown: self.cursor.seen.nat || self.hint.whole,
            missing_entry,
            unparsed: self.problems.unparsed,
            notes: self.problems.notes,
            bad_capture: self.problems.pasted_listing.report(),
            origin: self.origin,
        }
    }

    /// Whether the dump shows its tables whole: nothing unread, no table cut, no line's
    /// table guessed, and no jump to a chain it does not declare (which is proof only
    /// where the dump shows every declaration, so looked for only then).
    fn complete(&mut self) -> bool {
        self.problems.none_hide_rules()
            && self.cursor.guessed_lines == 0
            && !self.problems.settle_undeclared_jumps(&self.graph)
    }

    /// kube-proxy writes to both nat and filter: a dump that holds its chains in one and
    /// leaves the other table out (`iptables-save -t nat`, `iptables -t nat -S`) cannot
    /// show what the other holds. A whole dump lacks only what the node lacks.
    fn gaps(&self, has_kube_proxy: bool) -> Vec<String> {
        let mut gaps = Vec::new();
        if !has_kube_proxy || self.hint.whole {
            return gaps;
        }
        if !self.cursor.seen.nat {
            gaps.push(format!(
                "{} holds no nat table, where kube-proxy's NodePort forwarding lives: stale, duplicate and missing forwarding rules were not checked in it (`iptables -S` lists the filter table alone: capture the node with iptables-save, or add `iptables -t nat -S`)",
                self.origin
            ));
        }
        if !self.cursor.seen.filter {
            gaps.push(format!(
                "{} holds no filter table: kube-proxy's REJECT and DROP rules for NodePorts (Services without endpoints, Local traffic policy without a local endpoint) were not seen",
                self.origin
            ));
        }
        gaps
    }
}
