use std::borrow::Cow;

use super::*;
use crate::decode::nftables::ir::ParsedRuleset;
use crate::decode::nftables::{build_rule_dumps, build_sources, text};

/// Dumps of kube-proxy's nftables mode: shipped incidents and tables from real nodes.
const DUMPS: [&str; 5] = [
    include_str!("../../../../../../testdata/nftables-stale-element/nft.txt"),
    include_str!("../../../../../../testdata/clean-nftables/nft.txt"),
    include_str!("../../../../../../testdata/local-policy-stale-drop-nftables/nft.txt"),
    include_str!("../../../../../../testdata/nftables-mode-switch/nft.txt"),
    include_str!("../../../../../../testdata/wild/nftables-k3s-latency-aware/nft.txt"),
];

/// A dump decoded, without its chains' and rules' lines (a netlink read has none).
fn decoded(dump: &str) -> ParsedRuleset<'_> {
    let mut parsed = text::parse(dump, "nft.txt").unwrap();
    for table in &mut parsed.tables {
        assert!(
            table.unparsed.is_empty() && table.complete,
            "{:?}",
            table.unparsed
        );
        for chain in &mut table.chains {
            chain.line = 0;
            for rule in &mut chain.rules {
                rule.line = 0;
            }
        }
    }
    assert!(parsed.unattributed.is_empty());
    parsed
}

fn kept(dump: &str) -> Vec<KeptTable> {
    decoded(dump).tables.into_iter().map(KeptTable::from_ir).collect()
}

fn built(tables: &[KeptTable]) -> String {
    format!("{:#?}", build_sources(tables, &[], "nft"))
}

#[test]
fn kept_tables_build_what_their_decoded_form_builds() {
    let mut nodeports = 0;
    for dump in DUMPS {
        let fresh = build_rule_dumps(&decoded(dump), "nft");
        nodeports += fresh.iter().map(|s| s.nodeports.len()).sum::<usize>();
        assert_eq!(built(&kept(dump)), format!("{fresh:#?}"));
    }
    assert!(nodeports > 10, "{nodeports} NodePorts");
}

#[test]
fn sources_built_from_a_kept_table_share_its_chain_names() {
    let tables = kept(DUMPS[0]);
    let sources = build_sources(&tables, &[], "nft");
    let table = &tables[0];
    let mut shared = 0;
    for rule in sources.iter().flat_map(|s| &s.nodeports) {
        let chains = rule.path.iter().chain(rule.targets.iter().map(|t| &t.chain));
        for chain in chains {
            assert!(
                Arc::ptr_eq(chain, &table.shared_name(chain).unwrap()),
                "{chain} copied"
            );
            shared += 1;
        }
    }
    assert!(shared > 10, "{shared} chain names");
}

/// `before` brought up to `after` as a following read does: the chain list again,
/// the chains whose rules differ read again, the maps read again.
fn update(before: &mut KeptTable, after: &str) {
    let after = decoded(after).tables.remove(0);
    let changed: Vec<&str> = after
        .chains
        .iter()
        .filter(|c| {
            let Some(at) = before.find_chain(&c.name) else {
                return true;
            };
            let jumps: Vec<&str> = c.rules.iter().flat_map(|r| &r.jumps).map(|j| &**j).collect();
            let dnats: Vec<(Option<u64>, String)> = c
                .rules
                .iter()
                .filter_map(|r| r.dnat.as_ref().map(|d| (r.handle, d.text.to_string())))
                .collect();
            let held = &before.chains[at];
            let kept_jumps: Vec<&str> = held.jumps.iter().map(|&j| before.names.get(j)).collect();
            let kept_dnats: Vec<(Option<u64>, String)> = held
                .dnats
                .iter()
                .map(|d| (d.handle, d.dnat.text.to_string()))
                .collect();
            jumps != kept_jumps || dnats != kept_dnats || c.rules.len() != held.rules as usize
        })
        .map(|c| &*c.name)
        .collect();
    // The notifications name deleted chains too.
    let names: Vec<String> = after.chains.iter().map(|c| c.name.to_string()).collect();
    let deleted: Vec<String> = (0..before.chain_count())
        .map(|c| before.chain_name(c).to_string())
        .filter(|n| !names.contains(n))
        .collect();
    let reread = before
        .relist(names, |n| changed.contains(&n) || deleted.iter().any(|d| d == n))
        .unwrap();
    assert_eq!(reread.len(), changed.len());
    let mut chains: Vec<_> = after
        .chains
        .into_iter()
        .map(|c| (c.name.to_string(), c.rules))
        .collect();
    for at in reread {
        let name = before.chain_name(at).to_string();
        let (_, rules) = chains.iter_mut().find(|(n, _)| *n == name).unwrap();
        for rule in std::mem::take(rules) {
            before.push_rule(at, rule);
        }
    }
    before.take_maps();
    for map in after.maps {
        before.push_map_ir(map);
    }
    before.settle();
}

#[test]
fn a_table_updated_in_place_builds_what_a_fresh_read_builds() {
    let before = DUMPS[0];
    let added = "\tchain endpoint-NEWCHAIN-shop/web/tcp/http__10.244.5.16/8080 {\n\t\tip saddr 10.244.5.16 jump mark-for-masquerade\n\t\tmeta l4proto tcp dnat to 10.244.5.16:8080\n\t}\n";
    let after = before
        // A DNAT moved, a jump now to a chain that is new, and that chain.
        .replace("dnat to 10.244.3.9:8080", "dnat to 10.244.3.99:8080")
        .replace(
            "2 : goto endpoint-PAPXD4TK-shop/web/tcp/http__10.244.5.15/8080 }",
            "2 : goto endpoint-NEWCHAIN-shop/web/tcp/http__10.244.5.16/8080 }",
        )
        .replacen("\tchain services {", &format!("{added}\tchain services {{"), 1)
        // A NodePort gone.
        .replace(
            "tcp . 30555 : goto external-Z2EY7B6M-reports/exporter/tcp/http,\n\t\t\t     ",
            "",
        );
    assert_ne!(before, after);
    let fresh = format!("{:#?}", build_rule_dumps(&decoded(&after), "nft"));
    assert!(
        fresh.contains("10.244.3.99:8080") && fresh.contains("10.244.5.16:8080") && !fresh.contains("30555")
    );
    // The chain nothing jumps to any more is an orphan.
    assert!(fresh.contains("chain: \"endpoint-PAPXD4TK-shop/web/tcp/http__10.244.5.15/8080\""));
    assert_ne!(built(&kept(before)), fresh);
    there_and_back(before, &after, &fresh);
}

/// The kept `before`, updated in place to `after`, builds `fresh` (a fresh read of
/// `after`); and updated back, builds what a fresh read of `before` builds.
fn there_and_back(before: &str, after: &str, fresh: &str) {
    let mut tables = kept(before);
    update(&mut tables[0], after);
    assert_eq!(built(&tables), fresh);
    update(&mut tables[0], before);
    assert_eq!(
        built(&tables),
        format!("{:#?}", build_rule_dumps(&decoded(before), "nft"))
    );
}

#[test]
fn the_nodeport_dispatch_gone_and_back_is_seen_in_place() {
    // kube-proxy's `services` rule that looks NodePorts up: gone, every NodePort rule is
    // unreached; the kept table, updated in place, must say so as a fresh read does.
    let before = DUMPS[0];
    let rule = "\t\tip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports\n";
    assert!(before.contains(rule));
    let after = before.replace(rule, "");
    let fresh = format!("{:#?}", build_rule_dumps(&decoded(&after), "nft"));
    assert!(
        fresh.contains("vmap @service-nodeports` (in chain services)"),
        "{fresh}"
    );
    assert!(!built(&kept(before)).contains("vmap @service-nodeports` (in chain services)"));
    there_and_back(before, &after, &fresh);
}

#[test]
fn a_chain_that_leaves_the_list_unnamed_was_renamed() {
    let mut tables = kept(DUMPS[0]);
    let table = &mut tables[0];
    let mut names: Vec<String> = (0..table.chain_count())
        .map(|c| table.chain_name(c).to_string())
        .collect();
    let gone = names.remove(3);
    assert_eq!(
        table.relist(names.clone(), |_| false),
        Err(Unlisted(gone.clone()))
    );
    // Named as changed (deleted), it may go.
    let reread = table.relist(names, |n| n == gone).unwrap();
    assert!(reread.is_empty());
    assert_eq!(table.find_chain(&gone), None);
}

#[test]
fn an_update_empties_the_chains_it_names_and_refuses_one_not_kept() {
    let mut tables = kept(DUMPS[0]);
    let table = &mut tables[0];
    let (first, third) = (table.chain_name(0).to_string(), table.chain_name(2).to_string());
    let changed: FxHashSet<Box<str>> = [third.as_str().into(), first.as_str().into()]
        .into_iter()
        .collect();
    assert_eq!(table.begin_update(&changed, None), Ok(vec![0, 2]));
    table.settle();
    let unknown: FxHashSet<Box<str>> = ["no-such-chain".into()].into_iter().collect();
    assert_eq!(
        table.begin_update(&unknown, None),
        Err(UpdateError::NotKept("no-such-chain".into()))
    );
    // With a new chain list, the list decides (see relist).
    let mut names: Vec<String> = (0..table.chain_count())
        .map(|c| table.chain_name(c).to_string())
        .collect();
    let gone = names.remove(3);
    assert_eq!(
        table
            .begin_update(&FxHashSet::default(), Some(names))
            .map_err(|e| e.to_string()),
        Err(format!("chain {gone} left the list unannounced (renamed)"))
    );
}

#[test]
fn names_nothing_uses_are_dropped_as_chains_come_and_go() {
    let dump = DUMPS[0];
    let mut tables = kept(dump);
    let fresh = built(&tables);
    let table = &mut tables[0];
    let names: Vec<String> = (0..table.chain_count())
        .map(|c| table.chain_name(c).to_string())
        .collect();
    for round in 0..2000 {
        let churned = format!("endpoint-ROUND{round}-ns/gone/tcp/http__10.9.0.1/80");
        let mut with = names.clone();
        with.push(churned.clone());
        let reread = table.relist(with, |_| false).unwrap();
        table.push_rule(
            reread[0],
            RuleIr {
                jumps: vec![Cow::Owned(format!("endpoint-TARGET{round}"))],
                ..Default::default()
            },
        );
        table.relist(names.clone(), |n| n == churned).unwrap();
        table.settle();
        assert!(
            table.names.len() <= 2 * table.chain_count() + 1024 + 2,
            "{}",
            table.names.len()
        );
    }
    assert_eq!(built(&tables), fresh);
}

#[test]
fn names_come_back_as_interned_and_are_shared_not_copied() {
    let mut names = Names::default();
    let all: Vec<String> = (0..5000)
        .map(|i| {
            format!(
                "endpoint-{i:08}-ns/svc/tcp/http__10.0.{}.{}/8080",
                i / 256,
                i % 256
            )
        })
        .chain(["x".repeat(1 << 17), String::new(), "é/ü".to_string()])
        .collect();
    let ids: Vec<NameId> = all.iter().map(|n| names.intern(n)).collect();
    for (name, &id) in all.iter().zip(&ids) {
        assert_eq!(names.get(id), name);
        assert_eq!(names.find(name), Some(id));
        assert_eq!(names.intern(name), id, "interned once");
    }
    assert_eq!(names.len(), all.len());
    assert_eq!(names.find("endpoint-99999999"), None);
    // An Arc interned as it is is held, not copied; one already there wins.
    let given: Arc<str> = Arc::from("chain-given");
    let id = names.intern_shared(&given);
    assert!(Arc::ptr_eq(names.shared(id), &given));
    let again: Arc<str> = Arc::from("chain-given");
    assert_eq!(names.intern_shared(&again), id);
    assert!(Arc::ptr_eq(names.shared(id), &given));
}
