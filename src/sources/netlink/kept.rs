//! iptables-nft's tables as the last read rendered them, kept between reads so that a
//! read after a change re-reads only the chains the kernel's notifications named.
//!
//! Each table keeps its chain list (sorted as `iptables-nft-save` declares them) and its
//! rule text in blocks of consecutive chains, each block LZ4-compressed: a 10,000-Service
//! node's rules, 26 MB as `iptables-save` prints them, are kept in 4.1 MB
//! (docs/performance.md#the-machines-and-the-workloads,
//! docs/performance.md#what-the-agent-keeps-between-reads) and unpacked far faster than
//! they are parsed. A block holding a changed chain, or whose chains were added or
//! deleted, is read again whole; every other block is kept as it was.

use std::num::NonZeroU64;
use std::sync::Arc;

use crate::decode::netlink::changes::TableChanges;
use crate::decode::netlink::iptables::{
    ChainInfo, SAVE_FOOTER, chain_order, declare_chains, save_header, split_handle,
};
use crate::heart::model::Family;
use crate::sources::netlink::NetlinkError;
use crate::sources::netlink::follow::{Kept, Stale, Stamp};

/// Chains per block: what one reader takes at a time in a whole read, and what a
/// changed chain costs to read again with its neighbours.
pub(crate) const BLOCK: usize = 128;

/// One family's iptables-nft tables as last read.
#[derive(Debug, Clone)]
pub struct KeptFamily {
    pub(crate) stamp: Stamp,
    pub(crate) tables: Vec<KeptIptablesTable>,
}

#[derive(Debug, Clone)]
pub(crate) struct KeptIptablesTable {
    pub(crate) name: &'static str,
    /// In declaration order.
    pub(crate) chains: Vec<ChainInfo>,
    /// The rule text of consecutive runs of `chains`, in order.
    pub(crate) blocks: Vec<KeptBlock>,
}

#[derive(Debug, Clone)]
pub(crate) struct KeptBlock {
    /// How many chains of the table's list it holds.
    pub(crate) chains: usize,
    /// Shared: an update builds the new list of blocks beside the old one, and the old
    /// stays whole until the update succeeds.
    packed: Arc<[u8]>,
}

impl KeptBlock {
    pub(crate) fn pack(chains: usize, text: &str) -> KeptBlock {
        KeptBlock {
            chains,
            packed: lz4_flex::block::compress_prepend_size(text.as_bytes()).into(),
        }
    }

    /// Its text, in place of `out`'s.
    fn unpack(&self, out: &mut String) -> Result<(), NetlinkError> {
        let bytes = lz4_flex::block::decompress_size_prepended(&self.packed)
            .map_err(|e| NetlinkError::Malformed(format!("a kept block does not unpack: {e}")))?;
        // The unpacked bytes become the text, not copied into it.
        *out = String::from_utf8(bytes)
            .map_err(|e| NetlinkError::Malformed(format!("a kept block is not text: {e}")))?;
        Ok(())
    }
}

impl KeptFamily {
    /// Hands the kept tables to `sink` line by line, as a whole read renders them
    /// (`iptables-nft-save`'s lines), each rule with its nf_tables handle.
    pub fn render_lines(
        &mut self,
        family: Family,
        sink: &mut dyn FnMut(Option<NonZeroU64>, &str),
    ) -> Result<(), NetlinkError> {
        if self.tables.is_empty() {
            return Ok(());
        }
        sink(None, &save_header(family));
        let mut text = String::new();
        for table in &mut self.tables {
            declare_chains(table.name, &mut table.chains, &mut |line| sink(None, line))?;
            for block in &table.blocks {
                block.unpack(&mut text)?;
                for line in text.lines() {
                    let (handle, line) = split_handle(line);
                    sink(handle, line);
                }
            }
            sink(None, "COMMIT");
        }
        sink(None, SAVE_FOOTER);
        Ok(())
    }

    /// The ruleset's generation the tables were read at.
    pub fn generation(&self) -> u32 {
        self.stamp.generation
    }

    /// The bytes kept (for the log and the performance notes).
    pub fn packed_bytes(&self) -> usize {
        self.tables
            .iter()
            .flat_map(|t| &t.blocks)
            .map(|b| b.packed.len())
            .sum()
    }
}

impl Kept for KeptFamily {
    fn stamp(&mut self) -> &mut Stamp {
        &mut self.stamp
    }
}

/// Brings one kept table up to date: `fresh` is its chain list read again (None: the
/// kernel announced no chain added, deleted or changed), `changes` what the
/// notifications named. `read_chain` appends a chain's rules. Returns the chains read.
/// On an error the table is left as it was.
pub(crate) fn update_table(
    table: &mut KeptIptablesTable,
    fresh: Option<Vec<ChainInfo>>,
    changes: &TableChanges,
    read_chain: &mut dyn FnMut(&str, &mut String) -> Result<(), NetlinkError>,
) -> Result<usize, Stale> {
    if changes.whole || changes.other {
        return Err(Stale::Whole(format!("table {} changed as a whole", table.name)));
    }
    let old_chains = &table.chains;
    let old_blocks = &table.blocks;
    let mut starts = Vec::with_capacity(old_blocks.len() + 1);
    let mut at = 0;
    for block in old_blocks {
        starts.push(at);
        at += block.chains;
    }
    starts.push(at);
    // Each chain goes to the old block it sorts into; a block whose chains are the same
    // and unchanged is kept.
    let (fresh, groups, same_members) = match fresh {
        None => {
            let groups: Vec<_> = starts.windows(2).map(|w| w[0]..w[1]).collect();
            (None, groups, vec![true; old_blocks.len()])
        }
        Some(mut fresh) => {
            fresh.sort_by(chain_order);
            // A chain renamed keeps its handle; the rules that jump to it, in blocks
            // not read again, would still name the old chain.
            let old_names: rustc_hash::FxHashMap<u64, &str> =
                old_chains.iter().map(|c| (c.handle, c.name.as_str())).collect();
            if let Some(renamed) = fresh
                .iter()
                .find(|c| old_names.get(&c.handle).is_some_and(|old| *old != c.name))
            {
                return Err(Stale::Whole(format!(
                    "chain {} of table {} was renamed",
                    renamed.name, table.name
                )));
            }
            let mut groups = Vec::with_capacity(old_blocks.len().max(1));
            let mut same = Vec::with_capacity(old_blocks.len().max(1));
            let mut next = 0;
            for b in 0..old_blocks.len().max(1) {
                let end = match starts.get(b + 1).filter(|_| b + 1 < old_blocks.len()) {
                    Some(&start) => {
                        let bound = &old_chains[start];
                        next + fresh[next..].partition_point(|c| chain_order(c, bound).is_lt())
                    }
                    None => fresh.len(),
                };
                let old = starts
                    .get(b)
                    .map_or(0..0, |&s| s..starts.get(b + 1).copied().unwrap_or(s));
                same.push(
                    old.len() == end - next
                        && old_chains[old]
                            .iter()
                            .zip(&fresh[next..end])
                            .all(|(o, n)| o.name == n.name),
                );
                groups.push(next..end);
                next = end;
            }
            (Some(fresh), groups, same)
        }
    };
    let chains = fresh.as_deref().unwrap_or(old_chains);
    let mut blocks = Vec::with_capacity(old_blocks.len());
    let mut read = 0;
    let mut text = String::new();
    for (b, group) in groups.into_iter().enumerate() {
        let members = &chains[group];
        let unchanged = same_members[b] && !members.iter().any(|c| changes.chains.contains(c.name.as_str()));
        if let Some(block) = old_blocks.get(b).filter(|_| unchanged) {
            blocks.push(block.clone());
            continue;
        }
        for run in members.chunks(BLOCK) {
            text.clear();
            for chain in run {
                read_chain(&chain.name, &mut text)?;
            }
            read += run.len();
            blocks.push(KeptBlock::pack(run.len(), &text));
        }
    }
    if let Some(fresh) = fresh {
        table.chains = fresh;
    }
    table.blocks = blocks;
    Ok(read)
}

#[cfg(test)]
mod tests;
