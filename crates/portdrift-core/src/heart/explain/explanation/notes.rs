//! The explanation's notes: what else the walk noticed that a reader of the path
//! should know (ties between backends, rules about other addresses, a DNAT undone, a
//! process the rules pass over, session affinity, a refused port).

use std::collections::BTreeSet;

use crate::heart::explain::eval::{Branch, End, Remarks, place_of};
use crate::heart::model::Protocol;

use super::{ExplainInput, Outcome, probe_port};

/// Only this many rules about other addresses are named, one for each reason.
const ADDRESS_NOTES: usize = 5;

pub(super) fn notes_of(
    input: &ExplainInput<'_>,
    branches: &[Branch],
    remarks: &Remarks,
    outcome: Outcome,
) -> Vec<String> {
    let mut notes = tie_notes(input, remarks);
    notes.extend(address_notes(input, remarks));
    for note in undone_notes(input, branches) {
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
    notes.extend(passed_listener(input, branches));
    if let Some(seconds) = branches.iter().find_map(|b| b.affinity) {
        notes.push(format!(
            "session affinity: a client keeps the endpoint of its first connection for {seconds} s; the shares are for new clients"
        ));
    }
    if outcome == Outcome::None {
        notes.push(refused(input));
    }
    notes
}

/// Nat chains of two backends at one hook and priority, once per hook and pair of
/// backends however many branches met the tie.
fn tie_notes(input: &ExplainInput<'_>, remarks: &Remarks) -> Vec<String> {
    let rules = input.rules;
    let mut ties = BTreeSet::new();
    let mut notes = Vec::new();
    for (hook, a, b) in &remarks.nat_order_unknown {
        let (a, b) = (&rules.tables[*a], &rules.tables[*b]);
        if !ties.insert((*hook, a.backend, b.backend)) {
            continue;
        }
        notes.push(format!(
            "{} and {} both have nat chains at {} with the same priority: the kernel runs the one registered last in the network namespace first, which no dump shows; this explanation takes {}'s first (the newer backend's tables usually came last, when kube-proxy switched to it)",
            a.backend,
            b.backend,
            hook.as_str(),
            a.backend
        ));
    }
    notes
}

/// Rules skipped only because they name another address of the node: the port goes
/// elsewhere for connections to that address.
fn address_notes(input: &ExplainInput<'_>, remarks: &Remarks) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut notes = Vec::new();
    for (at, why) in &remarks.address_specific {
        if seen.insert(why.clone()) && seen.len() <= ADDRESS_NOTES {
            notes.push(format!(
                "{} also names this port but {why}: explain {}/ADDRESS:{} to follow those",
                place_of(input.rules, *at),
                input.probe.protocol,
                input.probe.port
            ));
        }
    }
    notes
}

/// A filter rule that undoes a nat translation, for each branch it ends.
fn undone_notes(input: &ExplainInput<'_>, branches: &[Branch]) -> Vec<String> {
    branches
        .iter()
        .filter_map(|b| {
            let (End::Dropped(at) | End::Rejected(at), Some(t)) = (&b.end, b.packet.translated) else {
                return None;
            };
            let verdict = if matches!(b.end, End::Dropped(_)) {
                "drop"
            } else {
                "reject"
            };
            Some(format!(
                "the DNAT at {} to {} is undone by {} ({verdict})",
                place_of(input.rules, t.by),
                t.to,
                place_of(input.rules, *at),
            ))
        })
        .collect()
}

/// A process on a port the rules translate: it gets only what they let through.
fn passed_listener(input: &ExplainInput<'_>, branches: &[Branch]) -> Option<String> {
    let translated = branches
        .iter()
        .any(|b| b.packet.translated.is_some_and(|t| !t.redirect));
    if !translated {
        return None;
    }
    let socket = input.listeners.into_iter().flatten().find(|l| {
        l.protocol == input.probe.protocol && l.port == input.probe.port && !l.addr.is_loopback()
    })?;
    let who = input.owners.get(&socket.inode).map_or_else(
        || "a process".to_string(),
        |p| format!("{} (pid {})", p.name, p.pid),
    );
    Some(format!(
        "{who} listens on {} on this node, but the DNAT above takes new connections from outside before they reach it",
        probe_port(&input.probe)
    ))
}

/// Nothing takes the port: what the kernel answers instead.
fn refused(input: &ExplainInput<'_>) -> String {
    format!(
        "no rule takes {} and nothing listens on it: the kernel refuses the connection ({})",
        probe_port(&input.probe),
        match input.probe.protocol {
            Protocol::Udp => "ICMP port unreachable",
            _ => "TCP reset",
        }
    )
}
