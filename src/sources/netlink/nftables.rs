//! kube-proxy's nftables tables read straight from the kernel over netlink, into the
//! same intermediate form the `nft -j` parser builds, so both give the same
//! [`RuleSource`](crate::heart::model::RuleSource)s.
//!
//! Why: on a 10,000-Service node `nft -j list table ip kube-proxy` takes seconds and
//! close to a gigabyte, most of it nft building and printing its own JSON. The kernel
//! hands the same objects over `NETLINK_NETFILTER` in compact binary messages, which
//! are decoded here one datagram at a time and reduced at once to what the detector
//! reads (chain names, jumps, DNAT targets, verdict-map elements); nothing of the dump
//! is held whole.
//!
//! The transport (socket, dumps, attributes) is [`crate::sources::netlink`]'s.
//!
//! Expressions arrive as the kernel runs them (load a field into a register, compare
//! the register); they are turned back into nft's JSON statements
//! (`meta l4proto tcp`, `dnat to 10.0.0.1:80`) for the forms kube-proxy and hand-written
//! NodePort rules use, so a finding shows the rule as `nft list` prints it.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use crate::decode::nftables::build_rule_sources;
use crate::decode::nftables::json::{Expr, reduce_rule, render_expr_string};
use crate::decode::nftables::{
    ElementIr, ElementVerdict, KUBE_PROXY_TABLE, MapIr, ParsedRuleset, RuleIr, unparsed,
};
use crate::heart::model::{Family, RuleSource};
use crate::sources::netlink::blocks::{Plan, Readers, read_in_order};
use crate::sources::netlink::{
    Attrs, Conn, NFPROTO_IPV4, NFPROTO_IPV6, NFTA_DATA_VALUE, NFTA_DATA_VERDICT, NFTA_LIST_ELEM,
    NLA_F_NESTED, NetlinkError, NetlinkLimits, align4, attr_map, be32, be64, data_value,
    expressions as expressions_of, name, prefix_len as shared_prefix_len, push_attr, read_verdict,
};

/// What one read gave.
#[derive(Debug, Default)]
pub(super) struct NetlinkRead<'a> {
    pub(super) parsed: ParsedRuleset<'a>,
    /// Bytes of netlink messages received.
    pub(super) bytes: u64,
}

// linux/netfilter/nf_tables.h: message types
const NFT_MSG_GETTABLE: u8 = 1;
const NFT_MSG_GETCHAIN: u8 = 4;
const NFT_MSG_GETRULE: u8 = 7;
const NFT_MSG_GETSET: u8 = 10;
const NFT_MSG_GETSETELEM: u8 = 13;
// attributes
const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_HANDLE: u16 = 3;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_RULE_USERDATA: u16 = 7;
const NFTA_SET_TABLE: u16 = 1;
const NFTA_SET_NAME: u16 = 2;
const NFTA_SET_FLAGS: u16 = 3;
const NFTA_SET_KEY_TYPE: u16 = 4;
const NFTA_SET_KEY_LEN: u16 = 5;
const NFTA_SET_HANDLE: u16 = 16;
const NFTA_SET_DESC: u16 = 9;
const NFTA_SET_DESC_SIZE: u16 = 1;
const NFTA_TABLE_HANDLE: u16 = 4;
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_DATA: u16 = 2;
const NFTA_SET_ELEM_FLAGS: u16 = 3;
const NFTA_SET_ELEM_USERDATA: u16 = 6;
const NFT_SET_ANONYMOUS: u32 = 1;
const NFT_SET_CONSTANT: u32 = 2;
const NFT_SET_INTERVAL: u32 = 4;
const NFT_SET_CONCAT: u32 = 0x80;
const NFT_SET_TIMEOUT: u32 = 0x10;
const NFT_SET_EVAL: u32 = 0x20;
const NFT_SET_MAP: u32 = 8;
const NFT_SET_ELEM_INTERVAL_END: u32 = 1;
/// libnftnl's user-data tag for a rule's or an element's comment.
const UDATA_COMMENT: u8 = 0;

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

/// An anonymous map's elements: each key as its rule shows it, and its data.
type MapEntries = Vec<(Expr<'static>, ElementData)>;

/// The maps the rules' readers fetched in one read, for the table's thread to keep.
type FetchedMaps = Mutex<Vec<(MapKey, MapEntries)>>;

/// What one read may reuse, and what it keeps for the next.
struct MapReuse<'m> {
    previous: &'m HashMap<MapKey, MapEntries>,
    next: HashMap<MapKey, MapEntries>,
    reused: usize,
}

/// Reads `ip kube-proxy` and `ip6 kube-proxy` from the current network namespace.
/// A table that does not exist is simply not in the result. With `keep`, constant
/// anonymous maps read before are reused and this read's are kept (see [`ConstantMaps`]).
pub(super) fn read_tables(
    limits: NetlinkLimits,
    mut keep: Option<&mut ConstantMaps>,
) -> Result<NetlinkRead<'static>, NetlinkError> {
    let deadline = Instant::now() + limits.timeout;
    let mut conn = Conn::open(limits, deadline)?;
    let extra_bytes = AtomicU64::new(0);
    let readers = Readers {
        limits,
        deadline,
        bytes: &extra_bytes,
    };
    for _ in 0..ATTEMPTS {
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
    Chains(Vec<String>, Vec<crate::heart::model::Unparsed>),
    Elements(&'s SetInfo, Vec<RawElement>, Vec<crate::heart::model::Unparsed>),
}

/// A rule decoded and reduced by a reader, for the table to take in order. The reader
/// reduces it (not the table's thread): the statements are built and dropped on one
/// thread, and only what the table keeps crosses.
struct DecodedRule {
    /// Its chain's position in the list of chains read.
    chain: usize,
    rule: RuleIr<'static>,
    problem: Option<crate::heart::model::Unparsed>,
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
    let nfproto = match family {
        Family::Ipv4 => NFPROTO_IPV4,
        Family::Ipv6 => NFPROTO_IPV6,
    };
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
    let context = RuleContext {
        family,
        sets: &sets_by_name,
        inline_maps: &Mutex::new(inline_maps),
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
        &|conn, &chain: &usize, out: &mut Vec<Result<DecodedRule, crate::heart::model::Unparsed>>| {
            read_chain_rules(conn, &context, &chains, chain, out)
        },
        &mut |rules: &mut Vec<Result<DecodedRule, crate::heart::model::Unparsed>>| {
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

/// An anonymous map's elements as its rule shows them inline.
fn inline_entries(set: &SetInfo, elements: Vec<RawElement>) -> MapEntries {
    elements
        .into_iter()
        .map(|e| (key_expr(set, &e.key), e.data))
        .collect()
}

/// The names of the table's chains. Chains are listed for the whole family (the kernel
/// filters chain dumps by family only), then filtered by table.
fn read_chains(
    conn: &mut Conn,
    nfproto: u8,
) -> Result<(Vec<String>, Vec<crate::heart::model::Unparsed>), NetlinkError> {
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
    context: &RuleContext<'_>,
    chains: &[String],
    chain: usize,
    out: &mut Vec<Result<DecodedRule, crate::heart::model::Unparsed>>,
) -> Result<(), NetlinkError> {
    let mut chain_attr = chains[chain].as_bytes().to_vec();
    chain_attr.push(0);
    let rule_filter = [
        (NFTA_RULE_TABLE, &b"kube-proxy\0"[..]),
        (NFTA_RULE_CHAIN, &chain_attr[..]),
    ];
    let mut held: Vec<Vec<u8>> = Vec::new();
    let mut wanted: Vec<WantedMap<'_>> = Vec::new();
    let decode =
        |attrs: &[u8], out: &mut Vec<Result<DecodedRule, crate::heart::model::Unparsed>>| match decode_rule(
            context, chain, attrs,
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

/// The deferred maps `attrs`' rule looks up, appended to `wanted`. A rule that cannot
/// be walked wants nothing here: its decoding reports it.
fn maps_wanted<'s>(context: &RuleContext<'s>, attrs: &[u8], wanted: &mut Vec<WantedMap<'s>>) {
    let Some(expressions) = Attrs::new(attrs)
        .filter_map(Result::ok)
        .find_map(|(kind, value)| (kind == NFTA_RULE_EXPRESSIONS).then_some(value))
    else {
        return;
    };
    // (register, modulus) of a numgen counting from zero.
    let mut numgen: Option<(u32, u32)> = None;
    for expression in expressions_of(expressions) {
        let Ok((expr_name, data)) = expression else {
            return;
        };
        if expr_name != "numgen" && expr_name != "lookup" {
            continue;
        }
        let Ok(fields) = attr_map(data) else {
            return;
        };
        let number = |kind| fields.get(&kind).and_then(|v| be32(v).ok());
        match expr_name {
            "numgen" => {
                numgen = match (number(NFTA_NUMGEN_DREG), number(NFTA_NUMGEN_MODULUS)) {
                    (Some(register), Some(modulus)) if number(NFTA_NUMGEN_OFFSET).unwrap_or(0) == 0 => {
                        Some((register, modulus))
                    }
                    _ => None,
                };
            }
            "lookup" => {
                let Some(set_name) = fields.get(&NFTA_LOOKUP_SET).and_then(|v| name(v).ok()) else {
                    continue;
                };
                let Some(&set) = context.deferred.get(set_name) else {
                    continue;
                };
                let keys = match (numgen, number(NFTA_LOOKUP_SREG)) {
                    (Some((register, modulus)), Some(sreg))
                        if register == sreg && set.size == Some(modulus) =>
                    {
                        Some(modulus)
                    }
                    _ => None,
                };
                wanted.push(WantedMap { set, keys });
            }
            _ => {}
        }
    }
}

/// Reads a deferred map, key by key when its rule gave the keys and every one is
/// there, else whole, and leaves it for its rule to take.
fn fetch_map(
    conn: &mut Conn,
    context: &RuleContext<'_>,
    map: WantedMap<'_>,
    out: &mut Vec<Result<DecodedRule, crate::heart::model::Unparsed>>,
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
        .inline_maps
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(set.name.clone(), entries);
    Ok(())
}

/// The comment in libnftnl's user data (type-length-value, one byte each).
fn udata_comment(mut data: &[u8]) -> Option<String> {
    while let [kind, len, rest @ ..] = data {
        let value = rest.get(..usize::from(*len))?;
        if *kind == UDATA_COMMENT {
            return name(value).ok().map(str::to_string);
        }
        data = &rest[usize::from(*len)..];
    }
    None
}

// ------------------------------------------------------------------ chains, sets, elements

/// The chain's name when it is the table's.
fn chain_of_table(attrs: &[u8]) -> Result<Option<String>, String> {
    let mut in_table = false;
    let mut chain = None;
    for attr in Attrs::new(attrs) {
        match attr.map_err(|e| e.to_string())? {
            (NFTA_CHAIN_TABLE, v) => in_table = name(v).is_ok_and(|t| t == KUBE_PROXY_TABLE),
            (NFTA_CHAIN_NAME, v) => chain = name(v).ok().map(str::to_string),
            _ => {}
        }
    }
    Ok(chain.filter(|_| in_table))
}

/// A set or map of the table, as far as reading its elements needs.
#[derive(Debug)]
struct SetInfo {
    name: String,
    /// The kernel's handle: unique within its table for the table's life.
    handle: Option<u64>,
    flags: u32,
    key_type: u32,
    key_len: u32,
    /// The most elements it may hold, when declared.
    size: Option<u32>,
}

fn read_set(attrs: &[u8]) -> Result<SetInfo, String> {
    let mut set = SetInfo {
        name: String::new(),
        handle: None,
        flags: 0,
        key_type: 0,
        key_len: 0,
        size: None,
    };
    for attr in Attrs::new(attrs) {
        let (kind, value) = attr.map_err(|e| e.to_string())?;
        let number = || be32(value).map_err(|e| e.to_string());
        match kind {
            NFTA_SET_NAME => set.name = name(value).map_err(|e| e.to_string())?.to_string(),
            NFTA_SET_FLAGS => set.flags = number()?,
            NFTA_SET_KEY_TYPE => set.key_type = number()?,
            NFTA_SET_KEY_LEN => set.key_len = number()?,
            NFTA_SET_HANDLE => set.handle = Some(be64(value).map_err(|e| e.to_string())?),
            NFTA_SET_DESC => {
                for desc in Attrs::new(value) {
                    if let (NFTA_SET_DESC_SIZE, size) = desc.map_err(|e| e.to_string())? {
                        set.size = Some(be32(size).map_err(|e| e.to_string())?);
                    }
                }
            }
            _ => {}
        }
    }
    if set.name.is_empty() {
        return Err("a set without a name".into());
    }
    Ok(set)
}

/// One element as the kernel holds it.
struct RawElement {
    key: Vec<u8>,
    data: ElementData,
    comment: Option<String>,
}

#[derive(Debug, Clone)]
enum ElementData {
    Verdict { code: i32, chain: Option<String> },
    Value(Vec<u8>),
    None,
}

fn read_elements(
    conn: &mut Conn,
    nfproto: u8,
    set: &SetInfo,
) -> Result<(Vec<RawElement>, Vec<crate::heart::model::Unparsed>), NetlinkError> {
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
        |attrs| collect_elements(set, attrs, &mut read.0, &mut read.1),
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
) -> Result<(Vec<RawElement>, Vec<crate::heart::model::Unparsed>), NetlinkError> {
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
        collect_elements(set, attrs, &mut read.0, &mut read.1)
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

/// The elements of one answer message.
fn collect_elements(
    set: &SetInfo,
    attrs: &[u8],
    elements: &mut Vec<RawElement>,
    problems: &mut Vec<crate::heart::model::Unparsed>,
) -> Result<(), NetlinkError> {
    for attr in Attrs::new(attrs) {
        let (kind, list) = attr?;
        if kind != NFTA_SET_ELEM_LIST_ELEMENTS {
            continue;
        }
        for item in Attrs::new(list) {
            let (_, element) = item?;
            match read_element(element) {
                Ok(Some(e)) => elements.push(e),
                Ok(None) => {}
                Err(e) => problems.push(unparsed(
                    0,
                    "(an element)",
                    format!("element of map {}: {e}", set.name),
                )),
            }
        }
    }
    Ok(())
}

/// An element, or None for the closing half of an interval.
fn read_element(attrs: &[u8]) -> Result<Option<RawElement>, NetlinkError> {
    let mut element = RawElement {
        key: Vec::new(),
        data: ElementData::None,
        comment: None,
    };
    for attr in Attrs::new(attrs) {
        let (kind, value) = attr?;
        match kind {
            NFTA_SET_ELEM_KEY => element.key = data_value(value)?.to_vec(),
            NFTA_SET_ELEM_DATA => element.data = element_data(value)?,
            NFTA_SET_ELEM_FLAGS if be32(value)? & NFT_SET_ELEM_INTERVAL_END != 0 => return Ok(None),
            NFTA_SET_ELEM_USERDATA => element.comment = udata_comment(value),
            _ => {}
        }
    }
    Ok(Some(element))
}

fn element_data(nested: &[u8]) -> Result<ElementData, NetlinkError> {
    for attr in Attrs::new(nested) {
        match attr? {
            (NFTA_DATA_VALUE, value) => return Ok(ElementData::Value(value.to_vec())),
            (NFTA_DATA_VERDICT, verdict) => {
                let (code, chain) = read_verdict(verdict)?;
                return Ok(ElementData::Verdict { code, chain });
            }
            _ => {}
        }
    }
    Ok(ElementData::None)
}

// nft's data types (nftables' datatype.h), as the kernel stores them in a set's key type.
const TYPE_INTEGER: u32 = 4;
const TYPE_IPADDR: u32 = 7;
const TYPE_IP6ADDR: u32 = 8;
const TYPE_INET_PROTOCOL: u32 = 12;
const TYPE_INET_SERVICE: u32 = 13;
const TYPE_MARK: u32 = 19;
/// A concatenation's key type holds its parts' types, 6 bits each, first part highest.
const TYPE_BITS: u32 = 6;

/// The parts of a key type, first to last, each with its size in bytes (None: unknown).
fn key_parts(set: &SetInfo) -> Vec<(u32, Option<usize>)> {
    let mut types = Vec::new();
    let mut t = set.key_type;
    while t != 0 {
        types.push(t & ((1 << TYPE_BITS) - 1));
        t >>= TYPE_BITS;
    }
    types.reverse();
    let single = types.len() == 1;
    types
        .into_iter()
        .map(|t| {
            let size = match t {
                TYPE_INET_PROTOCOL => Some(1),
                TYPE_INET_SERVICE => Some(2),
                TYPE_IPADDR | TYPE_MARK => Some(4),
                TYPE_IP6ADDR => Some(16),
                _ if single => usize::try_from(set.key_len).ok(),
                _ => None,
            };
            (t, size)
        })
        .collect()
}

/// A key split into its typed parts (a concatenation pads every part to 4 bytes); None
/// when the type is not one portdrift knows.
fn split_key<'k>(set: &SetInfo, key: &'k [u8]) -> Option<Vec<(u32, &'k [u8])>> {
    let parts = key_parts(set);
    let concat = parts.len() > 1;
    let mut at = 0;
    let mut out = Vec::with_capacity(parts.len());
    for (kind, size) in parts {
        let size = size?;
        out.push((kind, key.get(at..at + size)?));
        at += if concat { align4(size) } else { size };
    }
    (!out.is_empty()).then_some(out)
}

/// nft lists a set's elements sorted by key, the key's raw bytes read as one integer
/// in host byte order (its `mpz` import): on a little-endian host the last byte counts
/// most. (So `tcp . 30080` comes before `tcp . 3001`: the port's low byte decides.)
fn compare_keys(a: &[u8], b: &[u8]) -> Ordering {
    let by_size = a.len().cmp(&b.len());
    if by_size.is_ne() {
        return by_size;
    }
    if cfg!(target_endian = "little") {
        a.iter().rev().cmp(b.iter().rev())
    } else {
        a.cmp(b)
    }
}

fn host_u32(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.try_into().ok()?))
}

/// IP protocol names as nft prints them.
fn protocol_name(number: u8) -> Option<&'static str> {
    Some(match number {
        1 => "icmp",
        2 => "igmp",
        6 => "tcp",
        17 => "udp",
        33 => "dccp",
        47 => "gre",
        50 => "esp",
        51 => "ah",
        58 => "ipv6-icmp",
        132 => "sctp",
        136 => "udplite",
        _ => return None,
    })
}

/// One typed value as nft's JSON gives it.
fn typed_value(kind: u32, bytes: &[u8]) -> Expr<'static> {
    match (kind, bytes) {
        (TYPE_INET_PROTOCOL, [p]) => match protocol_name(*p) {
            Some(name) => Expr::Str(Cow::Borrowed(name)),
            None => Expr::Uint(u64::from(*p)),
        },
        (TYPE_INET_SERVICE, [hi, lo]) => Expr::Uint(u64::from(u16::from_be_bytes([*hi, *lo]))),
        (TYPE_IPADDR, &[a, b, c, d]) => Expr::Str(Cow::Owned(Ipv4Addr::new(a, b, c, d).to_string())),
        (TYPE_IP6ADDR, _) => match <[u8; 16]>::try_from(bytes) {
            Ok(b) => Expr::Str(Cow::Owned(Ipv6Addr::from(b).to_string())),
            Err(_) => hex(bytes),
        },
        (TYPE_INTEGER | TYPE_MARK, _) => match host_u32(bytes) {
            Some(n) => Expr::Uint(u64::from(n)),
            None => hex(bytes),
        },
        _ => hex(bytes),
    }
}

fn hex(bytes: &[u8]) -> Expr<'static> {
    let mut text = String::from("0x");
    for b in bytes {
        text.push_str(&format!("{b:02x}"));
    }
    Expr::Str(Cow::Owned(text))
}

/// A key as nft's JSON gives it: one value, or `{"concat": [...]}`.
fn key_expr(set: &SetInfo, key: &[u8]) -> Expr<'static> {
    match split_key(set, key) {
        Some(parts) if parts.len() == 1 => typed_value(parts[0].0, parts[0].1),
        Some(parts) => object(
            "concat",
            Expr::List(parts.iter().map(|&(kind, b)| typed_value(kind, b)).collect()),
        ),
        None => hex(key),
    }
}

fn verdict_expr(data: &ElementData) -> Expr<'static> {
    match data {
        ElementData::Verdict { code, chain } => verdict_statement(*code, chain.as_deref()),
        ElementData::Value(v) => hex(v),
        ElementData::None => Expr::Null,
    }
}

/// A verdict as nft's JSON statement: `{"goto": {"target": "x"}}`, `{"drop": null}`.
fn verdict_statement(code: i32, chain: Option<&str>) -> Expr<'static> {
    let target = |kind: &'static str| {
        object(
            kind,
            fields(vec![(
                "target",
                Expr::Str(Cow::Owned(chain.unwrap_or_default().to_string())),
            )]),
        )
    };
    match code {
        0 => object("drop", Expr::Null),
        1 => object("accept", Expr::Null),
        -1 => object("continue", Expr::Null),
        -3 => target("jump"),
        -4 => target("goto"),
        -5 => object("return", Expr::Null),
        other => object("verdict", Expr::Int(i64::from(other))),
    }
}

fn element_ir(set: &SetInfo, element: RawElement) -> ElementIr<'static> {
    let verdict = match &element.data {
        ElementData::Verdict {
            code: -4,
            chain: Some(c),
        } => ElementVerdict::Goto(Cow::Owned(c.clone())),
        ElementData::Verdict {
            code: -3,
            chain: Some(c),
        } => ElementVerdict::Jump(Cow::Owned(c.clone())),
        ElementData::Verdict { code: 0, .. } => ElementVerdict::Drop,
        ElementData::Verdict { code: 1, .. } => ElementVerdict::Accept,
        other => ElementVerdict::Other(render_expr_string(&verdict_expr(other))),
    };
    ElementIr {
        key: render_expr_string(&key_expr(set, &element.key)),
        comment: element.comment.map(Cow::Owned),
        verdict,
        line: 0,
    }
}

fn object(kind: &'static str, body: Expr<'static>) -> Expr<'static> {
    Expr::Object(vec![(Cow::Borrowed(kind), body)])
}

fn fields(pairs: Vec<(&'static str, Expr<'static>)>) -> Expr<'static> {
    Expr::Object(pairs.into_iter().map(|(k, v)| (Cow::Borrowed(k), v)).collect())
}

// ------------------------------------------------------------------ rules

struct RuleContext<'c> {
    family: Family,
    sets: &'c HashMap<&'c str, &'c SetInfo>,
    /// The anonymous verdict maps' elements by map name. Each is bound to one rule and
    /// taken by it, so the maps' memory is handed back as the rules are read.
    inline_maps: &'c Mutex<HashMap<String, MapEntries>>,
    /// The anonymous maps not read yet, which their rules' readers fetch.
    deferred: &'c HashMap<&'c str, &'c SetInfo>,
    nfproto: u8,
    counts: &'c FetchCounts,
    /// When the read keeps constant maps: the table's handle, and the maps the rules'
    /// readers fetched, keyed as [`ConstantMaps`] keeps them.
    keep: Option<(u64, &'c FetchedMaps)>,
}

/// A rule of the table, decoded; None for another table's.
fn decode_rule(
    context: &RuleContext<'_>,
    position: usize,
    attrs: &[u8],
) -> Result<Option<DecodedRule>, String> {
    let mut chain = None;
    let mut handle = None;
    let mut expressions: &[u8] = &[];
    let mut comment = None;
    for attr in Attrs::new(attrs) {
        let (kind, value) = attr.map_err(|e| e.to_string())?;
        match kind {
            NFTA_RULE_TABLE if name(value).map_err(|e| e.to_string())? != KUBE_PROXY_TABLE => {
                return Ok(None);
            }
            NFTA_RULE_CHAIN => chain = Some(name(value).map_err(|e| e.to_string())?.to_string()),
            NFTA_RULE_HANDLE => handle = Some(be64(value).map_err(|e| e.to_string())?),
            NFTA_RULE_EXPRESSIONS => expressions = value,
            NFTA_RULE_USERDATA => comment = udata_comment(value),
            _ => {}
        }
    }
    let chain = chain.ok_or("a rule without a chain")?;
    let statements = Delinearizer::new(context)
        .run(expressions)
        .map_err(|e| format!("rule {} in {chain}: {e}", handle.unwrap_or_default()))?;
    let (rule, problem) = reduce_rule(handle, comment.as_deref(), &statements);
    Ok(Some(DecodedRule {
        chain: position,
        rule,
        problem,
    }))
}

// nf_tables.h expression attributes, by expression.
const NFTA_IMMEDIATE_DREG: u16 = 1;
const NFTA_IMMEDIATE_DATA: u16 = 2;
const NFTA_CMP_SREG: u16 = 1;
const NFTA_CMP_OP: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFTA_META_DREG: u16 = 1;
const NFTA_META_KEY: u16 = 2;
const NFTA_PAYLOAD_DREG: u16 = 1;
const NFTA_PAYLOAD_BASE: u16 = 2;
const NFTA_PAYLOAD_OFFSET: u16 = 3;
const NFTA_PAYLOAD_LEN: u16 = 4;
const NFTA_BITWISE_SREG: u16 = 1;
const NFTA_BITWISE_DREG: u16 = 2;
const NFTA_BITWISE_MASK: u16 = 4;
const NFTA_LOOKUP_SET: u16 = 1;
const NFTA_LOOKUP_SREG: u16 = 2;
const NFTA_LOOKUP_DREG: u16 = 3;
const NFTA_LOOKUP_FLAGS: u16 = 5;
const NFTA_NAT_TYPE: u16 = 1;
const NFTA_NAT_REG_ADDR_MIN: u16 = 3;
const NFTA_NAT_REG_PROTO_MIN: u16 = 5;
const NFTA_COUNTER_BYTES: u16 = 1;
const NFTA_COUNTER_PACKETS: u16 = 2;
const NFTA_NUMGEN_DREG: u16 = 1;
const NFTA_NUMGEN_MODULUS: u16 = 2;
const NFTA_NUMGEN_TYPE: u16 = 3;
const NFTA_NUMGEN_OFFSET: u16 = 4;
const NFT_LOOKUP_F_INV: u32 = 1;
const NFT_NAT_DNAT: u32 = 1;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;

/// What a register holds: the expression that loaded it, its type, and its width.
#[derive(Debug, Clone)]
struct Loaded {
    expr: Expr<'static>,
    kind: u32,
    len: usize,
    /// A literal (from `immediate`), kept for NAT addresses and ports.
    literal: Option<Vec<u8>>,
    /// A transport-header field (`th dport`), which a preceding `meta l4proto` names.
    transport_field: Option<&'static str>,
    /// A contiguous mask applied by `bitwise`: a prefix length.
    prefix: Option<u32>,
}

/// Turns the kernel's register machine back into nft's JSON statements, for the forms
/// portdrift needs to read or show; anything else becomes a statement naming the
/// expression, which reads nothing into the model.
struct Delinearizer<'c> {
    context: &'c RuleContext<'c>,
    /// 32-bit register slots (`NFT_REG32_00` is slot 0; `NFT_REG_1` is slots 0..4).
    registers: HashMap<u32, Loaded>,
    statements: Vec<Expr<'static>>,
}

/// `NFT_REG_1`..`NFT_REG_4` (16 bytes each) and `NFT_REG32_00`.. (4 bytes each) as one
/// numbering of 4-byte slots; None for the verdict register.
fn slot(register: u32) -> Option<u32> {
    match register {
        1..=4 => Some((register - 1) * 4),
        8..=23 => Some(register - 8),
        _ => None,
    }
}

impl<'c> Delinearizer<'c> {
    fn new(context: &'c RuleContext<'c>) -> Self {
        Delinearizer {
            context,
            registers: HashMap::new(),
            statements: Vec::new(),
        }
    }

    fn run(mut self, expressions: &[u8]) -> Result<Vec<Expr<'static>>, NetlinkError> {
        for expression in expressions_of(expressions) {
            let (expr_name, data) = expression?;
            self.expression(expr_name, data)?;
        }
        Ok(self.statements)
    }

    fn expression(&mut self, expr_name: &str, data: &[u8]) -> Result<(), NetlinkError> {
        let attrs = attr_map(data)?;
        let reg = |kind: u16| attrs.get(&kind).map(|v| be32(v)).transpose();
        match expr_name {
            "immediate" => {
                let dreg = reg(NFTA_IMMEDIATE_DREG)?.unwrap_or_default();
                let Some(nested) = attrs.get(&NFTA_IMMEDIATE_DATA) else {
                    return Ok(());
                };
                match slot(dreg) {
                    None => {
                        for attr in Attrs::new(nested) {
                            if let (NFTA_DATA_VERDICT, v) = attr? {
                                let (code, chain) = read_verdict(v)?;
                                self.statements.push(verdict_statement(code, chain.as_deref()));
                            }
                        }
                    }
                    Some(s) => {
                        let value = data_value(nested)?.to_vec();
                        self.load(s, Loaded::literal(value));
                    }
                }
            }
            "meta" => {
                if let (Some(dreg), Some(key)) = (reg(NFTA_META_DREG)?, reg(NFTA_META_KEY)?) {
                    self.load_reg(dreg, meta_load(key));
                } else {
                    self.other("meta");
                }
            }
            "payload" => match reg(NFTA_PAYLOAD_DREG)? {
                Some(dreg) => {
                    let base = reg(NFTA_PAYLOAD_BASE)?.unwrap_or_default();
                    let offset = reg(NFTA_PAYLOAD_OFFSET)?.unwrap_or_default();
                    let len = reg(NFTA_PAYLOAD_LEN)?.unwrap_or_default();
                    let loaded = self.payload_load(base, offset, len);
                    self.load_reg(dreg, loaded);
                }
                None => self.other("payload"),
            },
            "bitwise" => {
                let (Some(sreg), Some(dreg)) = (reg(NFTA_BITWISE_SREG)?, reg(NFTA_BITWISE_DREG)?) else {
                    return Ok(());
                };
                let mask = match attrs.get(&NFTA_BITWISE_MASK) {
                    Some(m) => data_value(m)?.to_vec(),
                    None => Vec::new(),
                };
                if let Some(mut loaded) = slot(sreg).and_then(|s| self.registers.get(&s)).cloned() {
                    loaded.prefix = prefix_len(&mask);
                    if loaded.prefix.is_none() {
                        loaded.expr = object(
                            "&",
                            Expr::List(vec![loaded.expr, typed_value(TYPE_INTEGER, &mask)]),
                        );
                    }
                    self.load_reg(dreg, loaded);
                }
            }
            "cmp" => {
                let sreg = reg(NFTA_CMP_SREG)?.unwrap_or_default();
                let op = match reg(NFTA_CMP_OP)?.unwrap_or_default() {
                    0 => "==",
                    1 => "!=",
                    2 => "<",
                    3 => "<=",
                    4 => ">",
                    _ => ">=",
                };
                let right = match attrs.get(&NFTA_CMP_DATA) {
                    Some(d) => data_value(d)?,
                    None => &[],
                };
                self.compare(sreg, op, right);
            }
            "lookup" => self.lookup(&attrs)?,
            "nat" => self.nat(&attrs)?,
            "counter" => {
                let number = |kind| attrs.get(&kind).map(|v| be64(v)).transpose();
                self.statements.push(object(
                    "counter",
                    fields(vec![
                        (
                            "packets",
                            Expr::Uint(number(NFTA_COUNTER_PACKETS)?.unwrap_or_default()),
                        ),
                        (
                            "bytes",
                            Expr::Uint(number(NFTA_COUNTER_BYTES)?.unwrap_or_default()),
                        ),
                    ]),
                ));
            }
            "numgen" => {
                if let Some(dreg) = reg(NFTA_NUMGEN_DREG)? {
                    let mode = if reg(NFTA_NUMGEN_TYPE)? == Some(1) {
                        "random"
                    } else {
                        "inc"
                    };
                    let expr = object(
                        "numgen",
                        fields(vec![
                            ("mode", Expr::Str(Cow::Borrowed(mode))),
                            (
                                "mod",
                                Expr::Uint(u64::from(reg(NFTA_NUMGEN_MODULUS)?.unwrap_or_default())),
                            ),
                            (
                                "offset",
                                Expr::Uint(u64::from(reg(NFTA_NUMGEN_OFFSET)?.unwrap_or_default())),
                            ),
                        ]),
                    );
                    self.load_reg(dreg, Loaded::typed(expr, TYPE_INTEGER, 4));
                }
            }
            "masq" => self.statements.push(object("masquerade", Expr::Null)),
            other => {
                // An expression that loads a register (fib, ct, ...) leaves it
                // unknown; one that acts is named.
                self.other(other);
            }
        }
        Ok(())
    }

    fn other(&mut self, expr_name: &str) {
        self.statements.push(fields(vec![(
            "netlink",
            Expr::Str(Cow::Owned(expr_name.to_string())),
        )]));
    }

    fn load_reg(&mut self, register: u32, loaded: Loaded) {
        if let Some(s) = slot(register) {
            self.load(s, loaded);
        }
    }

    fn load(&mut self, slot: u32, loaded: Loaded) {
        self.registers.insert(slot, loaded);
    }

    fn payload_load(&self, base: u32, offset: u32, len: u32) -> Loaded {
        let ip = match self.context.family {
            Family::Ipv4 => "ip",
            Family::Ipv6 => "ip6",
        };
        let field = match (self.context.family, base, offset, len) {
            (Family::Ipv4, NFT_PAYLOAD_NETWORK_HEADER, 12, 4) => Some((ip, "saddr", TYPE_IPADDR)),
            (Family::Ipv4, NFT_PAYLOAD_NETWORK_HEADER, 16, 4) => Some((ip, "daddr", TYPE_IPADDR)),
            (Family::Ipv6, NFT_PAYLOAD_NETWORK_HEADER, 8, 16) => Some((ip, "saddr", TYPE_IP6ADDR)),
            (Family::Ipv6, NFT_PAYLOAD_NETWORK_HEADER, 24, 16) => Some((ip, "daddr", TYPE_IP6ADDR)),
            (_, NFT_PAYLOAD_TRANSPORT_HEADER, 0, 2) => Some(("th", "sport", TYPE_INET_SERVICE)),
            (_, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2) => Some(("th", "dport", TYPE_INET_SERVICE)),
            _ => None,
        };
        match field {
            Some((protocol, name, kind)) => {
                let expr = object(
                    "payload",
                    fields(vec![
                        ("protocol", Expr::Str(Cow::Borrowed(protocol))),
                        ("field", Expr::Str(Cow::Borrowed(name))),
                    ]),
                );
                let mut loaded = Loaded::typed(expr, kind, len as usize);
                if protocol == "th" {
                    loaded.transport_field = Some(name);
                }
                loaded
            }
            None => {
                let base_name = match base {
                    0 => "ll",
                    NFT_PAYLOAD_NETWORK_HEADER => "nh",
                    _ => "th",
                };
                let expr = object(
                    "payload",
                    fields(vec![
                        ("base", Expr::Str(Cow::Borrowed(base_name))),
                        ("offset", Expr::Uint(u64::from(offset) * 8)),
                        ("len", Expr::Uint(u64::from(len) * 8)),
                    ]),
                );
                Loaded::typed(expr, 0, len as usize)
            }
        }
    }

    fn compare(&mut self, sreg: u32, op: &'static str, right: &[u8]) {
        let Some(loaded) = slot(sreg).and_then(|s| self.registers.get(&s)).cloned() else {
            return self.other("cmp");
        };
        let mut left = loaded.expr;
        let mut right_value = typed_value(loaded.kind, right);
        if let Some(len) = loaded.prefix {
            right_value = object(
                "prefix",
                fields(vec![("addr", right_value), ("len", Expr::Uint(u64::from(len)))]),
            );
        }
        // nft folds `meta l4proto tcp` into a following `th dport` match and prints
        // `tcp dport`.
        if let (Some(field), "==") = (loaded.transport_field, op)
            && let Some(protocol) = self.statements.last().and_then(l4proto_match)
        {
            self.statements.pop();
            left = object(
                "payload",
                fields(vec![
                    ("protocol", Expr::Str(Cow::Borrowed(protocol))),
                    ("field", Expr::Str(Cow::Borrowed(field))),
                ]),
            );
        }
        self.statements.push(object(
            "match",
            fields(vec![
                ("op", Expr::Str(Cow::Borrowed(op))),
                ("left", left),
                ("right", right_value),
            ]),
        ));
    }

    /// The value a lookup reads: one register, or a concatenation of registers filling
    /// the set's key.
    fn lookup_key(&self, sreg: u32, key_len: usize) -> Expr<'static> {
        let Some(mut at) = slot(sreg) else {
            return Expr::Null;
        };
        let mut parts = Vec::new();
        let mut covered = 0;
        while covered < key_len.max(1) {
            let Some(loaded) = self.registers.get(&at) else {
                break;
            };
            parts.push(loaded.expr.clone());
            let width = align4(loaded.len.max(1));
            covered += width;
            at += (width / 4) as u32;
        }
        match parts.len() {
            0 => Expr::Null,
            1 => parts.pop().unwrap_or(Expr::Null),
            _ => object("concat", Expr::List(parts)),
        }
    }

    fn lookup(&mut self, attrs: &HashMap<u16, &[u8]>) -> Result<(), NetlinkError> {
        let set_name = match attrs.get(&NFTA_LOOKUP_SET) {
            Some(v) => name(v)?.to_string(),
            None => {
                self.other("lookup");
                return Ok(());
            }
        };
        let get = |kind| attrs.get(&kind).map(|v| be32(v)).transpose();
        let sreg = get(NFTA_LOOKUP_SREG)?.unwrap_or_default();
        let key_len = self
            .context
            .sets
            .get(set_name.as_str())
            .map_or(4, |s| s.key_len as usize);
        let key = self.lookup_key(sreg, key_len);
        match get(NFTA_LOOKUP_DREG)? {
            // A verdict map: `key vmap { ... }` inline, `key vmap @name` named.
            Some(0) => {
                let entries = self
                    .context
                    .inline_maps
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&set_name);
                let data = match entries {
                    Some(entries) => object(
                        "set",
                        Expr::List(
                            entries
                                .into_iter()
                                .map(|(k, v)| Expr::List(vec![k, verdict_expr(&v)]))
                                .collect(),
                        ),
                    ),
                    None => Expr::Str(Cow::Owned(format!("@{set_name}"))),
                };
                self.statements
                    .push(object("vmap", fields(vec![("key", key), ("data", data)])));
            }
            Some(dreg) => {
                let expr = object(
                    "map",
                    fields(vec![
                        ("key", key),
                        ("data", Expr::Str(Cow::Owned(format!("@{set_name}")))),
                    ]),
                );
                self.load_reg(dreg, Loaded::typed(expr, 0, 4));
            }
            None => {
                let inverted = get(NFTA_LOOKUP_FLAGS)?.unwrap_or_default() & NFT_LOOKUP_F_INV != 0;
                self.statements.push(object(
                    "match",
                    fields(vec![
                        ("op", Expr::Str(Cow::Borrowed(if inverted { "!=" } else { "==" }))),
                        ("left", key),
                        ("right", Expr::Str(Cow::Owned(format!("@{set_name}")))),
                    ]),
                ));
            }
        }
        Ok(())
    }

    fn nat(&mut self, attrs: &HashMap<u16, &[u8]>) -> Result<(), NetlinkError> {
        let get = |kind| attrs.get(&kind).map(|v| be32(v)).transpose();
        let kind = if get(NFTA_NAT_TYPE)? == Some(NFT_NAT_DNAT) {
            "dnat"
        } else {
            "snat"
        };
        let register = |kind| -> Result<Option<&Loaded>, NetlinkError> {
            Ok(get(kind)?.and_then(slot).and_then(|s| self.registers.get(&s)))
        };
        let mut body = Vec::new();
        if let Some(addr) = register(NFTA_NAT_REG_ADDR_MIN)? {
            let value = match addr.literal.as_deref() {
                Some(&[a, b, c, d]) => Expr::Str(Cow::Owned(IpAddr::from([a, b, c, d]).to_string())),
                Some(bytes) => match <[u8; 16]>::try_from(bytes) {
                    Ok(b) => Expr::Str(Cow::Owned(IpAddr::from(b).to_string())),
                    Err(_) => hex(bytes),
                },
                None => addr.expr.clone(),
            };
            body.push(("addr", value));
        }
        if let Some(port) = register(NFTA_NAT_REG_PROTO_MIN)? {
            let value = match port.literal.as_deref() {
                Some(&[hi, lo, ..]) => Expr::Uint(u64::from(u16::from_be_bytes([hi, lo]))),
                _ => port.expr.clone(),
            };
            body.push(("port", value));
        }
        self.statements.push(object(kind, fields(body)));
        Ok(())
    }
}

impl Loaded {
    fn typed(expr: Expr<'static>, kind: u32, len: usize) -> Loaded {
        Loaded {
            expr,
            kind,
            len,
            literal: None,
            transport_field: None,
            prefix: None,
        }
    }

    fn literal(value: Vec<u8>) -> Loaded {
        Loaded {
            expr: hex(&value),
            kind: 0,
            len: value.len(),
            literal: Some(value),
            transport_field: None,
            prefix: None,
        }
    }
}

/// `meta KEY` as a register load, typed as nft types it.
fn meta_load(key: u32) -> Loaded {
    let (name, kind, len) = match key {
        3 => ("mark", TYPE_MARK, 4),
        4 => ("iif", TYPE_INTEGER, 4),
        5 => ("oif", TYPE_INTEGER, 4),
        6 => ("iifname", 0, 16),
        7 => ("oifname", 0, 16),
        15 => ("nfproto", 0, 1),
        16 => ("l4proto", TYPE_INET_PROTOCOL, 1),
        _ => ("unknown", 0, 4),
    };
    let mut loaded = Loaded::typed(
        object("meta", fields(vec![("key", Expr::Str(Cow::Borrowed(name)))])),
        kind,
        len,
    );
    if name == "unknown" {
        loaded.expr = object("meta", fields(vec![("key", Expr::Uint(u64::from(key)))]));
    }
    loaded
}

/// `meta l4proto P` (an `==` match) → P.
fn l4proto_match(statement: &Expr<'static>) -> Option<&'static str> {
    let Expr::Object(outer) = statement else {
        return None;
    };
    let [(kind, Expr::Object(body))] = outer.as_slice() else {
        return None;
    };
    if kind != "match" {
        return None;
    }
    let get = |k: &str| body.iter().find(|(n, _)| n == k).map(|(_, v)| v);
    let is_l4proto = matches!(get("left"), Some(Expr::Object(m))
        if matches!(m.as_slice(), [(k, Expr::Object(f))] if k == "meta"
            && matches!(f.as_slice(), [(n, Expr::Str(v))] if n == "key" && v == "l4proto")));
    if !is_l4proto || !matches!(get("op"), Some(Expr::Str(op)) if op == "==") {
        return None;
    }
    match get("right") {
        Some(Expr::Str(Cow::Borrowed(p))) if matches!(*p, "tcp" | "udp" | "sctp" | "dccp" | "udplite") => {
            Some(p)
        }
        _ => None,
    }
}

/// The prefix length of a contiguous mask (`ff ff 00 00` → 16); None otherwise, and
/// for a mask that keeps no bit.
fn prefix_len(mask: &[u8]) -> Option<u32> {
    shared_prefix_len(mask).filter(|&ones| ones > 0)
}

/// Reads `ip kube-proxy` and `ip6 kube-proxy` from the kernel over netlink (the current
/// thread's network namespace) into the [`RuleSource`]s [`parse_ruleset_json`] gives
/// for the same tables' `nft -j` dump; with the bytes of netlink messages read. Needs
/// CAP_NET_ADMIN.
pub fn read_tables_netlink(
    origin: &str,
    limits: NetlinkLimits,
) -> Result<(Vec<RuleSource>, u64), NetlinkError> {
    let read = read_tables(limits, None)?;
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
    let read = read_tables(limits, Some(maps))?;
    Ok((build_rule_sources(read.parsed, origin), read.bytes))
}

#[cfg(test)]
mod tests;
