//! Reading Cilium's service maps: each map's type and sizes, then its entries, for
//! every family whose services map the source has; decoded into the observed state's
//! [`CiliumMaps`]. On the live node the maps are read a second time, so the check can
//! drop what only a read that raced the agent's updates showed.

use std::io;

use crate::decode::cilium::{
    FamilyDumps, MapDump, family_maps, layout_mismatch, parse_bpftool_show, read_bpftool_dump,
};
use crate::heart::cilium::{CiliumMaps, MapKind, MapRead, MapStats};
use crate::heart::input::{Input, MapForm};
use crate::heart::outcome::{InputState, InputStatus, ScanInput};
use crate::scan::readers::read_all;
use crate::sources::source::Source;

use super::settle;

/// A map's decoded entries, and whether the source gave it whole.
type Entries = (MapDump, bool);

/// Problems quoted per map.
const QUOTED: usize = 3;

/// Reads the maps into `input`. Returns how many map files the source had.
pub(super) fn read_cilium_maps<S: Source>(src: &S, input: &mut ScanInput) -> usize {
    let (maps, statuses) = read_maps(src);
    let present = statuses.len();
    input.sources.extend(statuses);
    if maps.present() {
        if src.rereads_may_differ() {
            input.observed.cilium_confirm = Some(read_maps(src).0);
        }
        input.observed.cilium = Some(maps);
    }
    present
}

fn read_maps<S: Source>(src: &S) -> (CiliumMaps, Vec<InputStatus>) {
    let mut maps = CiliumMaps::default();
    let mut statuses = Vec::new();
    for kinds in Input::CILIUM_MAPS {
        let mut dumps: Vec<Option<Entries>> = Vec::new();
        for kind in kinds {
            let read = read_map(src, kind);
            if let Some((status, map_read, dump)) = read {
                statuses.push(status);
                maps.reads.push(map_read);
                dumps.push(dump);
            } else {
                dumps.push(None);
            }
        }
        let [services, backends, rev_nat] = [0, 1, 2].map(|i| {
            dumps
                .get(i)
                .and_then(|d| d.as_ref())
                .map(|(d, whole)| (d, *whole))
        });
        if services.is_none() {
            continue;
        }
        let family = kinds[0].family();
        maps.families.insert(
            family,
            family_maps(FamilyDumps {
                services,
                backends,
                rev_nat,
            }),
        );
    }
    (maps, statuses)
}

/// One map: its status, its read, and its entries when they were read (with whether
/// whole). None when the source does not have the map.
fn read_map<S: Source>(src: &S, kind: MapKind) -> Option<(InputStatus, MapRead, Option<Entries>)> {
    let entries = Input::CiliumMap {
        kind,
        form: MapForm::Entries,
    };
    let stats = read_stats(src, kind);
    let fetched = src.fetch_bytes(entries, move |r| {
        read_bpftool_dump(r, kind).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
    });
    let settled = settle(src, entries, fetched)?;
    let mut status = settled.status;
    let mut read = MapRead {
        kind,
        origin: status
            .origin
            .clone()
            .unwrap_or_else(|| entries.name().to_string()),
        stats: None,
        entries: 0,
        unreadable: Vec::new(),
        unreadable_count: 0,
        complete: false,
    };
    match stats {
        Some(Ok(stats)) => {
            if let Some(why) = layout_mismatch(kind, &stats) {
                status.status = InputState::Error;
                status.notes.push(format!("not decoded: {why}"));
                read.unreadable.push(why);
                read.stats = Some(stats);
                return Some((status, read, None));
            }
            status.notes.push(format!("max_entries {}", stats.max_entries));
            read.stats = Some(stats);
        }
        Some(Err(why)) => status.notes.push(format!("its size limit is unknown: {why}")),
        None => status.notes.push(format!(
            "its size limit is unknown: {} was not read",
            Input::CiliumMap {
                kind,
                form: MapForm::Info
            }
        )),
    }
    let Some(dump) = settled.value else {
        read.unreadable.push(
            status
                .notes
                .first()
                .cloned()
                .unwrap_or_else(|| format!("{entries} could not be read")),
        );
        return Some((status, read, None));
    };
    read.entries = dump.entries;
    read.unreadable_count = dump.problems.len();
    read.unreadable = dump
        .problems
        .iter()
        .take(QUOTED)
        .map(|p| format!("entry {}: {}", p.index, p.error))
        .collect();
    read.complete = settled.trusted && dump.problems.is_empty();
    status.items = Some(dump.entries);
    status.unparsed = dump.problems.len();
    if !dump.problems.is_empty() && status.status == InputState::Ok {
        status.status = InputState::Partial;
    }
    status.notes.extend(read.unreadable.iter().cloned());
    Some((status, read, Some((dump, settled.trusted))))
}

/// The map's type and sizes; None when the source does not have them.
fn read_stats<S: Source>(src: &S, kind: MapKind) -> Option<Result<MapStats, String>> {
    let info = Input::CiliumMap {
        kind,
        form: MapForm::Info,
    };
    let fetched = src.fetch_bytes(info, |r| read_all(r));
    let settled = settle(src, info, fetched)?;
    Some(match settled.value {
        Some(bytes) => parse_bpftool_show(&bytes).map_err(|e| e.to_string()),
        None => Err(settled
            .status
            .notes
            .first()
            .cloned()
            .unwrap_or_else(|| format!("{info} could not be read"))),
    })
}
