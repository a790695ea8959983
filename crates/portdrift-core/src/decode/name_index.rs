//! A hash index of named things that holds only their positions: the names stay in the
//! list that owns them, so a large node's tens of thousands of chain names are not
//! stored a second time as keys. The nftables front ends, the kept nftables tables and
//! the iptables parser each find their chains through one.

/// Positions, found by the name at each; `name_of` gives the name at a position.
#[derive(Debug, Default)]
pub(crate) struct NameIndex(hashbrown::HashTable<u32>);

impl NameIndex {
    fn hash(name: &str) -> u64 {
        use std::hash::BuildHasher as _;
        rustc_hash::FxBuildHasher.hash_one(name)
    }

    /// The position of `name`, if one has it.
    pub(crate) fn find<'n>(&self, name: &str, name_of: impl Fn(u32) -> &'n str) -> Option<u32> {
        self.0.find(Self::hash(name), |&at| name_of(at) == name).copied()
    }

    /// Records that `at` is called `name`, which no position is yet.
    pub(crate) fn insert<'n>(&mut self, name: &str, at: u32, name_of: impl Fn(u32) -> &'n str) {
        self.0
            .insert_unique(Self::hash(name), at, |&other| Self::hash(name_of(other)));
    }

    /// Room for `more` names, made once rather than by doubling.
    pub(crate) fn reserve<'n>(&mut self, more: usize, name_of: impl Fn(u32) -> &'n str) {
        self.0.reserve(more, |&at| Self::hash(name_of(at)));
    }

    /// The heap it holds: a position and a control byte per slot.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.0.capacity() * (std::mem::size_of::<u32>() + 1)
    }
}
