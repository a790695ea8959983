use std::collections::BTreeMap;

use super::*;
use crate::decode::netlink::iptables::read_chain;

/// A chain as the kernel's chain dump gives it (a user chain: no hook).
fn chain(name: &str, handle: u64) -> ChainInfo {
    let mut attrs = Vec::new();
    for (kind, value) in [
        (1u16, b"nat\0".to_vec()),
        (3u16, [name.as_bytes(), b"\0"].concat()),
    ] {
        let len = 4 + value.len();
        attrs.extend_from_slice(&(len as u16).to_ne_bytes());
        attrs.extend_from_slice(&kind.to_ne_bytes());
        attrs.extend_from_slice(&value);
        attrs.resize(attrs.len() + (len.next_multiple_of(4) - len), 0);
    }
    attrs.extend_from_slice(&12u16.to_ne_bytes());
    attrs.extend_from_slice(&2u16.to_ne_bytes());
    attrs.extend_from_slice(&handle.to_be_bytes());
    read_chain(&attrs).unwrap().1
}

/// A kernel of chains and their rule text; counts the chains read.
struct Kernel {
    rules: BTreeMap<String, String>,
    handles: BTreeMap<String, u64>,
    reads: usize,
}

impl Kernel {
    fn new(n: usize) -> Kernel {
        let mut kernel = Kernel {
            rules: BTreeMap::new(),
            handles: BTreeMap::new(),
            reads: 0,
        };
        for i in 0..n {
            kernel.add(&format!("KUBE-SEP-{i:05}"), i as u64 + 1);
        }
        kernel
    }

    fn add(&mut self, name: &str, handle: u64) {
        self.rules.insert(
            name.into(),
            format!("-A {name} -j DNAT --to-destination 10.0.0.1:80\n"),
        );
        self.handles.insert(name.into(), handle);
    }

    fn list(&self) -> Vec<ChainInfo> {
        self.handles.iter().map(|(n, h)| chain(n, *h)).collect()
    }

    /// The kept table as a whole read gives it.
    fn whole(&self) -> KeptIptablesTable {
        let mut table = KeptIptablesTable {
            name: "nat",
            chains: Vec::new(),
            blocks: Vec::new(),
        };
        let mut reader = |name: &str, out: &mut String| -> Result<(), NetlinkError> {
            out.push_str(&self.rules[name]);
            Ok(())
        };
        update_table(
            &mut table,
            Some(self.list()),
            &TableChanges::default(),
            &mut reader,
        )
        .unwrap();
        table
    }

    fn update(
        &mut self,
        table: &mut KeptIptablesTable,
        fresh: bool,
        changes: &TableChanges,
    ) -> Result<usize, Stale> {
        let list = fresh.then(|| self.list());
        let rules = &self.rules;
        let reads = &mut self.reads;
        update_table(table, list, changes, &mut |name, out| {
            *reads += 1;
            out.push_str(&rules[name]);
            Ok(())
        })
    }
}

fn text(table: &KeptIptablesTable) -> String {
    let mut family = KeptFamily {
        stamp: Default::default(),
        tables: vec![table.clone()],
    };
    let mut out = String::new();
    family
        .render_lines(Family::Ipv4, &mut |_, l| {
            out.push_str(l);
            out.push('\n');
        })
        .unwrap();
    out
}

#[test]
fn a_changed_chain_reads_its_block_again_and_keeps_the_rest() {
    let mut kernel = Kernel::new(1000);
    let mut table = kernel.whole();
    assert_eq!(table.blocks.len(), 1000usize.div_ceil(BLOCK));
    kernel.rules.insert(
        "KUBE-SEP-00500".into(),
        "-A KUBE-SEP-00500 -j DNAT --to-destination 10.0.0.2:80\n".into(),
    );
    let mut changes = TableChanges::default();
    changes.chains.insert("KUBE-SEP-00500".into());
    let read = kernel.update(&mut table, false, &changes).unwrap();
    assert_eq!(read, BLOCK, "one block read again");
    assert_eq!(text(&table), text(&kernel.whole()));
    assert!(text(&table).contains("10.0.0.2:80"));
}

#[test]
fn chains_added_and_deleted_land_where_a_whole_read_puts_them() {
    let mut kernel = Kernel::new(1000);
    let mut table = kernel.whole();
    kernel.rules.remove("KUBE-SEP-00300");
    kernel.handles.remove("KUBE-SEP-00300");
    for (name, handle) in [("AAA-FIRST", 5000), ("KUBE-SEP-00300X", 5001), ("ZZZ-LAST", 5002)] {
        kernel.add(name, handle);
    }
    let mut changes = TableChanges {
        chain_list: true,
        ..TableChanges::default()
    };
    for name in ["AAA-FIRST", "KUBE-SEP-00300", "KUBE-SEP-00300X", "ZZZ-LAST"] {
        changes.chains.insert(name.into());
    }
    let read = kernel.update(&mut table, true, &changes).unwrap();
    assert!(read <= 3 * BLOCK, "{read} chains read for three changed places");
    assert_eq!(text(&table), text(&kernel.whole()));
    assert_eq!(table.chains.len(), 1002);
}

#[test]
fn a_renamed_chain_or_a_whole_table_change_asks_for_a_whole_read() {
    let mut kernel = Kernel::new(10);
    let mut table = kernel.whole();
    let handle = kernel.handles.remove("KUBE-SEP-00003").unwrap();
    kernel.rules.remove("KUBE-SEP-00003");
    kernel.add("KUBE-SEP-RENAMED", handle);
    let changes = TableChanges {
        chain_list: true,
        ..TableChanges::default()
    };
    assert!(
        matches!(kernel.update(&mut table, true, &changes), Err(Stale::Whole(why)) if why.contains("renamed"))
    );
    let mut table = kernel.whole();
    let whole = TableChanges {
        whole: true,
        ..TableChanges::default()
    };
    assert!(matches!(
        kernel.update(&mut table, false, &whole),
        Err(Stale::Whole(_))
    ));
}

#[test]
fn kept_text_is_smaller_than_the_text() {
    let kernel = Kernel::new(5000);
    let table = kernel.whole();
    let family = KeptFamily {
        stamp: Default::default(),
        tables: vec![table.clone()],
    };
    let plain: usize = kernel.rules.values().map(String::len).sum();
    assert!(
        family.packed_bytes() * 2 < plain,
        "{} packed of {plain}",
        family.packed_bytes()
    );
}
