//! Reading the netfilter rules: the iptables dumps and kube-proxy's nftables tables,
//! the source's own way (netlink) when it has one, else from the dump's text.

use std::io;

use crate::decode::iptables::{self, SourceHint};
use crate::decode::nftables;
use crate::heart::model::{Backend, Family, Lookup, RuleSource};
use crate::heart::outcome::{ScanInput, SourceState, SourceStatus};
use crate::scan::readers::read_all;
use crate::sources::bundle::{Fetched, Source};
use crate::sources::live::{NFT_NETLINK_LABEL, iptables_netlink_label};

use super::settle;

/// Reads one iptables dump. Returns whether the source said anything about it.
pub(super) fn read_iptables<S: Source>(
    src: &S,
    name: &str,
    backend: Option<Backend>,
    family: Family,
    input: &mut ScanInput,
) -> bool {
    let fallback = match src.iptables_direct(name) {
        None => None,
        Some(Ok(direct)) => {
            let lookup = src.lookup();
            return read_iptables_direct(name, backend, family, direct, lookup, input);
        }
        Some(Err(why)) => Some(format!(
            "reading over netlink failed ({why}); read with {} instead",
            src.label(name)
        )),
    };
    noting_fallback(input, fallback, |input| {
        read_iptables_dump(src, name, backend, family, input)
    })
}

/// Runs `read`, putting `fallback` (why the direct way was not used) first in the
/// notes of every status it adds.
fn noting_fallback(
    input: &mut ScanInput,
    fallback: Option<String>,
    read: impl FnOnce(&mut ScanInput) -> bool,
) -> bool {
    let before = input.sources.len();
    let present = read(input);
    if let Some(note) = fallback {
        for status in &mut input.sources[before..] {
            status.notes.insert(0, note.clone());
        }
    }
    present
}

/// An iptables dump as a source read it itself.
fn read_iptables_direct(
    name: &str,
    backend: Option<Backend>,
    family: Family,
    direct: Fetched<Option<RuleSource>>,
    lookup: Lookup,
    input: &mut ScanInput,
) -> bool {
    let mut status = SourceStatus::new(name, direct.state.unwrap_or(SourceState::Ok));
    status.origin = Some(iptables_netlink_label(family).to_string());
    status.backend = backend;
    status.family = Some(family);
    status.notes = direct.notes;
    match direct.value {
        Some(Ok(Some(parsed))) => push_rule_source(input, parsed, status, lookup),
        _ => input.sources.push(status),
    }
    true
}

/// Reads one iptables dump's text.
fn read_iptables_dump<S: Source>(
    src: &S,
    name: &str,
    backend: Option<Backend>,
    family: Family,
    input: &mut ScanInput,
) -> bool {
    let origin = src.label(name);
    let hint = SourceHint {
        backend,
        family: Some(family),
        whole: src.dumps_whole(),
    };
    let fetched = src.fetch(name, move |r| {
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
    let Some(settled) = settle(src, name, fetched) else {
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
            push_rule_source(input, parsed, status, src.lookup());
        }
    }
    true
}

fn push_rule_source(input: &mut ScanInput, mut source: RuleSource, mut status: SourceStatus, lookup: Lookup) {
    source.lookup = lookup;
    if !source.complete && status.status == SourceState::Ok {
        status.status = SourceState::Partial;
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
    input.observed.sources.push(source);
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

/// Reads kube-proxy's nftables tables the source's own way when it has one (the live
/// node: netlink), else from `nft.json`, or `nft.txt` when there is no JSON.
pub(super) fn read_nftables<S: Source>(src: &S, input: &mut ScanInput) -> bool {
    let fallback = match src.nftables_direct() {
        None => None,
        Some(Ok(direct)) => {
            let lookup = src.lookup();
            return read_nftables_direct(direct, lookup, input);
        }
        Some(Err(why)) => Some(format!(
            "reading over netlink failed ({why}); read with nft -j instead"
        )),
    };
    noting_fallback(input, fallback, |input| read_nftables_dump(src, input))
}

/// The tables as a source read them itself.
fn read_nftables_direct(direct: Fetched<Vec<RuleSource>>, lookup: Lookup, input: &mut ScanInput) -> bool {
    let mut status = SourceStatus::new("nft.json", direct.state.unwrap_or(SourceState::Ok));
    status.origin = Some(NFT_NETLINK_LABEL.to_string());
    status.backend = Some(Backend::Nftables);
    status.notes = direct.notes;
    match direct.value {
        Some(Ok(sources)) if !sources.is_empty() => {
            for source in sources {
                push_rule_source(input, source, status.clone(), lookup);
            }
        }
        _ => input.sources.push(status),
    }
    true
}

/// Reads `nft.json`, or `nft.txt` when there is no JSON.
fn read_nftables_dump<S: Source>(src: &S, input: &mut ScanInput) -> bool {
    let mut name = "nft.json";
    let mut fetched = src.fetch(name, read_all);
    let json = fetched.state.is_some();
    if !json {
        name = "nft.txt";
        fetched = src.fetch(name, read_all);
    }
    let origin = src.label(name);
    let Some(settled) = settle(src, name, fetched) else {
        return false;
    };
    let mut status = settled.status;
    status.backend = Some(Backend::Nftables);
    let Some(bytes) = settled.value else {
        input.sources.push(status);
        return true;
    };
    if json && status.status == SourceState::Ok && !nft_json_has_table(&bytes) {
        status.status = SourceState::Empty;
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
                status.status = SourceState::Error;
                status.notes.push(why);
                input.sources.push(status);
                return true;
            }
        }
    };
    match parsed {
        Ok(sources) if sources.is_empty() => {
            status.items = Some(0);
            if status.status != SourceState::Empty {
                status.notes.push("no kube-proxy nftables table".into());
            }
            input.sources.push(status);
        }
        Ok(sources) => {
            for mut s in sources {
                if !settled.trusted {
                    s.complete = false;
                }
                push_rule_source(input, s, status.clone(), src.lookup());
            }
        }
        Err(e) if bytes.is_empty() => {
            let _ = e;
            input.sources.push(status);
        }
        Err(e) => {
            status.status = SourceState::Error;
            status.notes.push(e.to_string());
            input.sources.push(status);
        }
    }
    true
}
