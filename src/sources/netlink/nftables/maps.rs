//! The maps of a read: which are reused from the last read ([`ConstantMaps`]), read
//! key by key once their rule gives the keys, or dumped whole.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, PoisonError};

use super::ReadContext;
use crate::decode::netlink::nftables::{DecodedRule, Elements, KeptEntries, MapElements, SetInfo, lookups};
use crate::decode::netlink::request;
use crate::decode::nftables::KUBE_PROXY_TABLE;
use crate::heart::model::{Family, Unparsed};
use crate::sources::netlink::{Conn, NetlinkError};

/// The elements of kube-proxy's anonymous verdict maps, kept from one read to the next
/// by a reader that reads the same node again (the agent).
///
/// Why: much of a large node's read is the kernel finding each of these thousands of
/// maps to dump its elements (docs/performance.md#a-live-scan), yet none of them can
/// have changed since it was last read. A map that is anonymous and constant, bound to
/// its one rule, refuses every element change; a rule change makes a new map with a new
/// handle; and the kernel never hands out a table's or a set's handle twice while the
/// table lives (a table made again gets a new handle too). So a map seen under the
/// same table and set handle has the same elements, and only new maps are dumped.
#[derive(Debug, Clone, Default)]
pub struct ConstantMaps {
    pub(super) maps: HashMap<MapKey, KeptEntries>,
    /// Maps the last read took from here rather than from the kernel.
    pub(super) reused: usize,
    /// How the last read got the maps it did not reuse.
    pub(super) fetched: MapFetches,
}

impl ConstantMaps {
    /// [`KeptEntries::share_names`] for every map of family `nfproto`.
    pub(super) fn share_names(&mut self, nfproto: u8, shared: impl Fn(&str) -> Option<Arc<str>>) {
        for (_, entries) in self.maps.iter_mut().filter(|((f, _, _), _)| *f == nfproto) {
            entries.share_names(&shared);
        }
    }

    /// Maps the last read reused instead of dumping them.
    pub fn reused(&self) -> usize {
        self.reused
    }

    /// How the last read got the maps it did not reuse.
    pub fn fetched(&self) -> MapFetches {
        self.fetched
    }
}

/// How many maps a read asked the kernel for element by element, and how many it
/// dumped whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MapFetches {
    pub by_key: usize,
    pub dumped: usize,
}

/// Counts for [`MapFetches`], shared by the readers.
#[derive(Default)]
pub(super) struct FetchCounts {
    pub(super) by_key: AtomicUsize,
    pub(super) dumped: AtomicUsize,
    /// Maps a rule's reader took from [`ConstantMaps`] (a following read).
    pub(super) reused: AtomicUsize,
}

impl FetchCounts {
    pub(super) fn fetches(&self) -> MapFetches {
        MapFetches {
            by_key: self.by_key.load(AtomicOrdering::Relaxed),
            dumped: self.dumped.load(AtomicOrdering::Relaxed),
        }
    }
}

/// A map by family, table handle and set handle.
pub(super) type MapKey = (u8, u64, u64);

/// The maps the rules' readers fetched in one read, for the table's thread to keep.
pub(super) type FetchedMaps = Mutex<Vec<(MapKey, KeptEntries)>>;

/// What one read may reuse, and what it keeps for the next.
pub(super) struct MapReuse<'m> {
    pub(super) previous: &'m HashMap<MapKey, KeptEntries>,
    pub(super) next: HashMap<MapKey, KeptEntries>,
    pub(super) reused: usize,
}

/// The most keys asked for in one request: the request stays one small message, and
/// a Service with more endpoints than this has its map dumped.
const MAX_KEYS: u32 = 1024;

/// A map that may be read key by key once its rule says which keys it can hold: an
/// anonymous constant map with plain 32-bit keys and a declared size. kube-proxy's
/// endpoint dispatch (`numgen random mod N vmap { 0 : goto …, …, N-1 : goto … }`) is
/// one per Service.
///
/// Why: the kernel finds the set of an element dump by walking the table's list of
/// sets by name, and walks it again for each of the dump's two passes; a lookup of
/// given keys walks it once. On a large node those walks are much of the read's CPU
/// (docs/performance.md#the-live-read). The answer is the whole map only when the keys
/// asked for are all there and the map can hold no more: the kernel refuses an element
/// past a set's declared size, and nft declares an anonymous map's size as its number
/// of elements. Anything else (a key missing, another size) is dumped. (A catch-all
/// element is not counted against the size; in such a map no number the `numgen` draws
/// can reach it, so it is left out.)
pub(super) fn may_read_by_key(set: &SetInfo) -> bool {
    set.is_constant_map()
        && set.has_single_keys()
        && set.key_len == 4
        && set.size.is_some_and(|n| (1..=MAX_KEYS).contains(&n))
}

/// An anonymous map a rule needs, and the keys it can hold when the rule says (the
/// modulus of the `numgen` that feeds the lookup).
pub(super) struct WantedMap<'s> {
    set: &'s SetInfo,
    keys: Option<u32>,
}

/// The deferred maps `attrs`' rule looks up, appended to `wanted`.
pub(super) fn maps_wanted<'s>(context: &ReadContext<'s>, attrs: &[u8], wanted: &mut Vec<WantedMap<'s>>) {
    for lookup in lookups(attrs) {
        if let Some(&set) = context.deferred.get(lookup.set) {
            // A following read defers every anonymous map, also those read whole.
            let keys = lookup
                .numgen_modulus
                .filter(|&m| set.size == Some(m) && may_read_by_key(set));
            wanted.push(WantedMap { set, keys });
        }
    }
}

/// Reads a deferred map, key by key when its rule gave the keys and every one is
/// there, else whole, and leaves it for its rule to take.
pub(super) fn fetch_map(
    conn: &mut Conn,
    context: &ReadContext<'_>,
    map: WantedMap<'_>,
    out: &mut Vec<Result<DecodedRule, Unparsed>>,
) -> Result<(), NetlinkError> {
    let set = map.set;
    let key = context
        .keep
        .zip(set.handle)
        .map(|((table, _), handle)| (context.nfproto, table, handle));
    if let Some(kept) = key
        .filter(|_| set.is_constant_map())
        .and_then(|key| context.reuse?.get(&key))
    {
        context.counts.reused.fetch_add(1, AtomicOrdering::Relaxed);
        context
            .rules
            .inline_maps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(set.name.clone(), kept.entries(set));
        return Ok(());
    }
    let by_key = match map.keys {
        Some(keys) => match read_elements_by_key(conn, context.rules.family, set, keys) {
            Ok(read) => Some(read),
            // A key the map does not hold (ENOENT), or a kernel that does not look up
            // elements: the map is read whole, as it is.
            Err(NetlinkError::Refused { .. }) => None,
            Err(e) => return Err(e),
        },
        None => None,
    };
    // Both reads give their elements in key order.
    let (elements, problems) = match by_key {
        Some(read) => {
            context.counts.by_key.fetch_add(1, AtomicOrdering::Relaxed);
            read
        }
        None => {
            context.counts.dumped.fetch_add(1, AtomicOrdering::Relaxed);
            read_elements(conn, context.rules.family, set)?
        }
    };
    out.extend(problems.into_iter().map(Err));
    let entries = match (context.keep, key) {
        (Some((_, kept)), Some(key)) => {
            let (keep, entries) = elements.into_kept();
            kept.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((key, keep));
            entries
        }
        _ => elements.into_inline(),
    };
    context
        .rules
        .inline_maps
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(set.name.clone(), entries);
    Ok(())
}

/// Every element of `set`, in key order; a dump that holds a key twice is read again
/// (see [`Elements::finish_dump`]).
pub(super) fn read_elements<'s>(
    conn: &mut Conn,
    family: Family,
    set: &'s SetInfo,
) -> Result<(MapElements<'s>, Vec<Unparsed>), NetlinkError> {
    let mut read = Elements::new(set);
    let request = request::set_elements(family, KUBE_PROXY_TABLE, &set.name);
    conn.exchange("the elements", &request, |attrs| Ok(read.take(attrs)?))?;
    read.finish_dump().ok_or(NetlinkError::Unstable(1))
}

/// The elements with keys 0 to `keys` - 1 of a map with 32-bit keys, asked for in one
/// request, in key order; refused (ENOENT) when one of them is missing.
fn read_elements_by_key<'s>(
    conn: &mut Conn,
    family: Family,
    set: &'s SetInfo,
    keys: u32,
) -> Result<(MapElements<'s>, Vec<Unparsed>), NetlinkError> {
    let mut read = Elements::new(set);
    let request = request::set_elements_by_key(family, KUBE_PROXY_TABLE, &set.name, keys);
    conn.exchange("the elements", &request, |attrs| Ok(read.take(attrs)?))?;
    if read.len() != keys as usize {
        return Err(NetlinkError::Malformed(format!(
            "{} elements of map {} answered for {keys} keys",
            read.len(),
            set.name
        )));
    }
    Ok(read.finish())
}
