//! iptables-nft's tables read straight from the kernel over netlink and rendered line
//! by line exactly as `iptables-nft-save` prints them, into the same parser the tool's
//! output goes through: both ways give the same rules, texts and line numbers, so a
//! finding, a repair's rule spec and a snapshot read the same either way.
//!
//! Why: on a large node `iptables-nft-save` spends most of its CPU on its own
//! bookkeeping of tens of thousands of chains (docs/performance.md#a-live-scan); the
//! kernel answers the same questions far faster when each chain's rules are asked for by
//! name (one dump of a 10,000-Service nat table took 31 s, a dump per chain about 2 s:
//! docs/performance.md#the-live-read).
//!
//! This is the transport (which dumps, on which sockets, in which order); the messages
//! are rendered by [`crate::decode::netlink::iptables`].

use std::fmt::Write as _;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::decode::iptables::{LineParser, SourceHint};
use crate::decode::netlink::iptables::{
    ChainInfo, SAVE_FOOTER, TABLES, declare_chains, read_chain, render_rule, rule_handle, save_header,
    split_handle,
};
use crate::decode::netlink::nfproto;
use crate::decode::netlink::request;
use crate::heart::model::{Backend, Family, RuleDump};
use crate::sources::netlink::blocks::{ReadPlan, Readers, read_in_order};
use crate::sources::netlink::follow::{ATTEMPTS, Named, Stale, Stamp, follow};
use crate::sources::netlink::kept::{BLOCK, KeptBlock, KeptFamily, KeptIptablesTable, update_table};
use crate::sources::netlink::{Conn, NetlinkError, NetlinkLimits, Recording, restart};
use crate::sources::rule_changes::ChangeJournal;

/// Reads one family's iptables-nft tables from the current network namespace and parses
/// them as `iptables-nft-save`'s output. None: the family has no iptables-nft table
/// (the tool would print nothing). Also returns the bytes of netlink messages read.
pub fn read_rules_netlink(
    family: Family,
    origin: &str,
    limits: NetlinkLimits,
) -> Result<(Option<RuleDump>, u64), NetlinkError> {
    let hint = SourceHint {
        backend: Some(Backend::IptablesNft),
        family: Some(family),
        whole: true,
    };
    let deadline = Instant::now() + limits.timeout;
    let mut conn = Conn::open(limits, deadline, None)?;
    let extra_bytes = AtomicU64::new(0);
    for _ in 0..ATTEMPTS {
        let before = conn.generation()?;
        let mut parser = LineParser::new(origin, hint);
        let read = Readers {
            limits,
            deadline,
            bytes: &extra_bytes,
            recording: None,
        };
        let mut sink = |handle, line: &str| parser.line_with_handle(line, handle);
        match render_family(&mut conn, read, family, &mut sink, None) {
            Err(NetlinkError::Unstable(_)) => continue,
            Err(e) => return Err(e),
            Ok(()) if conn.generation()? == before => {
                let parsed = (parser.lines() > 0).then(|| parser.finish());
                return Ok((parsed, conn.bytes + extra_bytes.load(Ordering::Relaxed)));
            }
            // Changed between two dumps: the pieces may not fit together. Again.
            Ok(()) => continue,
        }
    }
    Err(NetlinkError::Unstable(ATTEMPTS))
}

/// Renders one family's tables as `iptables-nft-save` prints them (without its
/// timestamped header and footer comments), handing each line to `sink`.
pub fn render_save(
    family: Family,
    limits: NetlinkLimits,
    sink: &mut dyn FnMut(&str),
) -> Result<(), NetlinkError> {
    render_save_recorded(family, limits, None, sink)
}

/// [`render_save`] that also returns the raw messages it rendered, for
/// [`crate::decode::netlink::iptables::render_save`] to render again (fixtures).
pub fn record_save(family: Family, limits: NetlinkLimits) -> Result<(Vec<String>, Vec<u8>), NetlinkError> {
    let recording = Arc::new(Recording::default());
    let mut lines = Vec::new();
    render_save_recorded(family, limits, Some(&recording), &mut |line| {
        lines.push(line.to_string())
    })?;
    Ok((lines, recording.bytes()))
}

fn render_save_recorded(
    family: Family,
    limits: NetlinkLimits,
    recording: Option<&Arc<Recording>>,
    sink: &mut dyn FnMut(&str),
) -> Result<(), NetlinkError> {
    let deadline = Instant::now() + limits.timeout;
    let mut conn = Conn::open(limits, deadline, recording)?;
    restart(recording);
    let bytes = AtomicU64::new(0);
    let read = Readers {
        limits,
        deadline,
        bytes: &bytes,
        recording,
    };
    // Lines as the tool prints them; the handles are for findings.
    render_family(&mut conn, read, family, &mut |_, line| sink(line), None)
}

/// How many blocks the readers may run ahead of the parser.
const LOOKAHEAD: usize = 1024;
/// How much text the readers may hold ahead of the parser. Generous because one chain
/// can take as long as thousands: kube-proxy's dispatch chains hold a rule per Service,
/// and the kernel resumes a chain's dump by walking it from its first rule, so while
/// one reader is on such a chain the other keeps reading the small ones after it.
const BUDGET: usize = 8 << 20;

/// Appends the rules of one chain, each line ending in `\n` and starting with the
/// rule's handle ([`split_handle`] takes it off again).
fn render_chain(
    conn: &mut Conn,
    family: Family,
    table: &str,
    chain: &str,
    out: &mut String,
) -> Result<(), NetlinkError> {
    // One dump per chain, not one for the table: the kernel resumes a table-wide rule
    // dump by walking every rule before the resume point again, once per datagram,
    // which is quadratic, where it finds each chain by hash.
    let mut failed = None;
    conn.exchange("the rules", &request::rules(family, table, chain), |attrs| {
        if let Some(handle) = rule_handle(attrs) {
            let _ = write!(out, "{handle} ");
        }
        match render_rule(out, family, chain, attrs) {
            Ok(()) => out.push('\n'),
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
        Ok(())
    })?;
    failed.map_or(Ok(()), |e| Err(e.into()))
}

/// Hands every chain's rules to `sink` in the chains' order, each line as the tool
/// prints it with its rule's handle apart. A large table is read by several sockets at
/// once, block by block.
fn render_rules(
    conn: &mut Conn,
    readers: Readers<'_>,
    family: Family,
    table: &str,
    chains: &[ChainInfo],
    sink: &mut dyn FnMut(Option<NonZeroU64>, &str),
    mut keep: Option<&mut Vec<KeptBlock>>,
) -> Result<(), NetlinkError> {
    let mut handed = 0;
    let plan = ReadPlan {
        block: BLOCK,
        lookahead: LOOKAHEAD,
        budget: BUDGET,
    };
    read_in_order(
        conn,
        readers,
        chains,
        plan,
        &|conn, chain: &ChainInfo, text: &mut String| render_chain(conn, family, table, &chain.name, text),
        &mut |text: &mut String| {
            // Blocks come in order, BLOCK chains each (all of them when they fit one).
            let count = BLOCK.min(chains.len() - handed);
            handed += count;
            match keep.as_deref_mut() {
                Some(blocks) if count > 0 => blocks.push(KeptBlock::pack(count, text)),
                Some(_) => {}
                None => {
                    for line in text.lines() {
                        let (handle, line) = split_handle(line);
                        sink(handle, line);
                    }
                }
            }
            text.clear();
            Ok(())
        },
    )
}

/// Hands the family's lines to `sink` as [`KeptFamily::render_lines`] does (a rule's
/// with its handle). With `keep`, the tables are kept there instead.
fn render_family(
    conn: &mut Conn,
    readers: Readers<'_>,
    family: Family,
    sink: &mut dyn FnMut(Option<NonZeroU64>, &str),
    mut keep: Option<&mut Vec<KeptIptablesTable>>,
) -> Result<(), NetlinkError> {
    let mut present = Vec::new();
    for table in TABLES {
        match conn.exchange("the table", &request::table(family, table), |_| Ok(())) {
            Err(NetlinkError::Refused { source, .. }) if source.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e),
            Ok(()) => present.push(table),
        }
    }
    if present.is_empty() {
        return Ok(());
    }
    // One chain dump for the family (the kernel filters chain dumps by family only),
    // sorted into the tables.
    let mut chains: Vec<Vec<ChainInfo>> = present.iter().map(|_| Vec::new()).collect();
    conn.exchange("the chains", &request::chains(family), |attrs| {
        let (table, chain) = read_chain(attrs)?;
        if let Some(i) = present.iter().position(|t| *t == table) {
            chains[i].push(chain);
        }
        Ok(())
    })?;
    sink(None, &save_header(family));
    for (table, mut chains) in present.into_iter().zip(chains) {
        declare_chains(table, &mut chains, &mut |line| sink(None, line))?;
        match keep.as_deref_mut() {
            Some(tables) => {
                let mut blocks = Vec::new();
                render_rules(conn, readers, family, table, &chains, sink, Some(&mut blocks))?;
                tables.push(KeptIptablesTable {
                    name: table,
                    chains,
                    blocks,
                });
            }
            None => render_rules(conn, readers, family, table, &chains, sink, None)?,
        }
        sink(None, "COMMIT");
    }
    sink(None, SAVE_FOOTER);
    Ok(())
}

pub use crate::sources::netlink::follow::ReadKind;

/// [`read_rules_netlink`] for a reader that reads the same tables again and again: it
/// keeps what it read in `kept`, and when the notifications in `journal` name what
/// changed since, re-reads only those chains (with their block's neighbours). The
/// result is the same as a whole read's, line for line. `whole` asks for a whole read;
/// it is cleared once one completes (churn can keep one from completing).
pub fn read_rules_following(
    family: Family,
    origin: &str,
    limits: NetlinkLimits,
    journal: &ChangeJournal,
    kept: &mut Option<KeptFamily>,
    whole: &mut bool,
) -> Result<(Option<RuleDump>, u64, ReadKind), NetlinkError> {
    let deadline = Instant::now() + limits.timeout;
    let mut conn = Conn::open(limits, deadline, None)?;
    let extra_bytes = AtomicU64::new(0);
    let readers = Readers::new(limits, deadline, &extra_bytes, None);
    let mut followed = follow(
        &mut conn,
        journal,
        &[(nfproto(family), &TABLES[..])],
        kept,
        whole,
        &mut |conn, state, named| update_family(conn, family, state, named),
        &mut |conn| {
            let mut tables = Vec::new();
            render_family(conn, readers, family, &mut |_, _| {}, Some(&mut tables))?;
            Ok(KeptFamily {
                stamp: Stamp::default(),
                tables,
            })
        },
    )?;
    let hint = SourceHint {
        backend: Some(Backend::IptablesNft),
        family: Some(family),
        whole: true,
    };
    let mut parser = LineParser::new(origin, hint);
    followed
        .state
        .render_lines(family, &mut |handle, line| parser.line_with_handle(line, handle))?;
    let parsed = (parser.lines() > 0).then(|| parser.finish());
    let of = followed.state.tables.iter().map(|t| t.chains.len()).sum();
    let kind = followed.finish(kept, of);
    Ok((parsed, conn.bytes + extra_bytes.load(Ordering::Relaxed), kind))
}

/// Brings the kept tables of one family up to date with what the notifications named.
fn update_family(
    conn: &mut Conn,
    family: Family,
    kept: &mut KeptFamily,
    named: &Named,
) -> Result<usize, Stale> {
    if let Some((_, table, _)) = named
        .iter()
        .find(|(_, t, _)| !kept.tables.iter().any(|k| k.name == t.as_str()))
    {
        return Err(Stale::Whole(format!("table {table} was created")));
    }
    let mut fresh: Option<Vec<(String, ChainInfo)>> = None;
    if named.iter().any(|(_, _, c)| c.chain_list && !c.whole) {
        let mut list = Vec::new();
        conn.exchange("the chains", &request::chains(family), |attrs| {
            list.push(read_chain(attrs)?);
            Ok(())
        })?;
        fresh = Some(list);
    }
    let mut read = 0;
    for table in &mut kept.tables {
        let Some((_, _, changes)) = named.iter().find(|(_, t, _)| t.as_str() == table.name) else {
            continue;
        };
        let list = match (&fresh, changes.chain_list) {
            (Some(all), true) => Some(
                all.iter()
                    .filter(|(t, _)| t.as_str() == table.name)
                    .map(|(_, c)| c.clone())
                    .collect(),
            ),
            _ => None,
        };
        let name = table.name;
        read += update_table(table, list, changes, &mut |chain, out| {
            render_chain(conn, family, name, chain, out)
        })?;
    }
    Ok(read)
}
