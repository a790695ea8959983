//! Reading the listening sockets (`/proc/net/*`) and the processes behind them.

use std::collections::HashSet;

use crate::decode::sockets;
use crate::heart::input::Input;
use crate::heart::model::Family;
use crate::heart::outcome::{InputState, InputStatus, ScanInput};
use crate::scan::readers::read_all;
use crate::sources::source::Source;

use super::settle;

/// Names the processes behind the listeners, where the source can (the live node).
pub(super) fn read_owners<S: Source>(src: &S, input: &mut ScanInput) {
    let inodes: HashSet<u64> = input.observed.listeners.iter().map(|l| l.inode).collect();
    if inodes.is_empty() {
        return;
    }
    let Some(owners) = src.owners(&inodes) else {
        return;
    };
    let mut status = InputStatus::new(Input::SocketOwners, InputState::Ok);
    status.items = Some(owners.by_inode.len());
    if owners.by_inode.len() < inodes.len() && !owners.notes.is_empty() {
        status.status = InputState::Partial;
    }
    status.notes = owners.notes;
    input.sources.push(status);
    input.observed.owners = owners.by_inode;
}

/// Reads one socket table.
pub(super) fn read_sockets<S: Source>(src: &S, table: Input, input: &mut ScanInput) -> bool {
    let Input::Sockets { protocol, family } = table else {
        return false;
    };
    let origin = src.label(table);
    let fetched = src.fetch_bytes(table, read_all);
    let Some(settled) = settle(src, table, fetched) else {
        return false;
    };
    let mut status = settled.status;
    if let Some(bytes) = settled.value {
        let (listeners, unparsed) =
            sockets::parse_proc_net(&bytes, protocol.protocol(), family == Family::Ipv6, &origin);
        if !unparsed.is_empty() && status.status == InputState::Ok {
            status.status = InputState::Partial;
        }
        status.items = Some(listeners.len());
        status.unparsed = unparsed.len();
        status.notes.extend(
            unparsed
                .iter()
                .take(5)
                .map(|u| format!("line {}: {}", u.line, u.reason)),
        );
        input.observed.listeners.extend(listeners);
    }
    input.sources.push(status);
    true
}
