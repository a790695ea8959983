//! kube-proxy's nftables tables read straight from the kernel over netlink, into the
//! same intermediate form the `nft -j` parser builds, so both give the same
//! [`RuleSource`](crate::heart::model::RuleSource)s.
//!
//! Why: on a large node `nft -j list table ip kube-proxy` takes seconds and a great
//! deal of memory, most of it nft building and printing its own JSON. The kernel hands
//! the same objects over `NETLINK_NETFILTER` in compact binary messages, which are
//! decoded one datagram at a time by [`crate::decode::netlink::nftables`]; nothing of
//! the dump is held whole. This is the transport: which dumps, on which sockets, and
//! which maps are read key by key or kept from the last read.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::decode::netlink::nftables::{
    DecodedRule, MapEntries, NFT_SET_ANONYMOUS, NFT_SET_CONCAT, NFT_SET_CONSTANT, NFT_SET_EVAL,
    NFT_SET_INTERVAL, NFT_SET_MAP, NFT_SET_TIMEOUT, RawElement, RuleContext, SetInfo, chain_of_table,
    collect_elements, compare_keys, decode_rule, element_ir, inline_entries, lookups, read_set,
};
use crate::decode::netlink::{
    Attrs, NFT_MSG_GETCHAIN, NFT_MSG_GETRULE, NFT_MSG_GETSET, NFT_MSG_GETSETELEM, NFT_MSG_GETTABLE,
    NFTA_DATA_VALUE, NFTA_LIST_ELEM, NFTA_RULE_CHAIN, NFTA_RULE_TABLE, NFTA_SET_ELEM_KEY,
    NFTA_SET_ELEM_LIST_ELEMENTS, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_TABLE,
    NFTA_TABLE_HANDLE, NFTA_TABLE_NAME, NLA_F_NESTED, be64, nfproto as nfproto_of,
};
use crate::decode::nftables::{MapIr, ParsedRuleset, build_rule_sources, unparsed};
use crate::heart::model::{Family, RuleSource, Unparsed};
use crate::sources::netlink::blocks::{Plan, Readers, read_in_order};
use crate::sources::netlink::{Conn, NetlinkError, NetlinkLimits, Recording, push_attr, restart};

/// What one read gave.
#[derive(Debug, Default)]
struct NetlinkRead<'a> {
    parsed: ParsedRuleset<'a>,
    /// Bytes of netlink messages received.
    bytes: u64,
}

/// How often a read is retried when the ruleset changed while it was read.
const ATTEMPTS: u32 = 3;

/// The elements of kube-proxy's anonymous verdict maps, kept from one read to the next
/// by a reader that reads the same node again (the agent).
///
/// Why: most of a large node's read is the kernel finding each of these thousands of
/// maps to dump its elements (README, Performance), yet none of them can have changed
/// since it was last read. A map that is anonymous and constant, bound to its one
/// rule, refuses every element change; a rule change makes a new map with a new
/// handle; and the kernel never hands out a table's or a set's handle twice while the
/// table lives (a table made again gets a new handle too). So a map seen under the
/// same table and set handle has the same elements, and only new maps are dumped.
#[derive(Debug, Clone, Default)]
pub struct ConstantMaps {
    maps: HashMap<MapKey, MapEntries>,
    /// Maps the last read took from here rather than from the kernel.
    reused: usize,
    /// How the last read got the maps it did not reuse.
    fetched: MapFetches,
}

impl ConstantMaps {
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
struct FetchCounts {
    by_key: AtomicUsize,
    dumped: AtomicUsize,
}

/// A map by family, table handle and set handle.
type MapKey = (u8, u64, u64);

/// The maps the rules' readers fetched in one read, for the table's thread to keep.
type FetchedMaps = Mutex<Vec<(MapKey, MapEntries)>>;

/// What one read may reuse, and what it keeps for the next.
struct MapReuse<'m> {
    previous: &'m HashMap<MapKey, MapEntries>,
    next: HashMap<MapKey, MapEntries>,
    reused: usize,
}

/// What the rules' readers of one table share.
struct ReadContext<'c> {
    rules: RuleContext<'c>,
    /// The anonymous maps not read yet, which their rules' readers fetch.
    deferred: &'c HashMap<&'c str, &'c SetInfo>,
    nfproto: u8,
    counts: &'c FetchCounts,
    /// When the read keeps constant maps: the table's handle, and the maps the rules'
    /// readers fetched, keyed as [`ConstantMaps`] keeps them.
    keep: Option<(u64, &'c FetchedMaps)>,
}

/// Reads `ip kube-proxy` and `ip6 kube-proxy` from the current network namespace.
/// A table that does not exist is simply not in the result. With `keep`, constant
/// anonymous maps read before are reused and this read's are kept (see [`ConstantMaps`]).
/// With `recording`, the messages of the read's last attempt are recorded there.
fn read_tables(
    limits: NetlinkLimits,
    mut keep: Option<&mut ConstantMaps>,
    recording: Option<&Arc<Recording>>,
) -> Result<NetlinkRead<'static>, NetlinkError> {
    let deadline = Instant::now() + limits.timeout;
    let mut conn = Conn::open(limits, deadline, recording)?;
    let extra_bytes = AtomicU64::new(0);
    let readers = Readers {
        limits,
        deadline,
        bytes: &extra_bytes,
        recording,
    };
    for _ in 0..ATTEMPTS {
        restart(recording);
        let before = conn.generation()?;
        let mut parsed = ParsedRuleset::default();
        let mut reuse = keep.as_deref().map(|k| MapReuse {
            previous: &k.maps,
            next: HashMap::new(),
            reused: 0,
        });
        let counts = FetchCounts::default();
        let read = read_family(
            &mut conn,
            readers,
            Family::Ipv4,
            &mut parsed,
            reuse.as_mut(),
            &counts,
        )
        .and_then(|()| {
            read_family(
                &mut conn,
                readers,
                Family::Ipv6,
                &mut parsed,
                reuse.as_mut(),
                &counts,
            )
        });
        match read {
            // A dump the kernel marked interrupted: the ruleset changed under it.
            Err(NetlinkError::Unstable(_)) => continue,
            Err(e) => return Err(e),
            Ok(()) if conn.generation()? == before => {
                let kept = reuse.map(|r| (r.next, r.reused));
                if let (Some(keep), Some((next, reused))) = (keep.as_deref_mut(), kept) {
                    keep.maps = next;
                    keep.reused = reused;
                    keep.fetched = MapFetches {
                        by_key: counts.by_key.into_inner(),
                        dumped: counts.dumped.into_inner(),
                    };
                }
                return Ok(NetlinkRead {
                    parsed,
                    bytes: conn.bytes + extra_bytes.load(AtomicOrdering::Relaxed),
                });
            }
            // Changed between two dumps: the pieces may not fit together. Again.
            Ok(()) => continue,
        }
    }
    Err(NetlinkError::Unstable(ATTEMPTS))
}

/// A set whose elements cannot change while it exists (see [`ConstantMaps`]).
fn is_constant_map(set: &SetInfo) -> bool {
    let all = NFT_SET_ANONYMOUS | NFT_SET_CONSTANT | NFT_SET_MAP;
    set.flags & all == all && set.flags & (NFT_SET_TIMEOUT | NFT_SET_EVAL) == 0
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
/// given keys walks it once. On a 10,000-Service node those walks were over half of
/// the read's CPU (README, Performance). The answer is the whole map only when the keys
/// asked for are all there and the map can hold no more: the kernel refuses an element
/// past a set's declared size, and nft declares an anonymous map's size as its number
/// of elements. Anything else (a key missing, another size) is dumped. (A catch-all
/// element is not counted against the size; in such a map no number the `numgen` draws
/// can reach it, so it is left out.)
fn may_read_by_key(set: &SetInfo) -> bool {
    is_constant_map(set)
        && set.flags & (NFT_SET_INTERVAL | NFT_SET_CONCAT) == 0
        && set.key_len == 4
        && set.size.is_some_and(|n| (1..=MAX_KEYS).contains(&n))
}

/// Chains whose rules are one unit of work of the parallel readers.
const RULE_BLOCK: usize = 128;
/// Blocks of decoded rules the readers may hold ahead of the table being built.
const RULE_LOOKAHEAD: usize = 8;

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
    Elements(&'s SetInfo, Vec<RawElement>, Vec<Unparsed>),
}

/// One table's chains, maps and rules. The chain list and the maps' elements are read
/// first, at once over several sockets: rules refer to the inline maps. The rules then
/// follow, chain by chain, also spread over the sockets.
///
/// Why so many dumps: the kernel finds a set to dump by walking the table's list of
/// sets, and a kube-proxy table holds one anonymous map per Service, so its thousands
/// of element dumps are most of a large node's read, all of it kernel time (a
/// 10,000-Service table: 3.9 s of its 6.7 s on one socket).
fn read_family(
    conn: &mut Conn,
    readers: Readers<'_>,
    family: Family,
    parsed: &mut ParsedRuleset<'static>,
    mut reuse: Option<&mut MapReuse<'_>>,
    counts: &FetchCounts,
) -> Result<(), NetlinkError> {
    let nfproto = nfproto_of(family);
    let table_attr = [(NFTA_TABLE_NAME, &b"kube-proxy\0"[..])];
    let mut table_handle = None;
    match conn.exchange(
        "the table",
        NFT_MSG_GETTABLE,
        false,
        nfproto,
        &table_attr,
        |attrs| {
            for attr in Attrs::new(attrs) {
                if let (NFTA_TABLE_HANDLE, value) = attr? {
                    table_handle = Some(be64(value)?);
                }
            }
            Ok(())
        },
    ) {
        // The table does not exist: kube-proxy does not run in nftables mode here.
        Err(NetlinkError::Refused { source, .. }) if source.raw_os_error() == Some(libc::ENOENT) => {
            return Ok(());
        }
        other => other?,
    }
    let table = parsed.table_mut(family);
    let set_filter = [(NFTA_SET_TABLE, &b"kube-proxy\0"[..])];
    let mut sets = Vec::new();
    conn.exchange("the sets", NFT_MSG_GETSET, true, nfproto, &set_filter, |attrs| {
        match read_set(attrs) {
            Ok(set) => sets.push(set),
            Err(reason) => table.unparsed.push(unparsed(0, "(a set)", reason)),
        }
        Ok(())
    })?;
    let mut chains = Vec::new();
    let mut inline_maps: HashMap<String, MapEntries> = HashMap::new();
    let key_of = |set: &SetInfo| match (table_handle, set.handle) {
        (Some(table), Some(handle)) if is_constant_map(set) => Some((nfproto, table, handle)),
        _ => None,
    };
    // Constant maps read before are taken as they were; those that may be read key by
    // key wait for their rules (which give the keys); the rest are dumped now.
    let mut fetches: Vec<Fetch<'_>> = vec![Fetch::Chains];
    let mut deferred: HashMap<&str, &SetInfo> = HashMap::new();
    for set in sets.iter().filter(|s| s.flags & NFT_SET_MAP != 0) {
        let kept = key_of(set).and_then(|key| Some((key, reuse.as_deref()?.previous.get(&key)?)));
        match (kept, reuse.as_deref_mut()) {
            (Some((key, entries)), Some(reuse)) => {
                let entries = entries.clone();
                reuse.next.insert(key, entries.clone());
                reuse.reused += 1;
                inline_maps.insert(set.name.clone(), entries);
            }
            _ if may_read_by_key(set) => {
                deferred.insert(set.name.as_str(), set);
            }
            _ => {
                counts.dumped.fetch_add(1, AtomicOrdering::Relaxed);
                fetches.push(Fetch::Elements(set));
            }
        }
    }
    // Elements are small and all kept: no bound on how far the readers run ahead.
    let everything = Plan {
        block: 1,
        lookahead: usize::MAX,
    };
    read_in_order(
        conn,
        readers,
        &fetches,
        everything,
        &|conn, fetch: &Fetch<'_>, out: &mut Fetched<'_>| {
            *out = match fetch {
                Fetch::Chains => {
                    let (names, problems) = read_chains(conn, nfproto)?;
                    Fetched::Chains(names, problems)
                }
                Fetch::Elements(set) => {
                    let (elements, problems) = read_elements(conn, nfproto, set)?;
                    Fetched::Elements(set, elements, problems)
                }
            };
            Ok(())
        },
        &mut |out: &mut Fetched<'_>| {
            match std::mem::take(out) {
                Fetched::Chains(names, problems) => {
                    table.unparsed.extend(problems);
                    table.reserve_chains(names.len());
                    for chain in &names {
                        table.chain_mut(Cow::Owned(chain.clone()), 0);
                    }
                    chains = names;
                }
                Fetched::Elements(set, mut elements, problems) => {
                    table.unparsed.extend(problems);
                    elements.sort_by(|a, b| compare_keys(&a.key, &b.key));
                    if set.flags & NFT_SET_ANONYMOUS != 0 {
                        let entries = inline_entries(set, elements);
                        if let (Some(key), Some(reuse)) = (key_of(set), reuse.as_deref_mut()) {
                            reuse.next.insert(key, entries.clone());
                        }
                        inline_maps.insert(set.name.clone(), entries);
                    } else {
                        table.maps.push(MapIr {
                            name: Cow::Owned(set.name.clone()),
                            elements: elements.into_iter().map(|e| element_ir(set, e)).collect(),
                        });
                    }
                }
                Fetched::Nothing => {}
            }
            Ok(())
        },
    )?;
    let sets_by_name: HashMap<&str, &SetInfo> = sets.iter().map(|s| (s.name.as_str(), s)).collect();
    let fetched_for_keep = Mutex::new(Vec::new());
    let inline_maps = Mutex::new(inline_maps);
    let context = ReadContext {
        rules: RuleContext {
            family,
            sets: &sets_by_name,
            inline_maps: &inline_maps,
        },
        deferred: &deferred,
        nfproto,
        counts,
        keep: table_handle
            .filter(|_| reuse.is_some())
            .map(|table| (table, &fetched_for_keep)),
    };
    let plan = Plan {
        block: RULE_BLOCK,
        lookahead: RULE_LOOKAHEAD,
    };
    let positions: Vec<usize> = (0..chains.len()).collect();
    read_in_order(
        conn,
        readers,
        &positions,
        plan,
        &|conn, &chain: &usize, out: &mut Vec<Result<DecodedRule, Unparsed>>| {
            read_chain_rules(conn, &context, &chains, chain, out)
        },
        &mut |rules: &mut Vec<Result<DecodedRule, Unparsed>>| {
            for rule in rules.drain(..) {
                match rule {
                    Ok(r) => {
                        table.unparsed.extend(r.problem);
                        let name = &chains[r.chain];
                        match table.find_chain(name) {
                            Some(i) => table.chains[i].rules.push(r.rule),
                            None => table.chain_mut(Cow::Owned(name.clone()), 0).rules.push(r.rule),
                        }
                    }
                    Err(problem) => table.unparsed.push(problem),
                }
            }
            Ok(())
        },
    )?;
    // The maps the rules' readers fetched, kept for the next read.
    if let Some(reuse) = reuse {
        reuse.next.extend(
            fetched_for_keep
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner),
        );
    }
    Ok(())
}

/// filters chain dumps by family only), then filtered by table.
fn read_chains(conn: &mut Conn, nfproto: u8) -> Result<(Vec<String>, Vec<Unparsed>), NetlinkError> {
    let mut names = Vec::new();
    let mut problems = Vec::new();
    conn.exchange("the chains", NFT_MSG_GETCHAIN, true, nfproto, &[], |attrs| {
        match chain_of_table(attrs) {
            Ok(Some(chain)) => names.push(chain),
            Ok(None) => {}
            Err(reason) => problems.push(unparsed(0, "(a chain)", reason)),
        }
        Ok(())
    })?;
    // Held through the whole read, next to the table's own copy of each name.
    names.shrink_to_fit();
    Ok((names, problems))
}

/// One chain's rules, decoded. One dump per chain, not one for the table: the kernel
/// resumes a table-wide rule dump by walking every rule before the resume point again,
/// once per datagram, which is quadratic (a 10,000-Service table: 10.3 s against 1.5 s
/// chain by chain, where it finds each chain by hash).
///
/// A rule whose anonymous map waits to be read key by key (see [`may_read_by_key`]) is
/// held, with every rule after it in the chain, until the dump ends and the socket is
/// free to fetch the map; they are then decoded in order.
fn read_chain_rules(
    conn: &mut Conn,
    context: &ReadContext<'_>,
    chains: &[String],
    chain: usize,
    out: &mut Vec<Result<DecodedRule, Unparsed>>,
) -> Result<(), NetlinkError> {
    let mut chain_attr = chains[chain].as_bytes().to_vec();
    chain_attr.push(0);
    let rule_filter = [
        (NFTA_RULE_TABLE, &b"kube-proxy\0"[..]),
        (NFTA_RULE_CHAIN, &chain_attr[..]),
    ];
    let mut held: Vec<Vec<u8>> = Vec::new();
    let mut wanted: Vec<WantedMap<'_>> = Vec::new();
    let decode = |attrs: &[u8], out: &mut Vec<Result<DecodedRule, Unparsed>>| match decode_rule(
        &context.rules,
        chain,
        attrs,
    ) {
        Ok(Some(rule)) => out.push(Ok(rule)),
        Ok(None) => {}
        Err(reason) => out.push(Err(unparsed(0, "(a rule)", reason))),
    };
    conn.exchange(
        "the rules",
        NFT_MSG_GETRULE,
        true,
        context.nfproto,
        &rule_filter,
        |attrs| {
            let before = wanted.len();
            if !context.deferred.is_empty() {
                maps_wanted(context, attrs, &mut wanted);
            }
            if held.is_empty() && wanted.len() == before {
                decode(attrs, out);
            } else {
                held.push(attrs.to_vec());
            }
            Ok(())
        },
    )?;
    for map in wanted {
        fetch_map(conn, context, map, out)?;
    }
    for attrs in held {
        decode(&attrs, out);
    }
    Ok(())
}

/// An anonymous map a rule needs, and the keys it can hold when the rule says (the
/// modulus of the `numgen` that feeds the lookup).
struct WantedMap<'s> {
    set: &'s SetInfo,
    keys: Option<u32>,
}

/// The deferred maps `attrs`' rule looks up, appended to `wanted`.
fn maps_wanted<'s>(context: &ReadContext<'s>, attrs: &[u8], wanted: &mut Vec<WantedMap<'s>>) {
    for lookup in lookups(attrs) {
        if let Some(&set) = context.deferred.get(lookup.set) {
            let keys = lookup.numgen_modulus.filter(|&m| set.size == Some(m));
            wanted.push(WantedMap { set, keys });
        }
    }
}

/// Reads a deferred map, key by key when its rule gave the keys and every one is
/// there, else whole, and leaves it for its rule to take.
fn fetch_map(
    conn: &mut Conn,
    context: &ReadContext<'_>,
    map: WantedMap<'_>,
    out: &mut Vec<Result<DecodedRule, Unparsed>>,
) -> Result<(), NetlinkError> {
    let set = map.set;
    let by_key = match map.keys {
        Some(keys) => match read_elements_by_key(conn, context.nfproto, set, keys) {
            Ok(read) => Some(read),
            // A key the map does not hold (ENOENT), or a kernel that does not look up
            // elements: the map is read whole, as it is.
            Err(NetlinkError::Refused { .. }) => None,
            Err(e) => return Err(e),
        },
        None => None,
    };
    let (mut elements, problems) = match by_key {
        Some(read) => {
            context.counts.by_key.fetch_add(1, AtomicOrdering::Relaxed);
            read
        }
        None => {
            context.counts.dumped.fetch_add(1, AtomicOrdering::Relaxed);
            read_elements(conn, context.nfproto, set)?
        }
    };
    out.extend(problems.into_iter().map(Err));
    elements.sort_by(|a, b| compare_keys(&a.key, &b.key));
    let entries = inline_entries(set, elements);
    if let (Some((table, kept)), Some(handle)) = (context.keep, set.handle) {
        kept.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(((context.nfproto, table, handle), entries.clone()));
    }
    context
        .rules
        .inline_maps
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(set.name.clone(), entries);
    Ok(())
}

fn read_elements(
    conn: &mut Conn,
    nfproto: u8,
    set: &SetInfo,
) -> Result<(Vec<RawElement>, Vec<Unparsed>), NetlinkError> {
    let mut set_name = set.name.as_bytes().to_vec();
    set_name.push(0);
    let filter = [
        (NFTA_SET_ELEM_LIST_TABLE, &b"kube-proxy\0"[..]),
        (NFTA_SET_ELEM_LIST_SET, &set_name[..]),
    ];
    let mut read = (Vec::new(), Vec::new());
    conn.exchange(
        "the elements",
        NFT_MSG_GETSETELEM,
        true,
        nfproto,
        &filter,
        |attrs| Ok(collect_elements(set, attrs, &mut read.0, &mut read.1)?),
    )?;
    Ok(read)
}

/// The elements with keys 0 to `keys` - 1 of a map with 32-bit keys, asked for in one
/// request; refused (ENOENT) when one of them is missing.
fn read_elements_by_key(
    conn: &mut Conn,
    nfproto: u8,
    set: &SetInfo,
    keys: u32,
) -> Result<(Vec<RawElement>, Vec<Unparsed>), NetlinkError> {
    let mut set_name = set.name.as_bytes().to_vec();
    set_name.push(0);
    let mut list = Vec::with_capacity(keys as usize * 16);
    let (mut value, mut key) = (Vec::with_capacity(8), Vec::with_capacity(12));
    for k in 0..keys {
        value.clear();
        key.clear();
        // numgen leaves its number in the register in host order, and the map's keys
        // are the register's bytes.
        push_attr(&mut value, NFTA_DATA_VALUE, &k.to_ne_bytes());
        push_attr(&mut key, NFTA_SET_ELEM_KEY | NLA_F_NESTED, &value);
        push_attr(&mut list, NFTA_LIST_ELEM | NLA_F_NESTED, &key);
    }
    let request = [
        (NFTA_SET_ELEM_LIST_TABLE, &b"kube-proxy\0"[..]),
        (NFTA_SET_ELEM_LIST_SET, &set_name[..]),
        (NFTA_SET_ELEM_LIST_ELEMENTS | NLA_F_NESTED, &list[..]),
    ];
    let mut read = (Vec::new(), Vec::new());
    conn.exchange_acked("the elements", NFT_MSG_GETSETELEM, nfproto, &request, |attrs| {
        Ok(collect_elements(set, attrs, &mut read.0, &mut read.1)?)
    })?;
    if read.0.len() != keys as usize {
        return Err(NetlinkError::Malformed(format!(
            "{} elements of map {} answered for {keys} keys",
            read.0.len(),
            set.name
        )));
    }
    Ok(read)
}

/// CAP_NET_ADMIN.
pub fn read_tables_netlink(
    origin: &str,
    limits: NetlinkLimits,
) -> Result<(Vec<RuleSource>, u64), NetlinkError> {
    let read = read_tables(limits, None, None)?;
    Ok((build_rule_sources(read.parsed, origin), read.bytes))
}

/// [`read_tables_netlink`] for a reader that reads the same node again: the constant
/// anonymous maps of the last read are reused rather than dumped again, and this read's
/// are kept in `maps` for the next.
pub fn read_tables_netlink_keeping(
    origin: &str,
    limits: NetlinkLimits,
    maps: &mut ConstantMaps,
) -> Result<(Vec<RuleSource>, u64), NetlinkError> {
    let read = read_tables(limits, Some(maps), None)?;
    Ok((build_rule_sources(read.parsed, origin), read.bytes))
}

/// [`read_tables_netlink`] that also returns the raw messages it decoded, for
/// [`crate::decode::netlink::nftables::decode_tables`] to decode again (fixtures).
pub fn record_tables_netlink(
    origin: &str,
    limits: NetlinkLimits,
) -> Result<(Vec<RuleSource>, Vec<u8>), NetlinkError> {
    let recording = Arc::new(Recording::default());
    let read = read_tables(limits, None, Some(&recording))?;
    Ok((build_rule_sources(read.parsed, origin), recording.bytes()))
}
