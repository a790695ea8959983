//! The kernel's nf_tables notifications → what changed, by table: the chains whose
//! rules changed, whether the chain list changed, the sets whose elements changed, and
//! the generation the last committed transaction started. What the incremental readers
//! re-read; everything else is kept from their last read.

use rustc_hash::FxHashSet;

use super::{Attrs, DecodeError, messages, name};

pub mod filter;

use filter::KnownChain;

// linux/netfilter/nf_tables.h: the messages the kernel multicasts on a commit.
const NFT_MSG_NEWTABLE: u8 = 0;
const NFT_MSG_DELTABLE: u8 = 2;
const NFT_MSG_NEWCHAIN: u8 = 3;
const NFT_MSG_DELCHAIN: u8 = 5;
const NFT_MSG_NEWRULE: u8 = 6;
const NFT_MSG_DELRULE: u8 = 8;
const NFT_MSG_NEWSET: u8 = 9;
const NFT_MSG_DELSET: u8 = 11;
const NFT_MSG_NEWSETELEM: u8 = 12;
const NFT_MSG_DELSETELEM: u8 = 14;
const NFT_MSG_NEWGEN: u8 = 15;
const NFT_MSG_NEWOBJ: u8 = 18;
const NFT_MSG_DELOBJ: u8 = 20;
const NFT_MSG_NEWFLOWTABLE: u8 = 22;
const NFT_MSG_DELFLOWTABLE: u8 = 24;
/// The first attribute of every object message above names its table; the second
/// names a rule's chain (`NFTA_RULE_CHAIN`) or a set (`NFTA_SET_NAME`,
/// `NFTA_SET_ELEM_LIST_SET`); a chain message names its chain in the third.
const ATTR_TABLE: u16 = 1;
const ATTR_SECOND: u16 = 2;
const ATTR_CHAIN_NAME: u16 = 3;
const NFTA_GEN_ID: u16 = 1;

/// Past this many changed chains or sets in one table, the table is read whole: at that
/// point keeping the names costs more than reading.
const MAX_NAMED: usize = 50_000;

/// What changed in one table since its changes were last taken.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TableChanges {
    /// The table itself was created, deleted or changed, or too much changed to list:
    /// read it whole.
    pub whole: bool,
    /// Chains were added, deleted or changed (policy, name): read the chain list again.
    pub chain_list: bool,
    /// Chains whose rules changed (or that were added or deleted).
    pub chains: FxHashSet<Box<str>>,
    /// Sets and maps added, deleted, or whose elements changed.
    pub sets: FxHashSet<Box<str>>,
    /// Stateful objects or flowtables changed (kube-proxy writes none).
    pub other: bool,
}

impl TableChanges {
    /// Folds `other` (changes taken later) into these.
    pub fn merge(&mut self, other: TableChanges) {
        self.whole |= other.whole;
        self.chain_list |= other.chain_list;
        self.other |= other.other;
        self.chains.extend(other.chains);
        self.sets.extend(other.sets);
    }

    fn note_name(set: &mut FxHashSet<Box<str>>, whole: &mut bool, name: &str) {
        if *whole || set.contains(name) {
            return;
        }
        if set.len() >= MAX_NAMED {
            *whole = true;
            set.clear();
            return;
        }
        set.insert(name.into());
    }
}

/// The changes notified since they were last taken, by (`NFPROTO_*` family, table).
#[derive(Debug, Default)]
pub struct Changes {
    /// A handful of tables at most (iptables-nft's five per family, kube-proxy's
    /// two): a list searched in place, with no key built per message.
    tables: Vec<(u8, Box<str>, TableChanges)>,
    /// The generation the last notified commit started (`NFT_MSG_NEWGEN`, sent after
    /// the commit's other messages).
    generation: Option<u32>,
    /// Messages that could not be placed in a table: whoever takes changes next must
    /// read everything.
    unplaced: u64,
}

impl Changes {
    /// Notes every nf_tables message of one received datagram. Returns the chain when
    /// every message was a rule of that one chain (what [`filter`] can drop).
    pub fn note_datagram(&mut self, data: &[u8]) -> Option<KnownChain> {
        // The one chain so far: (family, table, chain), or None once another showed.
        let mut only: Option<Option<(u8, &str, &str)>> = None;
        for message in messages(data) {
            let placed = message.and_then(|m| {
                let chain = self
                    .note(m.kind, m.family, m.attrs)?
                    .map(|(t, c)| (m.family, t, c));
                only = match only {
                    None => Some(chain),
                    Some(seen) => Some(seen.filter(|s| Some(*s) == chain)),
                };
                Ok(())
            });
            if placed.is_err() {
                self.unplaced += 1;
                only = Some(None);
            }
        }
        let (family, table, chain) = only.flatten()?;
        Some(KnownChain {
            family,
            table: table.into(),
            chain: chain.into(),
        })
    }

    /// Notes one message. An error: it names no table this can place. Returns a rule
    /// message's (table, chain) when they are its first two attributes, in the order
    /// the kernel writes them, which is the order the [`filter`] checks.
    pub fn note<'a>(
        &mut self,
        kind: u8,
        family: u8,
        attrs: &'a [u8],
    ) -> Result<Option<(&'a str, &'a str)>, DecodeError> {
        if kind == NFT_MSG_NEWGEN {
            for attr in Attrs::new(attrs) {
                if let (NFTA_GEN_ID, value) = attr? {
                    self.generation = Some(super::be32(value)?);
                }
            }
            return Ok(None);
        }
        let (mut table, mut second, mut third) = (None, None, None);
        // The kinds of the first two attributes (0: none).
        let mut first_two = [0u16; 2];
        for (i, attr) in Attrs::new(attrs).enumerate() {
            let (attr_kind, value) = attr?;
            if let Some(kind) = first_two.get_mut(i) {
                *kind = attr_kind;
            }
            match attr_kind {
                ATTR_TABLE => table = Some(name(value)?),
                ATTR_SECOND => second = Some(value),
                ATTR_CHAIN_NAME => third = Some(value),
                _ => {}
            }
        }
        let table = table.ok_or_else(|| DecodeError::Malformed(format!("message {kind} names no table")))?;
        let entry = self.table_entry(family, table);
        match kind {
            NFT_MSG_NEWTABLE | NFT_MSG_DELTABLE => entry.whole = true,
            NFT_MSG_NEWCHAIN | NFT_MSG_DELCHAIN => {
                entry.chain_list = true;
                let chain = object_name(kind, third)?;
                TableChanges::note_name(&mut entry.chains, &mut entry.whole, chain);
            }
            NFT_MSG_NEWRULE | NFT_MSG_DELRULE => {
                let chain = object_name(kind, second)?;
                TableChanges::note_name(&mut entry.chains, &mut entry.whole, chain);
                return Ok((first_two == [ATTR_TABLE, ATTR_SECOND]).then_some((table, chain)));
            }
            NFT_MSG_NEWSET | NFT_MSG_DELSET | NFT_MSG_NEWSETELEM | NFT_MSG_DELSETELEM => {
                let set = object_name(kind, second)?;
                TableChanges::note_name(&mut entry.sets, &mut entry.whole, set);
            }
            NFT_MSG_NEWOBJ | NFT_MSG_DELOBJ | NFT_MSG_NEWFLOWTABLE | NFT_MSG_DELFLOWTABLE => {
                entry.other = true
            }
            // A message kind this does not know (a newer kernel's): the table is read whole.
            _ => entry.whole = true,
        }
        Ok(None)
    }

    fn table_entry(&mut self, family: u8, table: &str) -> &mut TableChanges {
        let at = match self
            .tables
            .iter()
            .position(|(f, t, _)| *f == family && **t == *table)
        {
            Some(at) => at,
            None => {
                self.tables.push((family, table.into(), TableChanges::default()));
                self.tables.len() - 1
            }
        };
        &mut self.tables[at].2
    }

    /// The generation of the last commit notified, if any was.
    pub fn generation(&self) -> Option<u32> {
        self.generation
    }

    /// How many messages could not be placed since the start.
    pub fn unplaced(&self) -> u64 {
        self.unplaced
    }

    /// Takes the changes noted for `family`'s tables named in `tables`, leaving the
    /// others' for their readers. A table with no change is not in the result.
    pub fn take(&mut self, family: u8, tables: &[&str]) -> Vec<(String, TableChanges)> {
        let (taken, kept) = std::mem::take(&mut self.tables)
            .into_iter()
            .partition(|(f, t, _)| *f == family && tables.contains(&&**t));
        self.tables = kept;
        taken
            .into_iter()
            .map(|(_, t, changes)| (t.into(), changes))
            .collect()
    }

    /// Whether anything is noted for these tables.
    pub fn any(&self, family: u8, tables: &[&str]) -> bool {
        self.tables
            .iter()
            .any(|(f, t, _)| *f == family && tables.contains(&&**t))
    }
}

/// The name a message's object attribute holds.
fn object_name(kind: u8, value: Option<&[u8]>) -> Result<&str, DecodeError> {
    name(value.ok_or_else(|| DecodeError::Malformed(format!("message {kind} names no object")))?)
}

#[cfg(test)]
mod tests;
