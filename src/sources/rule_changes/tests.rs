use std::time::Instant;

use super::*;
use crate::testing::nf_messages::{NEWRULE, new_generation, rule};

const IPV4: u8 = 2;

/// A commit of one rule change in `chain` of ip nat, closed by `generation`.
fn commit(chain: &str, generation: u32) -> Vec<u8> {
    let mut datagram = rule(NEWRULE, IPV4, "nat", chain);
    datagram.extend(new_generation(generation));
    datagram
}

fn chains(taken: &[(String, TableChanges)]) -> Vec<String> {
    let mut names: Vec<String> = taken
        .iter()
        .flat_map(|(_, c)| c.chains.iter().map(|n| n.to_string()))
        .collect();
    names.sort();
    names
}

#[test]
fn changes_are_handed_out_once_the_commit_read_is_heard() {
    let journal = ChangeJournal::starting_at(6);
    journal.note_datagram(&commit("KUBE-NODEPORTS", 7));
    let mut lost_seen = journal.lost();
    let taken = journal.take(7, IPV4, &["nat"], &mut lost_seen).unwrap();
    assert_eq!(chains(&taken), ["KUBE-NODEPORTS"]);
    // Taken once: the next read of the same generation names nothing.
    let again = journal.take(7, IPV4, &["nat"], &mut lost_seen).unwrap();
    assert!(again.is_empty(), "{again:?}");
}

#[test]
fn a_listener_already_past_the_generation_read_does_not_make_the_reader_wait() {
    // The kernel said 7; by the time the reader asks, the listener has heard 8 too.
    let journal = ChangeJournal::starting_at(6);
    journal.note_datagram(&commit("KUBE-NODEPORTS", 7));
    journal.note_datagram(&commit("KUBE-SVC-A", 8));
    let mut lost_seen = journal.lost();
    let asked = Instant::now();
    let taken = journal.take(7, IPV4, &["nat"], &mut lost_seen).unwrap();
    assert!(asked.elapsed() < CATCH_UP / 2, "waited {:?}", asked.elapsed());
    // More than the commit read: it only reads more, and the generation check after
    // the read sends the reader round again.
    assert_eq!(chains(&taken), ["KUBE-NODEPORTS", "KUBE-SVC-A"]);
}

#[test]
fn a_listener_behind_the_kernel_and_a_loss_are_told_apart() {
    let journal = ChangeJournal::starting_at(6);
    let mut lost_seen = journal.lost();
    // The kernel is at 7, the listener has not heard it within the catch-up time.
    assert_eq!(
        journal.take(7, IPV4, &["nat"], &mut lost_seen).unwrap_err(),
        Unnamed::Behind
    );
    journal.note_datagram(&commit("KUBE-NODEPORTS", 7));
    journal.note_lost();
    assert_eq!(
        journal.take(7, IPV4, &["nat"], &mut lost_seen).unwrap_err(),
        Unnamed::Lost
    );
    // The loss is reported once; what follows is named again.
    journal.note_datagram(&commit("KUBE-SVC-B", 8));
    let taken = journal.take(8, IPV4, &["nat"], &mut lost_seen).unwrap();
    assert_eq!(chains(&taken), ["KUBE-SVC-B"]);
}
