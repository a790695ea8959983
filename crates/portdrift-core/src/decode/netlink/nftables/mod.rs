//! kube-proxy's nftables tables (`ip kube-proxy`, `ip6 kube-proxy`) as nf_tables
//! messages, decoded into the same intermediate form the `nft -j` parser builds, so
//! both give the same [`RuleDump`]s. Each rule is
//! reduced at once to what the detector reads (chain names, jumps, DNAT targets,
//! verdict-map elements).

pub(crate) mod delinearize;
pub(crate) mod kept_entries;
pub(crate) mod sets;
pub(crate) mod values;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

pub use kept_entries::KeptEntries;
pub(crate) use sets::RawElement;
pub use sets::{ElementData, Elements, MapElements, SetError, SetInfo, chain_of_table, read_set};
pub(crate) use values::element_ir;
pub(crate) use values::{compare_keys, key_expr};

use self::delinearize::{
    Delinearizer, NFTA_LOOKUP_SET, NFTA_LOOKUP_SREG, NFTA_NUMGEN_DREG, NFTA_NUMGEN_MODULUS,
    NFTA_NUMGEN_OFFSET,
};
use self::sets::{collect_elements, udata_comment};
use super::{
    Attrs, DecodeError, NFT_MSG_NEWCHAIN, NFT_MSG_NEWRULE, NFT_MSG_NEWSET, NFT_MSG_NEWSETELEM,
    NFT_MSG_NEWTABLE, NFTA_RULE_CHAIN, NFTA_RULE_EXPRESSIONS, NFTA_RULE_HANDLE, NFTA_RULE_TABLE,
    NFTA_RULE_USERDATA, NFTA_SET_ELEM_LIST_SET, NFTA_TABLE_NAME, attr_map, be32, be64, expressions, messages,
    name, nfproto,
};
use crate::decode::nftables::json::{Expr, reduce_rule};
use crate::decode::nftables::{KUBE_PROXY_TABLE, MapIr, ParsedRuleset, RuleIr, build_rule_dumps, unparsed};
use crate::heart::model::{Family, RuleDump, Unparsed};

/// An anonymous map's elements: each key as its rule shows it, and its data.
pub type MapEntries = Vec<(Expr<'static>, ElementData)>;

/// What decoding a table's rules needs besides the rule: the family, the table's sets,
/// and the anonymous verdict maps' elements.
pub struct RuleContext<'c> {
    pub family: Family,
    pub sets: &'c HashMap<&'c str, &'c SetInfo>,
    /// The anonymous verdict maps' elements by map name. Each is bound to one rule and
    /// taken by it, so the maps' memory is handed back as the rules are read.
    pub inline_maps: &'c Mutex<HashMap<String, MapEntries>>,
}

/// A rule decoded and reduced, for the table to take in order.
pub struct DecodedRule {
    /// Its chain's position in the list of chains read.
    pub chain: usize,
    pub rule: RuleIr<'static>,
    pub problem: Option<Unparsed>,
}

/// Why a rule of the table could not be decoded; its message is the reason the rule's
/// `unparsed` entry gives.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error(transparent)]
    Message(#[from] DecodeError),
    #[error("a rule without a chain")]
    WithoutChain,
    #[error("rule {handle} in {chain}: {source}")]
    Expressions {
        handle: u64,
        chain: String,
        source: DecodeError,
    },
}

/// A rule of the table, decoded; None for another table's.
pub fn decode_rule(
    context: &RuleContext<'_>,
    position: usize,
    attrs: &[u8],
) -> Result<Option<DecodedRule>, RuleError> {
    let mut chain = None;
    let mut handle = None;
    let mut expressions: &[u8] = &[];
    let mut comment = None;
    for attr in Attrs::new(attrs) {
        let (kind, value) = attr?;
        match kind {
            NFTA_RULE_TABLE if name(value)? != KUBE_PROXY_TABLE => return Ok(None),
            NFTA_RULE_CHAIN => chain = Some(name(value)?.to_string()),
            NFTA_RULE_HANDLE => handle = Some(be64(value)?),
            NFTA_RULE_EXPRESSIONS => expressions = value,
            NFTA_RULE_USERDATA => comment = udata_comment(value),
            _ => {}
        }
    }
    let chain = chain.ok_or(RuleError::WithoutChain)?;
    let statements =
        Delinearizer::new(context)
            .run(expressions)
            .map_err(|source| RuleError::Expressions {
                handle: handle.unwrap_or_default(),
                chain,
                source,
            })?;
    let (rule, problem) = reduce_rule(handle, comment.as_deref(), &statements);
    Ok(Some(DecodedRule {
        chain: position,
        rule,
        problem,
    }))
}

/// An anonymous map's elements as its rule shows them inline.
pub(crate) fn inline_entries(set: &SetInfo, elements: Vec<RawElement>) -> MapEntries {
    elements
        .into_iter()
        .map(|e| (key_expr(set, &e.key), e.data))
        .collect()
}

/// A map a rule looks up, and the modulus of the `numgen` counting from zero that
/// feeds the lookup, when one does (the keys the map can be asked for).
pub struct SetLookup<'a> {
    pub set: &'a str,
    pub numgen_modulus: Option<u32>,
}

/// The maps a rule's message looks up, in order. A rule that cannot be walked gives
/// those found before the fault: its decoding reports it.
pub fn lookups(attrs: &[u8]) -> Vec<SetLookup<'_>> {
    let mut found = Vec::new();
    let Some(list) = Attrs::new(attrs)
        .filter_map(Result::ok)
        .find_map(|(kind, value)| (kind == NFTA_RULE_EXPRESSIONS).then_some(value))
    else {
        return found;
    };
    // (register, modulus) of a numgen counting from zero.
    let mut numgen: Option<(u32, u32)> = None;
    for expression in expressions(list) {
        let Ok((expr_name, data)) = expression else {
            return found;
        };
        if expr_name != "numgen" && expr_name != "lookup" {
            continue;
        }
        let Ok(fields) = attr_map(data) else {
            return found;
        };
        let number = |kind| fields.get(&kind).and_then(|v| be32(v).ok());
        if expr_name == "numgen" {
            numgen = match (number(NFTA_NUMGEN_DREG), number(NFTA_NUMGEN_MODULUS)) {
                (Some(register), Some(modulus)) if number(NFTA_NUMGEN_OFFSET).unwrap_or(0) == 0 => {
                    Some((register, modulus))
                }
                _ => None,
            };
            continue;
        }
        let Some(set) = fields.get(&NFTA_LOOKUP_SET).and_then(|v| name(v).ok()) else {
            continue;
        };
        let numgen_modulus = match (numgen, number(NFTA_LOOKUP_SREG)) {
            (Some((register, modulus)), Some(sreg)) if register == sreg => Some(modulus),
            _ => None,
        };
        found.push(SetLookup { set, numgen_modulus });
    }
    found
}

/// The [`RuleDump`]s of a recorded read of kube-proxy's tables, as the live read
/// gives them.
pub fn decode_rule_dumps(recorded: &[u8], origin: &str) -> Result<Vec<RuleDump>, DecodeError> {
    Ok(build_rule_dumps(&decode_tables(recorded)?, origin))
}

/// One family's messages of a recorded read, sorted by kind.
#[derive(Default)]
struct Recorded<'a> {
    table: bool,
    sets: Vec<&'a [u8]>,
    chains: Vec<&'a [u8]>,
    elements: HashMap<&'a str, Vec<&'a [u8]>>,
    rules: HashMap<&'a str, Vec<&'a [u8]>>,
}

/// Decodes a recorded read of kube-proxy's tables (their table, set, chain, element
/// and rule messages, in the order they arrived) as the live read decodes them.
pub(crate) fn decode_tables(recorded: &[u8]) -> Result<ParsedRuleset<'static>, DecodeError> {
    let mut parsed = ParsedRuleset::default();
    for family in [Family::Ipv4, Family::Ipv6] {
        let mut messages_of = Recorded::default();
        for message in messages(recorded) {
            let message = message?;
            if message.family != nfproto(family) {
                continue;
            }
            let attrs = message.attrs;
            let named = |kind: u16| -> Result<&str, DecodeError> {
                for attr in Attrs::new(attrs) {
                    if let (k, v) = attr?
                        && k == kind
                    {
                        return name(v);
                    }
                }
                Ok("")
            };
            match message.kind {
                NFT_MSG_NEWTABLE => messages_of.table |= named(NFTA_TABLE_NAME)? == KUBE_PROXY_TABLE,
                NFT_MSG_NEWSET => messages_of.sets.push(attrs),
                NFT_MSG_NEWCHAIN => messages_of.chains.push(attrs),
                NFT_MSG_NEWSETELEM => {
                    let set = named(NFTA_SET_ELEM_LIST_SET)?;
                    messages_of.elements.entry(set).or_default().push(attrs);
                }
                NFT_MSG_NEWRULE => {
                    let chain = named(NFTA_RULE_CHAIN)?;
                    messages_of.rules.entry(chain).or_default().push(attrs);
                }
                _ => {}
            }
        }
        if messages_of.table {
            decode_table(family, &messages_of, &mut parsed)?;
        }
    }
    Ok(parsed)
}

fn decode_table(
    family: Family,
    recorded: &Recorded<'_>,
    parsed: &mut ParsedRuleset<'static>,
) -> Result<(), DecodeError> {
    let table = parsed.table_mut(family);
    let mut sets = Vec::new();
    for attrs in &recorded.sets {
        match read_set(attrs) {
            Ok(set) => sets.push(set),
            Err(reason) => table.unparsed.push(unparsed(0, "(a set)", reason.to_string())),
        }
    }
    let mut chains = Vec::new();
    for attrs in &recorded.chains {
        match chain_of_table(attrs) {
            Ok(Some(chain)) => chains.push(chain),
            Ok(None) => {}
            Err(reason) => table.unparsed.push(unparsed(0, "(a chain)", reason.to_string())),
        }
    }
    table.reserve_chains(chains.len());
    for chain in &chains {
        table.chain_mut(Cow::Owned(chain.clone()), 0);
    }
    let mut inline_maps = HashMap::new();
    for set in sets.iter().filter(|s| s.is_map()) {
        let mut elements = Vec::new();
        for attrs in recorded.elements.get(set.name.as_str()).into_iter().flatten() {
            collect_elements(set, attrs, &mut elements, &mut table.unparsed)?;
        }
        elements.sort_by(|a, b| compare_keys(&a.key, &b.key));
        if set.is_anonymous() {
            inline_maps.insert(set.name.clone(), inline_entries(set, elements));
        } else {
            table.maps.push(MapIr {
                name: Cow::Owned(set.name.clone()),
                elements: elements.into_iter().map(|e| element_ir(set, e)).collect(),
            });
        }
    }
    let sets_by_name: HashMap<&str, &SetInfo> = sets.iter().map(|s| (s.name.as_str(), s)).collect();
    let inline_maps = Mutex::new(inline_maps);
    let context = RuleContext {
        family,
        sets: &sets_by_name,
        inline_maps: &inline_maps,
    };
    for (position, chain) in chains.iter().enumerate() {
        for attrs in recorded.rules.get(chain.as_str()).into_iter().flatten() {
            match decode_rule(&context, position, attrs) {
                Ok(Some(rule)) => {
                    table.unparsed.extend(rule.problem);
                    match table.find_chain(chain) {
                        Some(i) => table.chains[i].rules.push(rule.rule),
                        None => table
                            .chain_mut(Cow::Owned(chain.clone()), 0)
                            .rules
                            .push(rule.rule),
                    }
                }
                Ok(None) => {}
                Err(reason) => table.unparsed.push(unparsed(0, "(a rule)", reason.to_string())),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
