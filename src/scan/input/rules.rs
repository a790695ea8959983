//! Reading the netfilter rules: the iptables dumps and kube-proxy's nftables tables,
//! the source's own way (netlink) when it has one, else from the dump's text.

use std::io;

use crate::decode::iptables::{self, SourceHint};
use crate::decode::nftables;
use crate::heart::input::Input;
use crate::heart::model::{Backend, Family, Lookup, RuleDump};
use crate::heart::outcome::{InputState, InputStatus, ScanInput};
use crate::scan::readers::read_all;
use crate::sources::source::{Fetched, Read, Rules, Source};

use super::settle;

/// Reads one iptables dump: rules the source read itself, or the dump's text. Returns
/// whether the source said anything about it.
pub(super) fn read_iptables<S: Source>(src: &S, dump: Input, input: &mut ScanInput) -> bool {
    let backend = dump.iptables_backend();
    let Input::Iptables { family, .. } = dump else {
        return false;
    };
    let origin = src.label(dump);
    let hint = SourceHint {
        backend,
        family: Some(family),
        whole: src.dumps_whole(),
    };
    let fetched = src.fetch::<_, Rules, _>(dump, move |r| {
        // Another kind of listing (nft text or JSON, `iptables -L`, a tool's error) is
        // refused whole, in one sentence, rather than read as lines not understood.
        if let Some(foreign) = iptables::sniff_foreign(r.fill_buf()?) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, foreign));
        }
        let mut counting = crate::sources::bundle::Counting { inner: r, count: 0 };
        let mut parsed = iptables::parse_save(&mut counting, &origin, hint)?;
        // A save with a listing pasted into it is told only further down: refused too.
        if let Some(why) = parsed.bad_capture.take() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, why));
        }
        Ok((parsed, counting.count))
    });
    match fetched.split() {
        Read::Rules(rules) => keep_rules(dump, backend, Some(family), rules, src.lookup(), input),
        Read::Bytes(fetched) => keep_iptables_dump(src, dump, backend, family, fetched, input),
    }
}

/// Rule dumps as a source read them itself.
fn keep_rules(
    dump: Input,
    backend: Option<Backend>,
    family: Option<Family>,
    read: Fetched<Rules>,
    lookup: Lookup,
    input: &mut ScanInput,
) -> bool {
    let mut status = InputStatus::new(dump, read.state.unwrap_or(InputState::Ok));
    status.backend = backend;
    status.family = family;
    status.notes = read.notes;
    let dumps = match read.value {
        Some(Ok(rules)) => {
            status.origin = Some(rules.origin);
            rules.dumps
        }
        _ => Vec::new(),
    };
    if dumps.is_empty() {
        input.sources.push(status);
        return true;
    }
    for rule_dump in dumps {
        push_rule_dump(input, rule_dump, status.clone(), lookup);
    }
    true
}

/// Keeps one iptables dump's text, parsed.
fn keep_iptables_dump<S: Source>(
    src: &S,
    dump: Input,
    backend: Option<Backend>,
    family: Family,
    fetched: Fetched<(RuleDump, u64)>,
    input: &mut ScanInput,
) -> bool {
    let Some(settled) = settle(src, dump, fetched) else {
        return false;
    };
    let mut status = settled.status;
    status.backend = backend;
    status.family = Some(family);
    match settled.value {
        // Nothing printed: no tables in this backend.
        Some((_, 0)) | None => input.sources.push(status),
        Some((mut parsed, _)) => {
            if !settled.trusted {
                parsed.complete = false;
            }
            push_rule_dump(input, parsed, status, src.lookup());
        }
    }
    true
}

fn push_rule_dump(input: &mut ScanInput, mut source: RuleDump, mut status: InputStatus, lookup: Lookup) {
    source.lookup = lookup;
    if !source.complete && status.status == InputState::Ok {
        status.status = InputState::Partial;
    }
    status.backend = Some(source.backend);
    status.family = Some(source.family);
    status.items = Some(source.nodeports.len());
    status.unparsed = source.unparsed.len();
    status.notes.extend(source.notes.iter().cloned());
    if !source.shows_kube_proxy() {
        status.notes.push("no kube-proxy chains".into());
    }
    input.sources.push(status);
    input.observed.dumps.push(source);
}

/// Whether an `nft -j list ruleset` dump holds any table (each table is an object
/// `{"table": {...}}` in the `nftables` array; rules name their table as a string
/// field further inside their object, never first).
fn nft_json_has_table(bytes: &[u8]) -> bool {
    memchr::memmem::find(bytes, br#"{"table":"#).is_some()
}

/// Reads kube-proxy's nftables tables alone (for comparing the ways of reading them).
pub fn read_nftables_only<S: Source>(src: &S) -> ScanInput {
    let mut input = ScanInput::default();
    read_nftables(src, &mut input);
    input
}

/// Reads kube-proxy's nftables tables: rules the source read itself (the live node:
/// netlink), else `nft.json`, or `nft.txt` when there is no JSON.
pub(super) fn read_nftables<S: Source>(src: &S, input: &mut ScanInput) -> bool {
    let (dump, fetched) = match src.fetch::<_, Rules, _>(Input::NftJson, read_all).split() {
        Read::Rules(rules) => {
            let lookup = src.lookup();
            return keep_rules(
                Input::NftJson,
                Some(Backend::Nftables),
                None,
                rules,
                lookup,
                input,
            );
        }
        Read::Bytes(fetched) if fetched.state.is_some() => (Input::NftJson, fetched),
        Read::Bytes(_) => (Input::NftText, src.fetch_bytes(Input::NftText, read_all)),
    };
    let json = dump == Input::NftJson;
    let origin = src.label(dump);
    let Some(settled) = settle(src, dump, fetched) else {
        return false;
    };
    let mut status = settled.status;
    status.backend = Some(Backend::Nftables);
    let Some(bytes) = settled.value else {
        input.sources.push(status);
        return true;
    };
    if json && status.status == InputState::Ok && !nft_json_has_table(&bytes) {
        status.status = InputState::Empty;
    }
    let parsed = if json {
        nftables::parse_ruleset_json(&bytes, &origin)
    } else {
        // `nft list ruleset` never prints a NUL byte: a file holding one is not its
        // output (a binary file, a corrupted copy), whatever else in it parses.
        let text = std::str::from_utf8(&bytes)
            .map_err(|e| format!("not text: {e}"))
            .and_then(|text| match text.find('\0') {
                Some(at) => Err(format!(
                    "not text: a NUL byte at offset {at}, which nft never prints"
                )),
                None => Ok(text),
            });
        match text {
            Ok(text) => nftables::parse_ruleset_text(text, &origin),
            Err(why) => {
                status.status = InputState::Error;
                status.notes.push(why);
                input.sources.push(status);
                return true;
            }
        }
    };
    match parsed {
        Ok(sources) if sources.is_empty() => {
            status.items = Some(0);
            if status.status != InputState::Empty {
                status.notes.push("no kube-proxy nftables table".into());
            }
            input.sources.push(status);
        }
        Ok(sources) => {
            for mut s in sources {
                if !settled.trusted {
                    s.complete = false;
                }
                push_rule_dump(input, s, status.clone(), src.lookup());
            }
        }
        Err(e) if bytes.is_empty() => {
            let _ = e;
            input.sources.push(status);
        }
        Err(e) => {
            status.status = InputState::Error;
            status.notes.push(e.to_string());
            input.sources.push(status);
        }
    }
    true
}
