//! kube-proxy's nftables tables kept between reads by a reader that hears the kernel's
//! change notifications, so that a read after a change re-reads only what they name.
//!
//! Kept per table: its chains in the kernel's order with what of their rules the rule
//! sources are built from, and its named maps ([`KeptTable`]), and the list of sets. A
//! changed chain's rules are read again,
//! with the anonymous maps they use (reused from [`ConstantMaps`] when the same map is
//! kept there, else fetched by key); a changed set re-reads the set list and the named
//! maps that changed; a changed chain list re-reads the chain list. Anything the
//! notifications cannot place reads the tables whole.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::time::Instant;

use rustc_hash::FxHashSet;

use super::{
    FetchCounts, ReadContext, TableMeta, read_both, read_chains, read_elements, read_rules_in_order,
    read_sets,
};
use crate::decode::netlink::changes::TableChanges;
use crate::decode::netlink::nfproto as nfproto_of;
use crate::decode::netlink::nftables::{DecodedRule, RuleContext, SetInfo};
use crate::decode::nftables::{
    KUBE_PROXY_TABLE, KeptMap, KeptTable, ParsedRuleset, RuleGraph, build_rule_dumps, build_sources,
    table_label,
};
use crate::heart::model::{Family, RuleDump, Unparsed};
use crate::sources::netlink::blocks::Readers;
use crate::sources::netlink::follow::{Kept, Named, ReadKind, Stale, Stamp, follow};
use crate::sources::netlink::nftables::ConstantMaps;
use crate::sources::netlink::{Conn, NetlinkError, NetlinkLimits};
use crate::sources::rule_changes::ChangeJournal;

/// kube-proxy's tables as the last read left them.
#[derive(Debug)]
pub struct KeptNft {
    stamp: Stamp,
    /// A whole read's tables as decoded, until the rule sources are built from them.
    fresh: Option<ParsedRuleset<'static>>,
    /// What the rule sources are built from, updated in place by a read after a change.
    kept: Vec<KeptTable>,
    tables: Vec<TableMeta>,
    /// Something could not be decoded: the next read is whole, which reports it again
    /// exactly where a fresh read would.
    undecoded: bool,
}

impl Kept for KeptNft {
    fn stamp(&mut self) -> &mut Stamp {
        &mut self.stamp
    }
}

impl KeptNft {
    /// The heap the kept tables hold, about, with their set lists.
    pub fn kept_bytes(&self) -> usize {
        let sets = self
            .tables
            .iter()
            .flat_map(|t| &t.sets)
            .map(|s| std::mem::size_of::<SetInfo>() + s.name.capacity())
            .sum::<usize>();
        sets + self.kept.iter().map(KeptTable::heap_bytes).sum::<usize>()
    }

    /// The ruleset's generation the tables were read at.
    pub fn generation(&self) -> u32 {
        self.stamp.generation
    }

    /// The chains kept, both tables.
    pub fn chains(&self) -> usize {
        self.kept.iter().map(|t| t.chain_count()).sum()
    }

    /// Gives the maps kept beside the tables the tables' own chain names.
    fn share_map_names(&self, maps: &mut ConstantMaps) {
        for table in &self.kept {
            maps.share_names(nfproto_of(table.family()), |name| table.shared_name(name));
        }
    }

    /// The rule sources, built from the kept tables, which a whole read's are first
    /// reduced to (one that held something it could not decode is built from as read,
    /// and not kept). Built from the kept tables, the sources share their chain names.
    fn sources(&mut self, origin: &str) -> Vec<RuleDump> {
        if let Some(parsed) = self.fresh.take() {
            if self.undecoded {
                return build_rule_dumps(&parsed, origin);
            }
            self.kept = parsed.tables.into_iter().map(KeptTable::from_ir).collect();
        }
        build_sources(&self.kept, &[], origin)
    }
}

const TABLES: [&str; 1] = [KUBE_PROXY_TABLE];

/// [`super::read_tables_netlink_keeping`] for a reader that reads the same node again
/// and again: what it read is kept in `kept`, and when the notifications in `journal`
/// name what changed since, only that is read again. The result is the same as a whole
/// read's; `whole` asks for a whole read (cleared once one completes).
pub fn read_tables_following(
    origin: &str,
    limits: NetlinkLimits,
    journal: &ChangeJournal,
    kept: &mut Option<KeptNft>,
    maps: &mut ConstantMaps,
    whole: &mut bool,
) -> Result<(Vec<RuleDump>, u64, ReadKind), NetlinkError> {
    let deadline = Instant::now() + limits.timeout;
    let mut conn = Conn::open(limits, deadline, None)?;
    let extra_bytes = AtomicU64::new(0);
    let readers = Readers::new(limits, deadline, &extra_bytes, None);
    // Both the update and the whole read keep maps there; one runs at a time.
    let maps = RefCell::new(maps);
    let scopes = [
        (nfproto_of(Family::Ipv4), &TABLES[..]),
        (nfproto_of(Family::Ipv6), &TABLES[..]),
    ];
    let mut followed = follow(
        &mut conn,
        journal,
        &scopes,
        kept,
        whole,
        &mut |conn, state, named| update_tables(conn, readers, state, named, &mut maps.borrow_mut()),
        &mut |conn| {
            let (parsed, tables) = read_both(conn, readers, Some(&mut maps.borrow_mut()))?;
            let undecoded = !parsed.unattributed.is_empty()
                || parsed
                    .tables
                    .iter()
                    .any(|t| !t.unparsed.is_empty() || !t.complete);
            Ok(KeptNft {
                stamp: Stamp::default(),
                fresh: Some(parsed),
                kept: Vec::new(),
                tables,
                undecoded,
            })
        },
    )?;
    let whole_read = followed.state.fresh.is_some();
    let sources = followed.state.sources(origin);
    if whole_read {
        followed.state.share_map_names(&mut maps.borrow_mut());
    }
    let of = followed.state.chains();
    let kind = followed.finish(kept, of);
    Ok((
        sources,
        conn.bytes + extra_bytes.load(AtomicOrdering::Relaxed),
        kind,
    ))
}

/// Brings both kept tables up to date with what the notifications named; the chains
/// read again.
fn update_tables(
    conn: &mut Conn,
    readers: Readers<'_>,
    state: &mut KeptNft,
    named: &Named,
    maps: &mut ConstantMaps,
) -> Result<usize, Stale> {
    if state.undecoded || state.fresh.is_some() {
        return Err(Stale::Whole(
            "the last read held something it could not decode".to_string(),
        ));
    }
    maps.reused = 0;
    maps.fetched = Default::default();
    let mut read = 0;
    for (nfproto, _, changes) in named {
        let Some(family) = [Family::Ipv4, Family::Ipv6]
            .into_iter()
            .find(|f| nfproto_of(*f) == *nfproto)
        else {
            return Err(Stale::Whole(format!("a change in family {nfproto}")));
        };
        let label = table_label(family);
        let created = || Stale::Whole(format!("table {label} was created"));
        let Some(meta) = state.tables.iter_mut().find(|t| t.family == family) else {
            return Err(created());
        };
        if changes.whole || changes.other {
            return Err(Stale::Whole(format!("table {label} changed as a whole")));
        }
        let Some(table) = state.kept.iter_mut().find(|t| t.family() == family) else {
            return Err(created());
        };
        if !changes.sets.is_empty() {
            update_maps(conn, meta, table, changes, maps)?;
        }
        let reread = update_chains(conn, family, table, changes)?;
        read_rules(conn, readers, meta, table, &reread, maps)?;
        table.settle();
        read += reread.len();
    }
    Ok(read)
}

fn undecodable(problems: &[Unparsed]) -> Result<(), Stale> {
    match problems.first() {
        None => Ok(()),
        Some(p) => Err(Stale::Whole(format!(
            "a change could not be decoded: {}",
            p.reason
        ))),
    }
}

/// The set list read again; the named maps that changed, or are new, read again.
fn update_maps(
    conn: &mut Conn,
    meta: &mut TableMeta,
    table: &mut KeptTable,
    changes: &TableChanges,
    maps: &mut ConstantMaps,
) -> Result<(), Stale> {
    let nfproto = nfproto_of(meta.family);
    let (sets, problems) = read_sets(conn, meta.family)?;
    undecodable(&problems)?;
    let mut old: HashMap<String, KeptMap> = table
        .take_maps()
        .into_iter()
        .map(|m| (m.name().to_string(), m))
        .collect();
    let named_maps = sets.iter().filter(|s| s.is_map() && !s.is_anonymous());
    for set in named_maps {
        match old.remove(set.name.as_str()) {
            Some(map) if !changes.sets.contains(set.name.as_str()) => table.push_map(map),
            _ => {
                let (elements, problems) = read_elements(conn, meta.family, set)?;
                undecodable(&problems)?;
                table.push_map_ir(elements.into_map_ir());
            }
        }
    }
    // The maps of rules that are gone are not kept for a later read.
    if let Some(handle) = meta.handle {
        let live: FxHashSet<u64> = sets.iter().filter_map(|s| s.handle).collect();
        maps.maps
            .retain(|&(f, t, s), _| f != nfproto || t != handle || live.contains(&s));
    }
    meta.sets = sets;
    Ok(())
}

/// The chains whose rules are read again (emptied here), by position. On a change of
/// the chain list the list is read again and the kept chains are put in its order.
fn update_chains(
    conn: &mut Conn,
    family: Family,
    table: &mut KeptTable,
    changes: &TableChanges,
) -> Result<Vec<usize>, Stale> {
    let list = if changes.chain_list {
        let (names, problems) = read_chains(conn, family)?;
        undecodable(&problems)?;
        Some(names)
    } else {
        None
    };
    table
        .begin_update(&changes.chains, list)
        .map_err(|e| Stale::Whole(e.to_string()))
}

/// The rules of the chains at `reread`, read as a whole read reads them, with the
/// anonymous maps they use.
fn read_rules(
    conn: &mut Conn,
    readers: Readers<'_>,
    meta: &TableMeta,
    table: &mut KeptTable,
    reread: &[usize],
    maps: &mut ConstantMaps,
) -> Result<(), Stale> {
    if reread.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = reread
        .iter()
        .map(|&at| table.chain_name(at).to_string())
        .collect();
    let sets_by_name: HashMap<&str, &SetInfo> = meta.sets.iter().map(|s| (s.name.as_str(), s)).collect();
    // Every anonymous map waits for a rule that uses it: only the re-read rules' maps
    // are wanted.
    let deferred: HashMap<&str, &SetInfo> = meta
        .sets
        .iter()
        .filter(|s| s.is_map() && s.is_anonymous())
        .map(|s| (s.name.as_str(), s))
        .collect();
    let inline_maps = Mutex::new(HashMap::new());
    let fetched = Mutex::new(Vec::new());
    let counts = FetchCounts::default();
    let context = ReadContext {
        rules: RuleContext {
            family: meta.family,
            sets: &sets_by_name,
            inline_maps: &inline_maps,
        },
        deferred: &deferred,
        reuse: Some(&maps.maps),
        nfproto: nfproto_of(meta.family),
        counts: &counts,
        keep: meta.handle.map(|handle| (handle, &fetched)),
    };
    let mut problem: Option<Unparsed> = None;
    read_rules_in_order(conn, readers, &context, &names, &mut |rule| match rule {
        Ok(DecodedRule {
            chain,
            rule,
            problem: None,
        }) => table.push_rule(reread[chain], rule),
        Ok(DecodedRule { problem: Some(p), .. }) | Err(p) => {
            problem.get_or_insert(p);
        }
    })?;
    undecodable(problem.as_slice())?;
    maps.reused += counts.reused.load(AtomicOrdering::Relaxed);
    let fetches = counts.fetches();
    maps.fetched.by_key += fetches.by_key;
    maps.fetched.dumped += fetches.dumped;
    let mut fetched = fetched.into_inner().unwrap_or_default();
    for (_, entries) in &mut fetched {
        entries.share_names(&|name| table.shared_name(name));
    }
    maps.maps.extend(fetched);
    Ok(())
}
