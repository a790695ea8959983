//! The first half of a read of one family's table: its chain list and the elements of
//! the maps its rules' readers do not fetch, read at once over several sockets (rules
//! refer to the inline maps), then put in the table in order.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::Ordering as AtomicOrdering;

use super::maps::{MapReuse, may_read_by_key, read_elements};
use super::{FamilyRead, read_chains};
use crate::decode::netlink::nftables::{MapElements, MapEntries, SetInfo};
use crate::decode::nftables::TableIr;
use crate::heart::model::{Family, Unparsed};
use crate::sources::netlink::blocks::{Held, ReadPlan, read_in_order};
use crate::sources::netlink::{Conn, NetlinkError};

/// One dump of the first half of a read: the table's chains, or one map's elements.
enum Fetch<'s> {
    Chains,
    Elements(&'s SetInfo),
}

/// What a [`Fetch`] gave, with what in it could not be read.
#[derive(Default)]
enum Fetched<'s> {
    #[default]
    Nothing,
    Chains(Vec<String>, Vec<Unparsed>),
    Elements(MapElements<'s>, Vec<Unparsed>),
}

impl Held for Fetched<'_> {}

/// The first half of a table's read: its chain list and the maps that are not left to
/// their rules' readers.
pub(super) struct FirstHalf<'s> {
    /// The dumps to make: the chains, and each map dumped whole.
    fetches: Vec<Fetch<'s>>,
    /// The maps read key by key, by their rules' readers.
    pub(super) deferred: HashMap<&'s str, &'s SetInfo>,
    /// The anonymous maps' entries by name: kept from earlier reads, then dumped.
    pub(super) inline_maps: HashMap<String, MapEntries>,
}

impl<'s> FirstHalf<'s> {
    /// Constant maps read before are taken as they were; those that may be read key by
    /// key wait for their rules (which give the keys); the rest are dumped now.
    pub(super) fn plan(
        at: &FamilyRead<'_>,
        sets: &'s [SetInfo],
        mut reuse: Option<&mut MapReuse<'_>>,
    ) -> Self {
        let mut first = FirstHalf {
            fetches: vec![Fetch::Chains],
            deferred: HashMap::new(),
            inline_maps: HashMap::new(),
        };
        for set in sets.iter().filter(|s| s.is_map()) {
            let kept = at
                .constant_key(set)
                .and_then(|key| Some((key, reuse.as_deref()?.previous.get(&key)?)));
            match (kept, reuse.as_deref_mut()) {
                (Some((key, kept)), Some(reuse)) => {
                    first.inline_maps.insert(set.name.clone(), kept.entries(set));
                    reuse.next.insert(key, kept.clone());
                    reuse.reused += 1;
                }
                _ if may_read_by_key(set) => {
                    first.deferred.insert(set.name.as_str(), set);
                }
                _ => {
                    at.counts.dumped.fetch_add(1, AtomicOrdering::Relaxed);
                    first.fetches.push(Fetch::Elements(set));
                }
            }
        }
        first
    }

    /// Makes the fetches over the readers, adding what they give to `table` in order;
    /// returns the table's chains.
    pub(super) fn read(
        &mut self,
        conn: &mut Conn,
        at: &FamilyRead<'_>,
        table: &mut TableIr<'static>,
        mut reuse: Option<&mut MapReuse<'_>>,
    ) -> Result<Vec<String>, NetlinkError> {
        // Elements are small and all kept: no bound on how far the readers run ahead.
        let everything = ReadPlan {
            block: 1,
            lookahead: usize::MAX,
            budget: usize::MAX,
        };
        let family = at.family;
        let mut chains = Vec::new();
        read_in_order(
            conn,
            at.readers,
            &self.fetches,
            everything,
            &|conn, fetch: &Fetch<'_>, out: &mut Fetched<'_>| {
                *out = fetch_one(conn, family, fetch)?;
                Ok(())
            },
            &mut |out: &mut Fetched<'_>| {
                match std::mem::take(out) {
                    Fetched::Chains(names, problems) => {
                        table.unparsed.extend(problems);
                        add_chains(table, &names);
                        chains = names;
                    }
                    // In key order already (read_elements).
                    Fetched::Elements(elements, problems) => {
                        table.unparsed.extend(problems);
                        let reuse = reuse.as_deref_mut();
                        add_elements(at, table, &mut self.inline_maps, elements, reuse);
                    }
                    Fetched::Nothing => {}
                }
                Ok(())
            },
        )?;
        Ok(chains)
    }
}

/// One dump of the first half.
fn fetch_one<'s>(conn: &mut Conn, family: Family, fetch: &Fetch<'s>) -> Result<Fetched<'s>, NetlinkError> {
    Ok(match *fetch {
        Fetch::Chains => {
            let (names, problems) = read_chains(conn, family)?;
            Fetched::Chains(names, problems)
        }
        Fetch::Elements(set) => {
            let (elements, problems) = read_elements(conn, family, set)?;
            Fetched::Elements(elements, problems)
        }
    })
}

/// The table's chains, empty, in the kernel's order.
fn add_chains(table: &mut TableIr<'static>, names: &[String]) {
    table.reserve_chains(names.len());
    for chain in names {
        table.chain_mut(Cow::Owned(chain.clone()), 0);
    }
}

/// A map's elements: an anonymous map's are its rule's, to take when it is decoded (and
/// kept for the next read when the map is constant); a named map's are the table's.
fn add_elements(
    at: &FamilyRead<'_>,
    table: &mut TableIr<'static>,
    inline_maps: &mut HashMap<String, MapEntries>,
    elements: MapElements<'_>,
    reuse: Option<&mut MapReuse<'_>>,
) {
    let set = elements.set();
    if !set.is_anonymous() {
        table.maps.push(elements.into_map_ir());
        return;
    }
    let entries = match (at.constant_key(set), reuse) {
        (Some(key), Some(reuse)) => {
            let (kept, entries) = elements.into_kept();
            reuse.next.insert(key, kept);
            entries
        }
        _ => elements.into_inline(),
    };
    inline_maps.insert(set.name.clone(), entries);
}
