//! A table's sets and their elements, as their messages give them: what reading a
//! map's elements needs to know of it, and each element's key, data and comment.

use std::borrow::Cow;
use std::sync::Arc;

use super::{KeptEntries, MapEntries, compare_keys, element_ir, inline_entries};
use crate::decode::netlink::{
    Attrs, DecodeError, NFTA_CHAIN_NAME, NFTA_CHAIN_TABLE, NFTA_DATA_VALUE, NFTA_DATA_VERDICT,
    NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_LIST_ELEMENTS, be32, be64, data_value, name, read_verdict,
};
use crate::decode::nftables::{KUBE_PROXY_TABLE, MapIr, unparsed};
use crate::heart::model::Unparsed;

pub(crate) const NFT_SET_ANONYMOUS: u32 = 1;
pub(crate) const NFT_SET_CONSTANT: u32 = 2;
pub(crate) const NFT_SET_INTERVAL: u32 = 4;
pub(crate) const NFT_SET_MAP: u32 = 8;
pub(crate) const NFT_SET_TIMEOUT: u32 = 0x10;
pub(crate) const NFT_SET_EVAL: u32 = 0x20;
pub(crate) const NFT_SET_CONCAT: u32 = 0x80;
pub(crate) const NFT_SET_ELEM_INTERVAL_END: u32 = 1;
/// libnftnl's user-data tag for a rule's or an element's comment.
pub(crate) const UDATA_COMMENT: u8 = 0;
const NFTA_SET_NAME: u16 = 2;
const NFTA_SET_FLAGS: u16 = 3;
const NFTA_SET_KEY_TYPE: u16 = 4;
const NFTA_SET_KEY_LEN: u16 = 5;
const NFTA_SET_DESC: u16 = 9;
const NFTA_SET_HANDLE: u16 = 16;
const NFTA_SET_DESC_SIZE: u16 = 1;
const NFTA_SET_ELEM_DATA: u16 = 2;
const NFTA_SET_ELEM_FLAGS: u16 = 3;
const NFTA_SET_ELEM_USERDATA: u16 = 6;

/// The comment in libnftnl's user data (type-length-value, one byte each).
pub(crate) fn udata_comment(mut data: &[u8]) -> Option<String> {
    while let [kind, len, rest @ ..] = data {
        let value = rest.get(..usize::from(*len))?;
        if *kind == UDATA_COMMENT {
            return name(value).ok().map(str::to_string);
        }
        data = &rest[usize::from(*len)..];
    }
    None
}

/// The chain's name when it is the table's.
pub fn chain_of_table(attrs: &[u8]) -> Result<Option<String>, DecodeError> {
    let mut in_table = false;
    let mut chain = None;
    for attr in Attrs::new(attrs) {
        match attr? {
            (NFTA_CHAIN_TABLE, v) => in_table = name(v).is_ok_and(|t| t == KUBE_PROXY_TABLE),
            (NFTA_CHAIN_NAME, v) => chain = name(v).ok().map(str::to_string),
            _ => {}
        }
    }
    Ok(chain.filter(|_| in_table))
}

/// A set or map of the table, as far as reading its elements needs.
#[derive(Debug)]
pub struct SetInfo {
    pub name: String,
    /// The kernel's handle: unique within its table for the table's life.
    pub handle: Option<u64>,
    pub flags: u32,
    pub key_type: u32,
    pub key_len: u32,
    /// The most elements it may hold, when declared.
    pub size: Option<u32>,
}

impl SetInfo {
    /// A map (its elements hold data), not a plain set.
    pub fn is_map(&self) -> bool {
        self.flags & NFT_SET_MAP != 0
    }

    /// Anonymous: made by nft for one rule, which alone refers to it.
    pub fn is_anonymous(&self) -> bool {
        self.flags & NFT_SET_ANONYMOUS != 0
    }

    /// An anonymous constant map without timeouts or updates from the packet path:
    /// its elements cannot change while it exists.
    pub fn is_constant_map(&self) -> bool {
        let all = NFT_SET_ANONYMOUS | NFT_SET_CONSTANT | NFT_SET_MAP;
        self.flags & all == all && self.flags & (NFT_SET_TIMEOUT | NFT_SET_EVAL) == 0
    }

    /// Its keys are single values: neither ranges nor concatenations.
    pub fn has_single_keys(&self) -> bool {
        self.flags & (NFT_SET_INTERVAL | NFT_SET_CONCAT) == 0
    }
}

/// Why a set's message could not be read; its message is the reason the set's
/// `unparsed` entry gives.
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    #[error(transparent)]
    Message(#[from] DecodeError),
    #[error("a set without a name")]
    WithoutName,
}

pub fn read_set(attrs: &[u8]) -> Result<SetInfo, SetError> {
    let mut set = SetInfo {
        name: String::new(),
        handle: None,
        flags: 0,
        key_type: 0,
        key_len: 0,
        size: None,
    };
    for attr in Attrs::new(attrs) {
        let (kind, value) = attr?;
        match kind {
            NFTA_SET_NAME => set.name = name(value)?.to_string(),
            NFTA_SET_FLAGS => set.flags = be32(value)?,
            NFTA_SET_KEY_TYPE => set.key_type = be32(value)?,
            NFTA_SET_KEY_LEN => set.key_len = be32(value)?,
            NFTA_SET_HANDLE => set.handle = Some(be64(value)?),
            NFTA_SET_DESC => {
                for desc in Attrs::new(value) {
                    if let (NFTA_SET_DESC_SIZE, size) = desc? {
                        set.size = Some(be32(size)?);
                    }
                }
            }
            _ => {}
        }
    }
    if set.name.is_empty() {
        return Err(SetError::WithoutName);
    }
    Ok(set)
}

/// One element as the kernel holds it.
pub(crate) struct RawElement {
    pub key: Vec<u8>,
    pub data: ElementData,
    pub comment: Option<String>,
}

/// Sorts a dump of `set`'s elements by key; false when a key came twice, which a set
/// never holds: the dump was disturbed. (The kernel's walk of a hash set counts the
/// elements a transaction is still preparing, invisible to the dump yet shifting where
/// each continuation resumes, without the generation moving.) An interval set's range
/// ends may meet the next range's start, so only other sets are judged.
pub(crate) fn sort_unique(set: &SetInfo, elements: &mut [RawElement]) -> bool {
    elements.sort_by(|a, b| super::compare_keys(&a.key, &b.key));
    set.flags & NFT_SET_INTERVAL != 0
        || elements
            .windows(2)
            .all(|w| super::compare_keys(&w[0].key, &w[1].key).is_ne())
}

#[derive(Debug, Clone)]
pub enum ElementData {
    /// The chain an `Arc`: an agent keeps kube-proxy's anonymous maps between reads,
    /// their chains' names shared with its kept tables'.
    Verdict {
        code: i32,
        chain: Option<Arc<str>>,
    },
    Value(Vec<u8>),
    None,
}

/// A set's elements gathered from the messages that answer a request for them, with
/// what could not be read of them.
pub struct Elements<'s> {
    set: &'s SetInfo,
    elements: Vec<RawElement>,
    problems: Vec<Unparsed>,
}

impl<'s> Elements<'s> {
    pub fn new(set: &'s SetInfo) -> Self {
        Elements {
            set,
            elements: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// The elements of one answer message.
    pub fn take(&mut self, attrs: &[u8]) -> Result<(), DecodeError> {
        collect_elements(self.set, attrs, &mut self.elements, &mut self.problems)
    }

    /// How many were read.
    pub fn len(&self) -> usize {
        self.elements.len()
    }

    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// A dump's elements in key order, with the problems; None when a key came twice,
    /// which a set never holds: the dump was disturbed and is to be read again.
    pub fn finish_dump(mut self) -> Option<(MapElements<'s>, Vec<Unparsed>)> {
        let unique = sort_unique(self.set, &mut self.elements);
        unique.then(|| self.finished())
    }

    /// The elements in key order, with the problems: an answer to given keys, which
    /// holds each once.
    pub fn finish(mut self) -> (MapElements<'s>, Vec<Unparsed>) {
        self.elements.sort_by(|a, b| compare_keys(&a.key, &b.key));
        self.finished()
    }

    fn finished(self) -> (MapElements<'s>, Vec<Unparsed>) {
        let elements = MapElements {
            set: self.set,
            elements: self.elements,
        };
        (elements, self.problems)
    }
}

/// A map's elements read, in key order, to be taken in the form its use needs.
pub struct MapElements<'s> {
    set: &'s SetInfo,
    elements: Vec<RawElement>,
}

impl<'s> MapElements<'s> {
    pub fn set(&self) -> &'s SetInfo {
        self.set
    }

    /// A named map's, as the table holds them.
    pub fn into_map_ir(self) -> MapIr<'static> {
        let set = self.set;
        MapIr {
            name: Cow::Owned(set.name.clone()),
            elements: self.elements.into_iter().map(|e| element_ir(set, e)).collect(),
        }
    }

    /// An anonymous map's, as its rule shows them inline.
    pub fn into_inline(self) -> MapEntries {
        inline_entries(self.set, self.elements)
    }

    /// A constant anonymous map's, as kept for the next read and as its rule shows
    /// them.
    pub fn into_kept(self) -> (KeptEntries, MapEntries) {
        KeptEntries::of(self.set, self.elements)
    }
}

/// The elements of one answer message.
pub(crate) fn collect_elements(
    set: &SetInfo,
    attrs: &[u8],
    elements: &mut Vec<RawElement>,
    problems: &mut Vec<Unparsed>,
) -> Result<(), DecodeError> {
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
pub(crate) fn read_element(attrs: &[u8]) -> Result<Option<RawElement>, DecodeError> {
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

fn element_data(nested: &[u8]) -> Result<ElementData, DecodeError> {
    for attr in Attrs::new(nested) {
        match attr? {
            (NFTA_DATA_VALUE, value) => return Ok(ElementData::Value(value.to_vec())),
            (NFTA_DATA_VERDICT, verdict) => {
                let (code, chain) = read_verdict(verdict)?;
                return Ok(ElementData::Verdict {
                    code,
                    chain: chain.map(Arc::from),
                });
            }
            _ => {}
        }
    }
    Ok(ElementData::None)
}
