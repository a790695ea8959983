//! kube-proxy's nftables tables read straight from the kernel over netlink, into the
//! same intermediate form the `nft -j` parser builds, so both give the same
//! [`RuleDump`]s.
//!
//! Why: on a large node `nft -j list table ip kube-proxy` takes seconds and a great
//! deal of memory, most of it nft building and printing its own JSON. The kernel hands
//! the same objects over `NETLINK_NETFILTER` in compact binary messages, which are
//! decoded one datagram at a time by [`crate::decode::netlink::nftables`]; nothing of
//! the dump is held whole. This is the transport: which dumps, on which sockets, and
//! which maps are read key by key or kept from the last read.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::decode::netlink::nfproto as nfproto_of;
use crate::decode::netlink::nftables::{
    DecodedRule, KeptEntries, RuleContext, SetInfo, chain_of_table, decode_rule, read_set,
};
use crate::decode::netlink::{reply, request};
use crate::decode::nftables::{KUBE_PROXY_TABLE, ParsedRuleset, TableIr, build_rule_dumps, unparsed};
use crate::heart::model::{Family, RuleDump, Unparsed};
use crate::sources::netlink::blocks::{ReadPlan, Readers, read_in_order};
use crate::sources::netlink::follow::ATTEMPTS;
use crate::sources::netlink::{Conn, NetlinkError, NetlinkLimits, Recording, restart};

mod first_half;
mod following;
mod maps;

use self::first_half::FirstHalf;
pub use self::following::{KeptNft, read_tables_following};
pub use self::maps::{ConstantMaps, MapFetches};
use self::maps::{
    FetchCounts, FetchedMaps, MapKey, MapReuse, WantedMap, fetch_map, maps_wanted, read_elements,
};

/// What one read gave.
#[derive(Debug, Default)]
struct NetlinkRead<'a> {
    parsed: ParsedRuleset<'a>,
    /// Bytes of netlink messages received.
    bytes: u64,
}

/// What the rules' readers of one table share.
struct ReadContext<'c> {
    rules: RuleContext<'c>,
    /// The anonymous maps not read yet, which their rules' readers fetch.
    deferred: &'c HashMap<&'c str, &'c SetInfo>,
    /// Constant maps kept from earlier reads, which a rule's reader takes rather than
    /// fetch (a following read, which knows which maps it needs only from its rules).
    reuse: Option<&'c HashMap<MapKey, KeptEntries>>,
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
        match read_both(&mut conn, readers, keep.as_deref_mut()) {
            // A dump the kernel marked interrupted: the ruleset changed under it.
            Err(NetlinkError::Unstable(_)) => continue,
            Err(e) => return Err(e),
            Ok((parsed, _)) if conn.generation()? == before => {
                return Ok(NetlinkRead {
                    parsed,
                    bytes: conn.bytes + extra_bytes.load(AtomicOrdering::Relaxed),
                });
            }
            // Changed between two dumps: the pieces may not fit together. Again.
            Ok(_) => continue,
        }
    }
    Err(NetlinkError::Unstable(ATTEMPTS))
}

/// What a read learnt of one family's table besides its IR: what a following read
/// needs to read parts of it again.
#[derive(Debug)]
pub(crate) struct TableMeta {
    pub(crate) family: Family,
    pub(crate) handle: Option<u64>,
    /// Its sets and maps, named and anonymous, in the kernel's order.
    pub(crate) sets: Vec<SetInfo>,
}

/// One attempt at both families' tables. With `keep`, constant anonymous maps read
/// before are reused, and this read's are kept there: a map's elements are the same
/// under the same handles whatever the generation, so even an attempt that is retried
/// keeps true ones.
fn read_both(
    conn: &mut Conn,
    readers: Readers<'_>,
    keep: Option<&mut ConstantMaps>,
) -> Result<(ParsedRuleset<'static>, Vec<TableMeta>), NetlinkError> {
    let mut parsed = ParsedRuleset::default();
    let mut reuse = keep.as_deref().map(|k| MapReuse {
        previous: &k.maps,
        next: HashMap::new(),
        reused: 0,
    });
    let counts = FetchCounts::default();
    let mut metas = Vec::new();
    for family in [Family::Ipv4, Family::Ipv6] {
        metas.extend(read_family(
            conn,
            readers,
            family,
            &mut parsed,
            reuse.as_mut(),
            &counts,
        )?);
    }
    let kept = reuse.map(|r| (r.next, r.reused));
    if let (Some(keep), Some((next, reused))) = (keep, kept) {
        keep.maps = next;
        keep.reused = reused;
        keep.fetched = counts.fetches();
    }
    Ok((parsed, metas))
}

/// Chains whose rules are one unit of work of the parallel readers.
const RULE_BLOCK: usize = 128;
/// Blocks of decoded rules the readers may hold ahead of the table being built.
const RULE_LOOKAHEAD: usize = 8;

/// One table's chains, maps and rules. The chain list and the maps' elements are read
/// first, at once over several sockets: rules refer to the inline maps. The rules then
/// follow, chain by chain, also spread over the sockets.
///
/// Why so many dumps: the kernel finds a set to dump by walking the table's list of
/// sets, and a kube-proxy table holds one anonymous map per Service, so its thousands
/// of element dumps are most of a large node's read, all of it kernel time.
fn read_family(
    conn: &mut Conn,
    readers: Readers<'_>,
    family: Family,
    parsed: &mut ParsedRuleset<'static>,
    mut reuse: Option<&mut MapReuse<'_>>,
    counts: &FetchCounts,
) -> Result<Option<TableMeta>, NetlinkError> {
    let nfproto = nfproto_of(family);
    let TableLookup::Present { handle } = look_up_table(conn, family)? else {
        return Ok(None);
    };
    let at = FamilyRead {
        readers,
        family,
        nfproto,
        handle,
        counts,
    };
    let table = parsed.table_mut(family);
    let (sets, problems) = read_sets(conn, family)?;
    table.unparsed.extend(problems);
    let mut first = FirstHalf::plan(&at, &sets, reuse.as_deref_mut());
    let chains = first.read(conn, &at, table, reuse.as_deref_mut())?;
    read_table_rules(conn, &at, table, &sets, first, &chains, reuse)?;
    Ok(Some(TableMeta { family, handle, sets }))
}

/// Whether kube-proxy's table of a family exists, and its handle when it does.
enum TableLookup {
    Absent,
    Present { handle: Option<u64> },
}

fn look_up_table(conn: &mut Conn, family: Family) -> Result<TableLookup, NetlinkError> {
    let mut handle = None;
    let asked = conn.exchange("the table", &request::table(family, KUBE_PROXY_TABLE), |attrs| {
        handle = reply::table_handle(attrs)?;
        Ok(())
    });
    match asked {
        // The table does not exist: kube-proxy does not run in nftables mode here.
        Err(NetlinkError::Refused { source, .. }) if source.raw_os_error() == Some(libc::ENOENT) => {
            Ok(TableLookup::Absent)
        }
        other => other.map(|()| TableLookup::Present { handle }),
    }
}

/// What every step of one family's read shares.
struct FamilyRead<'r> {
    readers: Readers<'r>,
    family: Family,
    nfproto: u8,
    /// The table's handle, which keys its constant maps.
    handle: Option<u64>,
    counts: &'r FetchCounts,
}

impl FamilyRead<'_> {
    /// How [`ConstantMaps`] keys `set`, when it keeps it.
    fn constant_key(&self, set: &SetInfo) -> Option<MapKey> {
        match (self.handle, set.handle) {
            (Some(table), Some(handle)) if set.is_constant_map() => Some((self.nfproto, table, handle)),
            _ => None,
        }
    }
}

/// The second half of a table's read: the rules of `chains`, over the readers, with the
/// maps the first half left to them. With `reuse`, the constant maps they fetch are kept.
fn read_table_rules(
    conn: &mut Conn,
    at: &FamilyRead<'_>,
    table: &mut TableIr<'static>,
    sets: &[SetInfo],
    first: FirstHalf<'_>,
    chains: &[String],
    reuse: Option<&mut MapReuse<'_>>,
) -> Result<(), NetlinkError> {
    let sets_by_name: HashMap<&str, &SetInfo> = sets.iter().map(|s| (s.name.as_str(), s)).collect();
    let fetched_for_keep = Mutex::new(Vec::new());
    let inline_maps = Mutex::new(first.inline_maps);
    let context = ReadContext {
        rules: RuleContext {
            family: at.family,
            sets: &sets_by_name,
            inline_maps: &inline_maps,
        },
        deferred: &first.deferred,
        reuse: None,
        nfproto: at.nfproto,
        counts: at.counts,
        keep: at
            .handle
            .filter(|_| reuse.is_some())
            .map(|table| (table, &fetched_for_keep)),
    };
    read_rules_in_order(conn, at.readers, &context, chains, &mut |rule| {
        add_rule(table, chains, rule)
    })?;
    if let Some(reuse) = reuse {
        reuse.next.extend(
            fetched_for_keep
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner),
        );
    }
    Ok(())
}

/// A rule read, into its chain; or what could not be read of it.
fn add_rule(table: &mut TableIr<'static>, chains: &[String], rule: Result<DecodedRule, Unparsed>) {
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

/// The rules of `chains`, read over the readers and handed to `take` in the chains'
/// order: each rule decoded, or what could not be.
fn read_rules_in_order(
    conn: &mut Conn,
    readers: Readers<'_>,
    context: &ReadContext<'_>,
    chains: &[String],
    take: &mut dyn FnMut(Result<DecodedRule, Unparsed>),
) -> Result<(), NetlinkError> {
    let plan = ReadPlan {
        block: RULE_BLOCK,
        lookahead: RULE_LOOKAHEAD,
        budget: usize::MAX,
    };
    let positions: Vec<usize> = (0..chains.len()).collect();
    read_in_order(
        conn,
        readers,
        &positions,
        plan,
        &|conn, &chain: &usize, out: &mut Vec<Result<DecodedRule, Unparsed>>| {
            read_chain_rules(conn, context, chains, chain, out)
        },
        &mut |rules: &mut Vec<Result<DecodedRule, Unparsed>>| {
            rules.drain(..).for_each(&mut *take);
            Ok(())
        },
    )
}

/// The table's sets and maps, in the kernel's order, with what could not be read.
fn read_sets(conn: &mut Conn, family: Family) -> Result<(Vec<SetInfo>, Vec<Unparsed>), NetlinkError> {
    let (mut sets, mut problems) = (Vec::new(), Vec::new());
    conn.exchange("the sets", &request::sets(family, KUBE_PROXY_TABLE), |attrs| {
        match read_set(attrs) {
            Ok(set) => sets.push(set),
            Err(reason) => problems.push(unparsed(0, "(a set)", reason.to_string())),
        }
        Ok(())
    })?;
    // A following reader keeps them between reads.
    sets.shrink_to_fit();
    Ok((sets, problems))
}

/// The table's chains in the kernel's order, from one dump of the family's (the kernel
/// filters chain dumps by family only), then filtered by table.
fn read_chains(conn: &mut Conn, family: Family) -> Result<(Vec<String>, Vec<Unparsed>), NetlinkError> {
    let mut names = Vec::new();
    let mut problems = Vec::new();
    conn.exchange("the chains", &request::chains(family), |attrs| {
        match chain_of_table(attrs) {
            Ok(Some(chain)) => names.push(chain),
            Ok(None) => {}
            Err(reason) => problems.push(unparsed(0, "(a chain)", reason.to_string())),
        }
        Ok(())
    })?;
    // Held through the whole read, next to the table's own copy of each name.
    names.shrink_to_fit();
    Ok((names, problems))
}

/// One chain's rules, decoded. One dump per chain, not one for the table: the kernel
/// resumes a table-wide rule dump by walking every rule before the resume point again,
/// once per datagram, which is quadratic; chain by chain it finds each chain by hash.
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
    let mut held: Vec<Vec<u8>> = Vec::new();
    let mut wanted: Vec<WantedMap<'_>> = Vec::new();
    let decode = |attrs: &[u8], out: &mut Vec<Result<DecodedRule, Unparsed>>| match decode_rule(
        &context.rules,
        chain,
        attrs,
    ) {
        Ok(Some(rule)) => out.push(Ok(rule)),
        Ok(None) => {}
        Err(reason) => out.push(Err(unparsed(0, "(a rule)", reason.to_string()))),
    };
    let rules = request::rules(context.rules.family, KUBE_PROXY_TABLE, &chains[chain]);
    conn.exchange("the rules", &rules, |attrs| {
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
    })?;
    for map in wanted {
        fetch_map(conn, context, map, out)?;
    }
    for attrs in held {
        decode(&attrs, out);
    }
    Ok(())
}

/// Reads `ip kube-proxy` and `ip6 kube-proxy` from the kernel over netlink (the current
/// thread's network namespace) into the [`RuleDump`]s
/// [`parse_ruleset_json`](crate::decode::nftables::parse_ruleset_json) gives for the
/// same tables' `nft -j` dump; with the bytes of netlink messages read. Needs
/// CAP_NET_ADMIN.
pub fn read_tables_netlink(
    origin: &str,
    limits: NetlinkLimits,
) -> Result<(Vec<RuleDump>, u64), NetlinkError> {
    let read = read_tables(limits, None, None)?;
    Ok((build_rule_dumps(&read.parsed, origin), read.bytes))
}

/// [`read_tables_netlink`] for a reader that reads the same node again: the constant
/// anonymous maps of the last read are reused rather than dumped again, and this read's
/// are kept in `maps` for the next.
pub fn read_tables_netlink_keeping(
    origin: &str,
    limits: NetlinkLimits,
    maps: &mut ConstantMaps,
) -> Result<(Vec<RuleDump>, u64), NetlinkError> {
    let read = read_tables(limits, Some(maps), None)?;
    Ok((build_rule_dumps(&read.parsed, origin), read.bytes))
}

/// [`read_tables_netlink`] that also returns the raw messages it decoded, for
/// [`crate::decode::netlink::nftables::decode_rule_dumps`] to decode again (fixtures).
pub fn record_tables_netlink(
    origin: &str,
    limits: NetlinkLimits,
) -> Result<(Vec<RuleDump>, Vec<u8>), NetlinkError> {
    let recording = Arc::new(Recording::default());
    let read = read_tables(limits, None, Some(&recording))?;
    Ok((build_rule_dumps(&read.parsed, origin), recording.bytes()))
}
