use super::*;
use crate::testing::nf_messages::{cstr, message, rule};

#[test]
fn rule_changes_name_their_chain_and_a_commit_its_generation() {
    let mut datagram = rule(NFT_MSG_DELRULE, 2, "nat", "KUBE-NODEPORTS");
    datagram.extend(rule(NFT_MSG_NEWRULE, 2, "nat", "KUBE-NODEPORTS"));
    datagram.extend(rule(NFT_MSG_NEWRULE, 2, "nat", "KUBE-SEP-ABC"));
    datagram.extend(rule(NFT_MSG_NEWRULE, 10, "nat", "KUBE-NODEPORTS"));
    datagram.extend(message(NFT_MSG_NEWGEN, 0, &[(1, &7u32.to_be_bytes())]));
    let mut changes = Changes::default();
    changes.note_datagram(&datagram);
    assert_eq!(changes.generation(), Some(7));
    assert_eq!(changes.unplaced(), 0);
    assert!(changes.any(2, &["nat"]));
    assert!(!changes.any(2, &["filter"]));
    let taken = changes.take(2, &["nat", "filter"]);
    assert_eq!(taken.len(), 1);
    let (table, nat) = &taken[0];
    assert_eq!(table, "nat");
    assert!(!nat.whole && !nat.chain_list);
    let mut chains: Vec<&str> = nat.chains.iter().map(|c| &**c).collect();
    chains.sort();
    assert_eq!(chains, ["KUBE-NODEPORTS", "KUBE-SEP-ABC"]);
    // IPv6's change is left for its own reader, and taken once only.
    assert!(changes.take(2, &["nat"]).is_empty());
    assert_eq!(changes.take(10, &["nat"]).len(), 1);
}

#[test]
fn chains_sets_and_tables_mark_what_must_be_read_again() {
    let mut changes = Changes::default();
    let mut datagram = message(
        NFT_MSG_NEWCHAIN,
        2,
        &[(1, &cstr("nat")), (3, &cstr("KUBE-SEP-NEW"))],
    );
    datagram.extend(message(
        NFT_MSG_NEWSETELEM,
        2,
        &[(1, &cstr("kube-proxy")), (2, &cstr("service-nodeports"))],
    ));
    datagram.extend(message(NFT_MSG_DELTABLE, 2, &[(1, &cstr("mangle"))]));
    datagram.extend(message(NFT_MSG_NEWOBJ, 2, &[(1, &cstr("filter"))]));
    changes.note_datagram(&datagram);
    let nat = changes.take(2, &["nat"]).remove(0).1;
    assert!(nat.chain_list && nat.chains.contains("KUBE-SEP-NEW"));
    let kp = changes.take(2, &["kube-proxy"]).remove(0).1;
    assert!(kp.sets.contains("service-nodeports") && kp.chains.is_empty());
    assert!(changes.take(2, &["mangle"]).remove(0).1.whole);
    assert!(changes.take(2, &["filter"]).remove(0).1.other);
}

#[test]
fn what_cannot_be_placed_is_counted_and_an_unknown_kind_reads_its_table_whole() {
    let mut changes = Changes::default();
    // A rule message without its table, and a message cut short.
    let mut datagram = message(NFT_MSG_NEWRULE, 2, &[(2, &cstr("KUBE-NODEPORTS"))]);
    datagram.extend_from_slice(&[40, 0, 0, 0, 6, 10]);
    changes.note_datagram(&datagram);
    assert_eq!(changes.unplaced(), 2);
    changes.note_datagram(&message(99, 2, &[(1, &cstr("nat"))]));
    assert!(changes.take(2, &["nat"]).remove(0).1.whole);
}

#[test]
fn too_many_changed_chains_read_the_table_whole_and_merging_keeps_both() {
    let mut many = TableChanges::default();
    for i in 0..=MAX_NAMED {
        TableChanges::note_name(&mut many.chains, &mut many.whole, &format!("KUBE-SEP-{i}"));
    }
    assert!(many.whole && many.chains.is_empty());
    let mut a = TableChanges::default();
    a.chains.insert("A".into());
    let mut b = TableChanges {
        chain_list: true,
        ..TableChanges::default()
    };
    b.chains.insert("B".into());
    a.merge(b);
    assert!(a.chain_list && a.chains.len() == 2);
}

#[test]
fn a_datagram_of_one_chains_rules_names_that_chain() {
    let nodeports = || rule(NFT_MSG_NEWRULE, 2, "nat", "KUBE-NODEPORTS");
    let mut changes = Changes::default();
    let mut datagram = nodeports();
    datagram.extend(rule(NFT_MSG_DELRULE, 2, "nat", "KUBE-NODEPORTS"));
    assert_eq!(
        changes.note_datagram(&datagram),
        Some(filter::KnownChain {
            family: 2,
            table: "nat".into(),
            chain: "KUBE-NODEPORTS".into(),
        })
    );
    // Another chain, another family, a commit's generation, or the chain named before
    // the table (an order the filter cannot check): no one chain.
    for other in [
        rule(NFT_MSG_NEWRULE, 2, "nat", "KUBE-SERVICES"),
        rule(NFT_MSG_NEWRULE, 10, "nat", "KUBE-NODEPORTS"),
        message(NFT_MSG_NEWGEN, 0, &[(1, &7u32.to_be_bytes())]),
        message(
            NFT_MSG_NEWRULE,
            2,
            &[(2, &cstr("KUBE-NODEPORTS")), (1, &cstr("nat"))],
        ),
    ] {
        let mut datagram = nodeports();
        datagram.extend(other.clone());
        assert_eq!(changes.note_datagram(&datagram), None, "{other:?}");
    }
    assert_eq!(
        changes.note_datagram(&message(
            NFT_MSG_NEWRULE,
            2,
            &[(2, &cstr("KUBE-NODEPORTS")), (1, &cstr("nat"))]
        )),
        None
    );
}
