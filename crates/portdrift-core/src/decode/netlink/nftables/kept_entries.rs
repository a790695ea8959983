//! A constant anonymous map's elements as a reader keeps them between reads: in the
//! smallest form that gives them back exactly as they were read.

use std::sync::Arc;

use super::{ElementData, MapEntries, RawElement, SetInfo, inline_entries, key_expr};

/// A constant anonymous map's elements, kept between reads.
///
/// Why two forms: kube-proxy's endpoint dispatch (`numgen random mod N vmap { 0 : goto
/// …, …, N-1 : goto … }`), one map per Service, is nearly every map kept, and its keys
/// are 0 to N-1: its chains alone give it back, in a quarter of the room of its
/// elements as their rule shows them.
#[derive(Debug, Clone)]
pub enum KeptEntries {
    /// Keys 0 to N-1 (32 bits in host order, as `numgen` leaves its number), in order,
    /// each a verdict of kind `code` naming a chain.
    Numbered { code: i32, chains: Box<[Arc<str>]> },
    /// Any other map's elements as its rule shows them.
    Entries(MapEntries),
}

impl KeptEntries {
    /// `set`'s elements (in key order) as kept, and as their rule shows them.
    pub(crate) fn of(set: &SetInfo, elements: Vec<RawElement>) -> (KeptEntries, MapEntries) {
        let numbered = numbered(&elements);
        let entries = inline_entries(set, elements);
        let kept = numbered.unwrap_or_else(|| KeptEntries::Entries(entries.clone()));
        (kept, entries)
    }

    /// The elements as their rule shows them (what [`MapElements::into_inline`](super::MapElements::into_inline) gave for them).
    pub fn entries(&self, set: &SetInfo) -> MapEntries {
        match self {
            KeptEntries::Numbered { code, chains } => chains
                .iter()
                .zip(0u32..)
                .map(|(chain, key)| {
                    let data = ElementData::Verdict {
                        code: *code,
                        chain: Some(chain.clone()),
                    };
                    (key_expr(set, &key.to_ne_bytes()), data)
                })
                .collect(),
            KeptEntries::Entries(entries) => entries.clone(),
        }
    }

    /// Replaces each chain's name with the `Arc` `shared` gives for it (the kept
    /// table's), so that the maps kept between reads copy no name.
    pub fn share_names(&mut self, shared: &impl Fn(&str) -> Option<Arc<str>>) {
        let share = |chain: &mut Arc<str>| {
            if let Some(name) = shared(chain) {
                *chain = name;
            }
        };
        match self {
            KeptEntries::Numbered { chains, .. } => chains.iter_mut().for_each(share),
            KeptEntries::Entries(entries) => {
                for (_, data) in entries {
                    if let ElementData::Verdict {
                        chain: Some(chain), ..
                    } = data
                    {
                        share(chain);
                    }
                }
            }
        }
    }
}

/// The elements in the numbered form, if they have it.
fn numbered(elements: &[RawElement]) -> Option<KeptEntries> {
    let ElementData::Verdict { code, .. } = elements.first()?.data else {
        return None;
    };
    let chains = elements
        .iter()
        .zip(0u32..)
        .map(|(element, key)| match &element.data {
            ElementData::Verdict {
                code: c,
                chain: Some(chain),
            } if *c == code && element.key == key.to_ne_bytes() => Some(chain.clone()),
            _ => None,
        })
        .collect::<Option<Box<[_]>>>()?;
    Some(KeptEntries::Numbered { code, chains })
}
