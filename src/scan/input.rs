//! Snapshot bundles: a directory of files captured from a node and from `kubectl`; and
//! the one reading path that serves a bundle and the live node alike.
//!
//! The bundle layout (every file optional) is in docs/scan.md. [`read_input`] reads any
//! [`Source`]: a [`BundleDir`] or the live node ([`crate::sources::live::LiveNode`]);
//! [`crate::scan::capture::write_snapshot`] captures a source into a bundle.

use std::path::{Path, PathBuf};

use crate::heart::input::Input;
use crate::heart::observed::Observed;
use crate::heart::outcome::{InputState, InputStatus, ScanInput};
use crate::scan::bundle_error::SnapshotError;
use crate::scan::readers::read_node_name;

pub use crate::sources::bundle::{BundleDir, Manifest, ManifestEntry, fetch_file, fetch_required};
pub use crate::sources::source::{Fetched, Source};
pub use rule_cache::RuleCache;
pub use rules::read_nftables_only;

use cilium_maps::read_cilium_maps;
use cluster_state::read_cluster;
use listeners::{read_owners, read_sockets};
use node_facts::{read_healthz, read_ipvs_traces, read_proxy_mode, read_sysctls};
use rule_cache::read_rules_cached;
use rules::{read_iptables, read_nftables};

mod cilium_maps;
mod cluster_state;
mod listeners;
mod node_facts;
mod rule_cache;
mod rules;

/// Reads a bundle directory. `node` overrides the bundle's `node` file.
pub fn read_bundle(dir: &Path, node: Option<&str>) -> Result<ScanInput, SnapshotError> {
    read_bundle_with(dir, node, None)
}

/// Reads a bundle directory, with `cluster_state` in place of its `cluster.json` when given.
pub fn read_bundle_with(
    dir: &Path,
    node: Option<&str>,
    cluster_state: Option<PathBuf>,
) -> Result<ScanInput, SnapshotError> {
    if !dir.exists() {
        return Err(SnapshotError::NotFound(dir.to_path_buf()));
    }
    if !dir.is_dir() {
        return Err(SnapshotError::NotADirectory(dir.to_path_buf()));
    }
    read_input(&BundleDir::new(dir, cluster_state), node).map_err(|e| match e {
        SnapshotError::Empty(_) => SnapshotError::Empty(dir.to_path_buf()),
        e => e,
    })
}

/// Reads everything a scan needs from `src`. `node` overrides the source's `node`.
///
/// Errors only when nothing at all could be read or the cluster state is unreadable;
/// every other problem is an [`InputStatus`] in the result.
pub fn read_input<S: Source>(src: &S, node: Option<&str>) -> Result<ScanInput, SnapshotError> {
    read_input_cached(src, node, &mut RuleCache::default())
}

/// [`read_input`], reusing from `cache` the rule dumps it allows (and refreshing it
/// with those read).
///
/// The rule dumps, the node's other files and the cluster state are read at once, each
/// on a thread of its own, and put together in that order: on a large node the rule
/// dumps and the cluster state each take a good part of a second.
pub fn read_input_cached<S: Source>(
    src: &S,
    node: Option<&str>,
    cache: &mut RuleCache,
) -> Result<ScanInput, SnapshotError> {
    let node = node.map(str::to_string).or_else(|| read_node_name(src));
    cache.drop_unreturned();
    let mut input = ScanInput {
        node: node.clone(),
        ..Default::default()
    };
    let (rules_present, (facts, facts_present), cluster) = std::thread::scope(|s| {
        let facts = s.spawn(|| read_node_facts(src));
        let cluster = s.spawn(|| {
            let mut part = ScanInput {
                node,
                ..Default::default()
            };
            read_cluster(src, &mut part).map(|present| (part, present))
        });
        let rules = read_rules(src, cache, &mut input);
        (rules, joined(facts), joined(cluster))
    });
    let (cluster, cluster_present) = cluster?;
    let rules = std::mem::take(&mut input.observed.dumps);
    input.observed = Observed {
        dumps: rules,
        ..facts.observed
    };
    input.sources.extend(facts.sources);
    input.desired = cluster.desired;
    input.sources.extend(cluster.sources);
    input.sources.extend(src.own_statuses());
    if rules_present + facts_present + usize::from(cluster_present) == 0 {
        return Err(SnapshotError::Empty(PathBuf::new()));
    }
    Ok(input)
}

/// A reading thread's result; its panic goes on in the caller.
pub(crate) fn joined<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Reads the iptables dumps and kube-proxy's nftables tables into `input`; returns how
/// many the source said anything about.
fn read_rules<S: Source>(src: &S, cache: &mut RuleCache, input: &mut ScanInput) -> usize {
    let mut present = 0;
    for dump in Input::IPTABLES {
        present += usize::from(read_rules_cached(cache, dump, input, |input| {
            read_iptables(src, dump, input)
        }));
    }
    present += usize::from(read_rules_cached(cache, Input::NftJson, input, |input| {
        read_nftables(src, input)
    }));
    present
}

/// Reads everything of the node but its rules: the sockets and their processes, the
/// sysctls, kube-proxy's endpoints, IPVS and Cilium. Returns it as an input of its own
/// (no rules, no cluster state) and how many files the source said anything about.
fn read_node_facts<S: Source>(src: &S) -> (ScanInput, usize) {
    let mut input = ScanInput::default();
    let mut present = 0;
    for table in Input::SOCKETS {
        present += usize::from(read_sockets(src, table, &mut input));
    }
    read_owners(src, &mut input);
    present += read_sysctls(src, &mut input);
    present += usize::from(read_healthz(src, &mut input));
    present += usize::from(read_proxy_mode(src, &mut input));
    present += read_ipvs_traces(src, &mut input);
    present += read_cilium_maps(src, &mut input);
    (input, present)
}

/// A fetch, settled into the status to report and the content to use.
struct Settled<T> {
    status: InputStatus,
    value: Option<T>,
    /// The content is complete as far as the source knows (not cut by a failure, a
    /// deadline or the size limit).
    trusted: bool,
}

/// Turns a fetch into a status. None: not present, not reported.
fn settle<T, S: Source>(src: &S, input: Input, fetched: Fetched<T>) -> Option<Settled<T>> {
    let state = fetched.state?;
    let mut status = InputStatus::new(input, state);
    let label = src.label(input);
    if label != input.name() {
        status.origin = Some(label);
    }
    status.notes = fetched.notes;
    let mut value = None;
    match fetched.value {
        Some(Ok(v)) => value = Some(v),
        // The size limit cut the stream: that is already the state.
        Some(Err(_)) if state == InputState::TooLarge => {}
        Some(Err(e)) => {
            status.status = InputState::Error;
            // A file of the wrong kind says what it is itself; a failed read is said as one.
            status.notes.push(if e.kind() == std::io::ErrorKind::InvalidData {
                e.to_string()
            } else {
                format!("reading it failed: {e}")
            });
        }
        None => {}
    }
    // What a tool printed before the size limit stopped it is not used: a dump cut at
    // an arbitrary byte says little, and the live scan cannot parse it either.
    if state == InputState::TooLarge {
        value = None;
    }
    Some(Settled {
        trusted: matches!(state, InputState::Ok | InputState::Empty | InputState::Partial),
        status,
        value,
    })
}

#[cfg(test)]
mod tests;
