//! `nft -j list ruleset` → kube-proxy's tables in the shared intermediate form.
//!
//! Hand-rolled serde types rather than the `nftables` crate: its `Statement` and
//! `Expression` enums are closed (the version looked at has no catch-all variant, and
//! `tproxy`, `last`, `secmark` are still to do), so one statement it does not know,
//! anywhere in the ruleset (another program's table, a newer nft), fails the whole
//! parse, while portdrift must keep going and report what it cannot read as `unparsed`.
//!
//! The dump is read in layers to stay cheap on a large node's dump: the
//! `nftables` array is split into borrowed raw objects (`&RawValue`); each object's kind
//! and envelope (family, table, chain, handle) are read in one pass into a typed struct
//! with its `expr`/`elem` payload left raw; only the payloads of kube-proxy's own tables
//! are parsed further, into a borrowed expression tree ([`Expr`]), because nft's
//! expression schema is open-ended (any expression may nest in any other).

mod expr;
mod render;

use std::borrow::Cow;
use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::decode::nftables::{
    DnatError, DnatIr, ElementIr, ElementVerdict, MapIr, NftError, ParsedRuleset, RuleIr, TableIr,
    kube_proxy_family, unparsed,
};

pub(crate) use expr::Expr;
pub(crate) use render::{render_expr_string, render_rule};

/// `{"nftables": [ {...}, ... ]}`: the objects stay raw until each is looked at alone, so
/// one odd object costs an `unparsed` entry rather than the whole dump.
#[derive(Deserialize)]
struct Document<'a> {
    #[serde(borrow)]
    nftables: Vec<&'a RawValue>,
}

/// Reads one `nft -j` document, or several one after another (the live reader lists
/// each kube-proxy table with its own `nft -j list table` call).
pub(super) fn parse<'a>(input: &'a [u8], origin: &str) -> Result<ParsedRuleset<'a>, NftError> {
    let mut parsed = ParsedRuleset::default();
    let mut index = 0;
    let mut documents = 0;
    for document in serde_json::Deserializer::from_slice(input).into_iter::<Document<'a>>() {
        let document = document.map_err(|e| classify_error(e, origin))?;
        documents += 1;
        for object in document.nftables.iter() {
            read_object(&mut parsed, index, object);
            index += 1;
        }
    }
    if documents == 0 {
        // Nothing but blanks: report it as the truncated document it is.
        if let Err(e) = serde_json::from_slice::<Document<'a>>(input) {
            return Err(classify_error(e, origin));
        }
    }
    parsed.note_what_is_left_out();
    Ok(parsed)
}

/// Syntax errors and truncation mean "not JSON"; a type mismatch means JSON of the
/// wrong shape (not an `nft -j` dump at all).
fn classify_error(source: serde_json::Error, origin: &str) -> NftError {
    match source.classify() {
        serde_json::error::Category::Data => NftError::NotARuleset {
            origin: origin.to_string(),
            source,
        },
        _ => NftError::InvalidJson {
            origin: origin.to_string(),
            source,
        },
    }
}

/// A string that borrows from the input unless it had escapes to undo. (serde only
/// borrows a bare `Cow<str>` field, not one inside an `Option`.)
struct BStr<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for BStr<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = BStr<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(BStr(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(BStr(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(BStr(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(V(PhantomData))
    }
}

/// One element of the `nftables` array: an object with exactly one key naming its kind
/// (`{"rule": {...}}`), with the body read as `T`.
struct Tagged<'a, T> {
    kind: Cow<'a, str>,
    body: T,
}

impl<'de: 'a, 'a, T: Deserialize<'de>> Deserialize<'de> for Tagged<'a, T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<'a, T>(PhantomData<(&'a (), T)>);
        impl<'de: 'a, 'a, T: Deserialize<'de>> Visitor<'de> for V<'a, T> {
            type Value = Tagged<'a, T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object with one key, such as {\"rule\": {...}}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let Some(BStr(kind)) = map.next_key::<BStr<'a>>()? else {
                    return Err(de::Error::invalid_length(0, &self));
                };
                let body: T = map.next_value()?;
                if map.next_key::<IgnoredAny>()?.is_some() {
                    return Err(de::Error::custom("object has more than one key"));
                }
                Ok(Tagged { kind, body })
            }
        }
        deserializer.deserialize_map(V(PhantomData))
    }
}

/// The fields of every object kind this parser reads (table, chain, rule, set, map),
/// with rule expressions and map elements left raw until the table is known.
#[derive(Deserialize)]
struct ObjectBody<'a> {
    #[serde(borrow, default)]
    family: Option<BStr<'a>>,
    #[serde(borrow, default)]
    table: Option<BStr<'a>>,
    #[serde(borrow, default)]
    name: Option<BStr<'a>>,
    #[serde(borrow, default)]
    chain: Option<BStr<'a>>,
    #[serde(default)]
    handle: Option<u64>,
    #[serde(borrow, default)]
    comment: Option<BStr<'a>>,
    #[serde(borrow, default)]
    expr: Option<&'a RawValue>,
    #[serde(borrow, default)]
    elem: Option<&'a RawValue>,
}

/// Object kinds that can sit in kube-proxy's table but hold nothing NodePorts depend on.
const IGNORED_KINDS: [&str; 12] = [
    "table",
    "set",
    "element",
    "counter",
    "quota",
    "limit",
    "flowtable",
    "ct helper",
    "ct timeout",
    "ct expectation",
    "secmark",
    "synproxy",
];

fn read_object<'a>(parsed: &mut ParsedRuleset<'a>, index: usize, raw: &'a RawValue) {
    let odd = |reason: String| unparsed(0, raw.get(), format!("nftables[{index}]: {reason}"));
    // One pass reads the kind and the envelope; only a failure is parsed again, step by
    // step, to say what is wrong with it.
    let Ok(Tagged { kind, body }) = serde_json::from_str::<Tagged<'a, ObjectBody<'a>>>(raw.get()) else {
        return parsed.unattributed.push(odd(explain_unreadable(raw)));
    };
    if kind == "metainfo" {
        return;
    }
    // A table object names itself in `name`; everything inside a table names it in `table`.
    let table_name = if kind == "table" {
        body.name.as_ref()
    } else {
        body.table.as_ref()
    };
    let (Some(BStr(family)), Some(BStr(table_name))) = (body.family.as_ref(), table_name) else {
        return parsed
            .unattributed
            .push(odd(format!("`{}` object names no table", kind)));
    };
    let Some(family) = kube_proxy_family(family, table_name) else {
        return; // Not kube-proxy's nftables mode (iptables-nft's tables, firewalld, ...).
    };
    let table = parsed.table_mut(family);
    match kind.as_ref() {
        "chain" => match body.name {
            Some(BStr(name)) => {
                table.chain_mut(name, 0);
            }
            None => table.unparsed.push(odd("chain without a name".to_string())),
        },
        "rule" => read_rule(table, body, &odd),
        "map" => read_map(table, body, &odd),
        kind if IGNORED_KINDS.contains(&kind) => {}
        kind => table.unparsed.push(odd(format!("unknown object kind `{kind}`"))),
    }
}

fn explain_unreadable(raw: &RawValue) -> String {
    match serde_json::from_str::<Tagged<'_, &RawValue>>(raw.get()) {
        Err(e) => format!("not an nft object: {e}"),
        Ok(tagged) => match serde_json::from_str::<ObjectBody<'_>>(tagged.body.get()) {
            Err(e) => format!("unreadable `{}` object: {e}", tagged.kind),
            Ok(_) => "unreadable object".to_string(),
        },
    }
}

fn read_rule<'a>(
    table: &mut TableIr<'a>,
    body: ObjectBody<'a>,
    odd: &dyn Fn(String) -> crate::decode::nftables::Unparsed,
) {
    let Some(BStr(chain)) = body.chain else {
        return table.unparsed.push(odd("rule without a chain".to_string()));
    };
    let statements: Vec<Expr<'a>> = match body.expr.map(|raw| serde_json::from_str(raw.get())).transpose() {
        Ok(statements) => statements.unwrap_or_default(),
        Err(e) => {
            return table
                .unparsed
                .push(odd(format!("unreadable rule expression: {e}")));
        }
    };
    let comment = body.comment.map(|BStr(c)| c);
    add_rule(table, chain, body.handle, comment.as_deref(), &statements);
}

/// Adds one rule, given as nft's JSON statements, to its chain: the netlink reader
/// builds the same statements from the kernel's expressions and comes here too, so both
/// paths reduce a rule the same way.
pub(super) fn add_rule<'a>(
    table: &mut TableIr<'a>,
    chain: Cow<'a, str>,
    handle: Option<u64>,
    comment: Option<&str>,
    statements: &[Expr<'a>],
) {
    let (rule, problem) = reduce_rule(handle, comment, statements);
    table.unparsed.extend(problem);
    table.chain_mut(chain, 0).rules.push(rule);
}

/// One rule, given as nft's JSON statements, reduced to what its table keeps, with what
/// of it could not be read.
pub(crate) fn reduce_rule<'a>(
    handle: Option<u64>,
    comment: Option<&str>,
    statements: &[Expr<'a>],
) -> (RuleIr<'a>, Option<crate::heart::model::Unparsed>) {
    let (mut rule, problem) = lower_rule(statements);
    rule.handle = handle;
    if let Some(dnat) = rule.dnat.as_mut() {
        dnat.text = render_rule(statements, comment).into();
    }
    let problem = problem.map(|reason| unparsed(0, &render_rule(statements, comment), reason));
    // Most rules jump nowhere or to one chain: no spare capacity is kept.
    rule.jumps.shrink_to_fit();
    (rule, problem)
}

/// Reads where a rule can send a packet: its `goto`/`jump` verdicts (also inside an
/// inline verdict map) and its DNAT. A DNAT portdrift cannot read (to a map lookup, or
/// without a port) is returned as a problem; the rule's jumps are still kept.
fn lower_rule<'a>(statements: &[Expr<'a>]) -> (RuleIr<'a>, Option<String>) {
    let mut rule = RuleIr::default();
    let mut problem = None;
    for statement in statements {
        let Some((kind, value)) = statement.single() else {
            continue;
        };
        match kind {
            "goto" | "jump" => rule.jumps.extend(value.get("target").and_then(Expr::as_str_cow)),
            "vmap" => {
                // `vmap @map` dispatches through a named map (kube-proxy's `services`
                // chain); those maps are read as maps. Only inline maps are followed.
                let data = value.get("data");
                if data.and_then(Expr::as_str).and_then(|m| m.strip_prefix('@'))
                    == Some(super::SERVICE_NODEPORTS_MAP)
                {
                    rule.nodeport_dispatch = true;
                }
                let entries = data.and_then(|d| d.get("set")).and_then(Expr::as_list);
                for entry in entries.unwrap_or_default() {
                    let verdict = entry.as_list().and_then(|pair| pair.get(1));
                    rule.jumps.extend(verdict.and_then(verdict_chain));
                }
            }
            "dnat" => match dnat_address(value) {
                Ok(addr) => {
                    rule.dnat = Some(Box::new(DnatIr {
                        addr,
                        text: Arc::from(""),
                    }))
                }
                Err(reason) => problem = Some(reason.to_string()),
            },
            _ => {}
        }
    }
    (rule, problem)
}

/// `{"goto": {"target": "x"}}` or `{"jump": ...}` → `x`.
fn verdict_chain<'a>(verdict: &Expr<'a>) -> Option<Cow<'a, str>> {
    match verdict.single()? {
        ("goto" | "jump", target) => target.get("target")?.as_str_cow(),
        _ => None,
    }
}

/// `{"addr": "10.180.0.3", "port": 80}` (and `"family": "ip6"` in inet tables).
fn dnat_address(dnat: &Expr<'_>) -> Result<SocketAddr, DnatError> {
    let addr = dnat.get("addr").ok_or(DnatError::WithoutAddress)?;
    let Some(ip) = addr.as_str().and_then(|a| a.parse::<IpAddr>().ok()) else {
        return Err(DnatError::ComputedAddress);
    };
    match dnat.get("port") {
        Some(Expr::Uint(port)) if *port <= u64::from(u16::MAX) => Ok(SocketAddr::new(ip, *port as u16)),
        Some(_) => Err(DnatError::ComputedPort),
        None => Err(DnatError::WithoutPort),
    }
}

fn read_map<'a>(
    table: &mut TableIr<'a>,
    body: ObjectBody<'a>,
    odd: &dyn Fn(String) -> crate::decode::nftables::Unparsed,
) {
    let Some(BStr(name)) = body.name else {
        return table.unparsed.push(odd("map without a name".to_string()));
    };
    let elements: Vec<Expr<'a>> = match body.elem.map(|raw| serde_json::from_str(raw.get())).transpose() {
        Ok(elements) => elements.unwrap_or_default(),
        Err(e) => {
            return table
                .unparsed
                .push(odd(format!("unreadable elements of map {name}: {e}")));
        }
    };
    let mut map = MapIr {
        name,
        elements: Vec::with_capacity(elements.len()),
    };
    for element in &elements {
        match map_element(element) {
            Some(e) => map.elements.push(e),
            None => table.unparsed.push(unparsed(
                0,
                &render_expr_string(element),
                format!("element of map {} is not a `key : value` pair", map.name),
            )),
        }
    }
    table.maps.push(map);
}

/// `[key, verdict]`, where a key with a comment is wrapped: `{"elem": {"val": key, "comment": "…"}}`.
fn map_element<'a>(element: &Expr<'a>) -> Option<ElementIr<'a>> {
    let [key, value] = element.as_list()? else {
        return None;
    };
    let (key, comment) = match key.single() {
        Some(("elem", wrapped)) => (
            wrapped.get("val")?,
            wrapped.get("comment").and_then(Expr::as_str_cow),
        ),
        _ => (key, None),
    };
    let verdict = match value.single() {
        Some(("goto", t)) => ElementVerdict::Goto(t.get("target")?.as_str_cow()?),
        Some(("jump", t)) => ElementVerdict::Jump(t.get("target")?.as_str_cow()?),
        Some(("drop", _)) => ElementVerdict::Drop,
        Some(("accept", _)) => ElementVerdict::Accept,
        _ => ElementVerdict::Other(render_expr_string(value)),
    };
    Some(ElementIr {
        key: render_expr_string(key),
        comment,
        verdict,
        line: 0,
    })
}

#[cfg(test)]
mod tests;
