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

#[test]
fn a_chain_that_fills_datagrams_is_filtered_until_its_changes_are_taken() {
    // Any socket takes a filter; the listener's is a netlink one.
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let journal = ChangeJournal::starting_at(6);
    journal.lock().quiet = Some(Quiet::new(socket.as_fd()).unwrap());
    let filtered = |family: u8, chain: &str| (family, "nat".to_string(), chain.to_string());
    let heat = |family: u8, chain: &str, datagrams: usize| {
        for _ in 0..datagrams {
            journal.note_datagram(&rule(NEWRULE, family, "nat", chain));
        }
    };
    heat(IPV4, "KUBE-NODEPORTS", 7);
    // A datagram of two chains, or one closing a commit, tells of no one chain.
    for _ in 0..10 {
        let mut mixed = rule(NEWRULE, IPV4, "nat", "KUBE-NODEPORTS");
        mixed.extend(rule(NEWRULE, IPV4, "nat", "KUBE-SERVICES"));
        journal.note_datagram(&mixed);
        journal.note_datagram(&commit("KUBE-SERVICES", 7));
    }
    assert_eq!(journal.filtered(), vec![], "not yet 8 datagrams of one chain");
    heat(IPV4, "KUBE-NODEPORTS", 1);
    assert_eq!(journal.filtered(), vec![filtered(IPV4, "KUBE-NODEPORTS")]);
    // Up to four chains at once.
    for chain in [
        "KUBE-SERVICES",
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-POSTROUTING",
        "KUBE-MARK-MASQ",
    ] {
        heat(IPV4, chain, 8);
    }
    heat(10, "KUBE-NODEPORTS", 8);
    assert_eq!(journal.filtered().len(), 4);
    // Taking IPv4's nat lifts its chains' filter, before the reader reads.
    let mut lost_seen = journal.lost();
    journal.take(7, IPV4, &["nat"], &mut lost_seen).unwrap();
    assert_eq!(journal.filtered(), vec![], "every chain filtered was IPv4's nat");
    heat(10, "KUBE-NODEPORTS", 8);
    heat(IPV4, "KUBE-NODEPORTS", 8);
    journal.take(7, IPV4, &["filter"], &mut lost_seen).unwrap();
    assert_eq!(
        journal.filtered(),
        vec![filtered(10, "KUBE-NODEPORTS"), filtered(IPV4, "KUBE-NODEPORTS")],
        "another table's take leaves them"
    );
    journal.take(7, 10, &["nat"], &mut lost_seen).unwrap();
    assert_eq!(journal.filtered(), vec![filtered(IPV4, "KUBE-NODEPORTS")]);
    // A listener that stops lets its socket go: the filter's copy goes too.
    journal.note_stopped();
    assert!(journal.lock().quiet.is_none());
}
