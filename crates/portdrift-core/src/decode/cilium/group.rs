//! Services-map entries → [`Frontend`]s: each frontend's master (slot 0) with its
//! backend slots. What does not fit the datapath's view (a slot without a master, a
//! slot past `count + qcount`, a slot or master seen twice with different values, a
//! slot missing below `count + qcount`) is a [`GroupProblem`], never resolved by guess.

use std::collections::BTreeMap;

use crate::heart::cilium::{Frontend, FrontendKey, GroupProblem, ServiceEntry};

#[derive(Default)]
struct Found<'a> {
    masters: Vec<&'a ServiceEntry>,
    slots: BTreeMap<u16, Vec<u32>>,
}

/// Groups services-map entries into frontends, ordered by key, with the problems found.
pub fn group_frontends(entries: &[ServiceEntry]) -> (Vec<Frontend>, Vec<GroupProblem>) {
    let mut by_key: BTreeMap<FrontendKey, Found> = BTreeMap::new();
    for entry in entries {
        let found = by_key.entry(FrontendKey::of(entry)).or_default();
        if entry.is_master() {
            found.masters.push(entry);
        } else {
            found.slots.entry(entry.slot).or_default().push(entry.word);
        }
    }

    let mut frontends = Vec::new();
    let mut problems = Vec::new();
    for (key, found) in by_key {
        let Some((&master, others)) = found.masters.split_first() else {
            problems.push(GroupProblem::MissingMaster {
                key,
                slots: found.slots.keys().copied().collect(),
            });
            continue;
        };
        if others.iter().any(|m| *m != master) {
            problems.push(GroupProblem::ConflictingMaster { key });
            continue;
        }
        if !others.is_empty() {
            problems.push(GroupProblem::RepeatedEntry { key, slot: 0 });
        }
        let reachable = u32::from(master.count) + u32::from(master.qcount);
        let missing = gaps(found.slots.keys().copied(), reachable);
        if !missing.is_empty() {
            problems.push(GroupProblem::MissingSlots { key, ranges: missing });
        }
        let mut slots = Vec::new();
        for (slot, mut ids) in found.slots {
            let first = ids.first().copied().unwrap_or_default();
            if ids.len() > 1 {
                ids.sort_unstable();
                ids.dedup();
                if ids.len() > 1 {
                    problems.push(GroupProblem::ConflictingSlot {
                        key,
                        slot,
                        backend_ids: ids,
                    });
                    continue;
                }
                problems.push(GroupProblem::RepeatedEntry { key, slot });
            }
            if u32::from(slot) > reachable {
                problems.push(GroupProblem::SlotBeyondCount {
                    key,
                    slot,
                    backend_id: first,
                    count: master.count,
                    qcount: master.qcount,
                });
                continue;
            }
            slots.push((slot, first));
        }
        frontends.push(Frontend {
            address: key.address,
            port: key.port,
            proto: key.proto,
            scope: key.scope,
            count: master.count,
            qcount: master.qcount,
            rev_nat: master.rev_nat,
            flags: master.flags,
            master_word: master.word,
            slots,
        });
    }
    (frontends, problems)
}

/// The ranges of `1..=reachable` not in `present` (ascending slot numbers, none 0), in
/// time linear in `present` rather than in `reachable`.
fn gaps(present: impl Iterator<Item = u16>, reachable: u32) -> Vec<(u16, u16)> {
    let mut out = Vec::new();
    let mut next: u32 = 1;
    for slot in present.map(u32::from) {
        if slot > reachable {
            break;
        }
        if slot > next {
            push_range(&mut out, next, slot - 1);
        }
        next = next.max(slot + 1);
    }
    if next <= reachable {
        push_range(&mut out, next, reachable);
    }
    out
}

fn push_range(out: &mut Vec<(u16, u16)>, first: u32, last: u32) {
    // count + qcount can exceed u16::MAX, but no slot number can: clamp.
    let clamp = |n: u32| u16::try_from(n).unwrap_or(u16::MAX);
    if first <= u32::from(u16::MAX) {
        out.push((clamp(first), clamp(last)));
    }
}
