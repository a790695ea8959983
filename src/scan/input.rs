//! Snapshot bundles: a directory of files captured from a node and from `kubectl`; and
//! the one reading path that serves a bundle and the live node alike.
//!
//! Layout (every file optional; see the README):
//! `iptables-nft-save.txt`, `iptables-legacy-save.txt`, `ip6tables-nft-save.txt`,
//! `ip6tables-legacy-save.txt` (or one `iptables-save.txt` / `ip6tables-save.txt`),
//! `nft.json` (`nft -j list ruleset`) or `nft.txt` (`nft list ruleset`),
//! `proc/net/{tcp,tcp6,udp,udp6}`, `proc/sys/net/ipv4/{ip_local_port_range,
//! ip_local_reserved_ports}`, `kube-proxy-healthz.json` (the body of kube-proxy's
//! `/healthz`), `cluster.json`, `node`, and `snapshot.json` (the capture's manifest:
//! how reading each source went).
//!
//! [`read_input`] reads any [`Source`]: a [`BundleDir`] or the live node
//! (`observed::live::LiveNode`). [`write_snapshot`] captures a source into a bundle.

use std::io::{self, BufRead, Read};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::decode::cluster;
use crate::decode::iptables::{self, SourceHint};
use crate::decode::node;
use crate::decode::{nftables, sockets};
use crate::heart::model::{Backend, Family, Protocol, RuleSource};
use crate::heart::observed::SOCKET_FILES;
use crate::heart::observed::{KubeProxyHealth, NodeSysctls};
use crate::heart::outcome::{ScanInput, SourceState, SourceStatus};
use crate::sources::bundle::{
    HEALTHZ_FILE, IP_VS_FILE, IPTABLES_FILES, LOCAL_PORT_RANGE_FILE, NET_DEV_FILE, PROXY_MODE_FILE,
    RESERVED_PORTS_FILE,
};

pub use crate::scan::capture::{SnapshotOptions, write_snapshot};
pub use crate::sources::bundle::{
    BundleDir, Fetched, MANIFEST_FILE, Manifest, ManifestEntry, Source, fetch_file, fetch_required,
};

/// Why a bundle could not be scanned or written at all.
#[derive(Debug, Error)]
pub enum SnapshotError {
    #[error("{0} is not a directory: a bundle is a directory of captured files")]
    NotADirectory(PathBuf),
    #[error(
        "{0} holds none of the files of a bundle (iptables-*-save.txt, nft.json, proc/net/*, cluster.json)"
    )]
    Empty(PathBuf),
    #[error("cannot read the cluster state {path}: {source}")]
    ClusterState {
        path: PathBuf,
        #[source]
        source: cluster::ClusterFileError,
    },
    #[error("{0} is not empty: pass --force to replace the bundle files in it")]
    NotEmpty(PathBuf),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The largest sysctl, node name or health answer read.
const SMALL_FILE: u64 = 64 << 10;

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
    if !dir.is_dir() {
        return Err(SnapshotError::NotADirectory(dir.to_path_buf()));
    }
    read_input(&mut BundleDir::new(dir, cluster_state), node).map_err(|e| match e {
        SnapshotError::Empty(_) => SnapshotError::Empty(dir.to_path_buf()),
        e => e,
    })
}

/// Reads everything a scan needs from `src`. `node` overrides the source's `node`.
///
/// Errors only when nothing at all could be read or the cluster state is unreadable;
/// every other problem is a [`SourceStatus`] in the result.
pub fn read_input<S: Source>(src: &mut S, node: Option<&str>) -> Result<ScanInput, SnapshotError> {
    read_input_cached(src, node, &mut RuleCache::default())
}

/// What the last read of each rule dump gave, so that a dump the kernel says has not
/// changed since is not read again: on a 10,000-Service node one `iptables-nft-save`
/// costs over a second of CPU, the rest of a scan a small fraction of that.
///
/// The caller decides what may be reused (see [`RuleCache::allow_reuse`]): only what
/// a change notification covers, and only while none has arrived since the read. The
/// rules themselves are lent, not copied: a read moves them into the scan's input, and
/// [`RuleCache::keep`] takes them back from the finished scan (the agent holds one copy
/// of a large node's rules, not two).
#[derive(Debug, Default)]
pub struct RuleCache {
    /// The dumps whose reads are kept at all.
    keepable: Vec<&'static str>,
    reuse: Vec<&'static str>,
    entries: Vec<(&'static str, CachedRead)>,
    /// Where the last read put each kept dump's sources in `observed.sources`.
    lent: Vec<(&'static str, std::ops::Range<usize>)>,
}

#[derive(Debug, Clone)]
struct CachedRead {
    present: bool,
    statuses: Vec<SourceStatus>,
    /// None while lent to a scan, or when the scan never gave them back.
    sources: Option<Vec<RuleSource>>,
}

impl RuleCache {
    /// A cache that keeps the reads of these dumps (and no others).
    pub fn keeping(names: &[&'static str]) -> RuleCache {
        RuleCache {
            keepable: names.to_vec(),
            ..RuleCache::default()
        }
    }

    /// The next read may reuse these dumps' last results instead of reading them.
    pub fn allow_reuse(&mut self, names: &[&'static str]) {
        self.reuse.clear();
        self.reuse.extend_from_slice(names);
    }

    /// Takes back the rule sources of the read that last used this cache, from the
    /// finished scan (in the order the read produced them).
    pub fn keep(&mut self, mut sources: Vec<RuleSource>) {
        for (name, range) in std::mem::take(&mut self.lent) {
            if range.end > sources.len() {
                continue;
            }
            let taken: Vec<RuleSource> = sources
                .splice(
                    range.clone(),
                    std::iter::repeat_with(|| RuleSource::empty("", Backend::IptablesNft, Family::Ipv4))
                        .take(range.len()),
                )
                .collect();
            if let Some((_, read)) = self.entries.iter_mut().find(|(n, _)| *n == name) {
                read.sources = Some(taken);
            }
        }
    }

    fn reusable(&mut self, name: &str) -> Option<&mut CachedRead> {
        if !self.reuse.contains(&name) {
            return None;
        }
        self.entries
            .iter_mut()
            .find(|(n, read)| *n == name && read.sources.is_some())
            .map(|(_, read)| read)
    }

    fn forget(&mut self, name: &str) {
        self.entries.retain(|(n, _)| *n != name);
    }

    /// Keeps `read` for the next scan; false when it is not kept.
    fn store(&mut self, name: &'static str, read: CachedRead) -> bool {
        self.forget(name);
        // A dump that could not be read whole is read again next time, whatever the
        // kernel says: its failure may have been passing.
        let whole = read.statuses.iter().all(|s| {
            matches!(
                s.status,
                SourceState::Ok | SourceState::Empty | SourceState::Absent
            )
        });
        let keep = whole && self.keepable.contains(&name);
        if keep {
            self.entries.push((name, read));
        }
        keep
    }
}

/// Reads one rule dump with `read`, or replays its last result from `cache` when that
/// may be reused.
fn read_rules_cached(
    cache: &mut RuleCache,
    name: &'static str,
    input: &mut ScanInput,
    read: impl FnOnce(&mut ScanInput) -> bool,
) -> bool {
    let start = input.observed.sources.len();
    if let Some(last) = cache.reusable(name) {
        let present = last.present;
        for mut status in last.statuses.clone() {
            status
                .notes
                .push("not read again: the kernel announced no rule change since the last read".into());
            input.sources.push(status);
        }
        input
            .observed
            .sources
            .extend(last.sources.take().unwrap_or_default());
        let end = input.observed.sources.len();
        cache.lent.push((name, start..end));
        return present;
    }
    // The last read goes before this one starts: on a large node it is tens of MiB,
    // and holding both would add it to the read's peak.
    cache.forget(name);
    let statuses_before = input.sources.len();
    let present = read(input);
    let kept = cache.store(
        name,
        CachedRead {
            present,
            statuses: input.sources[statuses_before..].to_vec(),
            sources: None,
        },
    );
    if kept {
        cache.lent.push((name, start..input.observed.sources.len()));
    }
    present
}

/// [`read_input`], reusing from `cache` the rule dumps it allows (and refreshing it
/// with those read).
pub fn read_input_cached<S: Source>(
    src: &mut S,
    node: Option<&str>,
    cache: &mut RuleCache,
) -> Result<ScanInput, SnapshotError> {
    let mut input = ScanInput {
        node: node.map(str::to_string).or_else(|| read_node_name(src)),
        ..Default::default()
    };
    // What an earlier read lent and never got back is gone (that scan failed).
    cache.lent.clear();
    let mut present = 0;
    for (name, backend, family) in IPTABLES_FILES {
        present += usize::from(read_rules_cached(cache, name, &mut input, |input| {
            read_iptables(src, name, backend, family, input)
        }));
    }
    present += usize::from(read_rules_cached(cache, "nft.json", &mut input, |input| {
        read_nftables(src, input)
    }));
    for (name, protocol, v6) in SOCKET_FILES {
        present += usize::from(read_sockets(src, name, protocol, v6, &mut input));
    }
    read_owners(src, &mut input);
    present += read_sysctls(src, &mut input);
    present += usize::from(read_healthz(src, &mut input));
    present += usize::from(read_proxy_mode(src, &mut input));
    present += read_ipvs_traces(src, &mut input);
    present += usize::from(read_cluster(src, &mut input)?);
    input.sources.extend(src.own_statuses());
    if present == 0 {
        return Err(SnapshotError::Empty(PathBuf::new()));
    }
    Ok(input)
}

/// Names the processes behind the listeners, where the source can (the live node).
fn read_owners<S: Source>(src: &S, input: &mut ScanInput) {
    let inodes: std::collections::HashSet<u64> = input.observed.listeners.iter().map(|l| l.inode).collect();
    if inodes.is_empty() {
        return;
    }
    let Some(owners) = src.owners(&inodes) else {
        return;
    };
    let mut status = SourceStatus::new("socket owners", SourceState::Ok);
    status.items = Some(owners.by_inode.len());
    if owners.by_inode.len() < inodes.len() && !owners.notes.is_empty() {
        status.status = SourceState::Partial;
    }
    status.notes = owners.notes;
    input.sources.push(status);
    input.observed.owners = owners.by_inode;
}

pub(crate) fn read_small(r: &mut dyn BufRead) -> io::Result<String> {
    let mut bytes = Vec::new();
    r.take(SMALL_FILE).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn read_all(r: &mut dyn BufRead) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    r.read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn read_node_name<S: Source>(src: &mut S) -> Option<String> {
    let text = src.fetch("node", read_small).value?.ok()?;
    let name = text.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// A fetch, settled into the status to report and the content to use.
struct Settled<T> {
    status: SourceStatus,
    value: Option<T>,
    /// The content is complete as far as the source knows (not cut by a failure, a
    /// deadline or the size limit).
    trusted: bool,
}

/// Turns a fetch into a status. None: not present, not reported.
fn settle<T, S: Source>(src: &S, name: &str, fetched: Fetched<T>) -> Option<Settled<T>> {
    let state = fetched.state?;
    let mut status = SourceStatus::new(name, state);
    let label = src.label(name);
    if label != name {
        status.origin = Some(label);
    }
    status.notes = fetched.notes;
    let mut value = None;
    match fetched.value {
        Some(Ok(v)) => value = Some(v),
        // The size limit cut the stream: that is already the state.
        Some(Err(_)) if state == SourceState::TooLarge => {}
        Some(Err(e)) => {
            status.status = SourceState::Error;
            status.notes.push(format!("reading it failed: {e}"));
        }
        None => {}
    }
    // What a tool printed before the size limit stopped it is not used: a dump cut at
    // an arbitrary byte says little, and the live scan cannot parse it either.
    if state == SourceState::TooLarge {
        value = None;
    }
    Some(Settled {
        trusted: matches!(state, SourceState::Ok | SourceState::Empty | SourceState::Partial),
        status,
        value,
    })
}

/// Reads one iptables dump. Returns whether the source said anything about it.
fn read_iptables<S: Source>(
    src: &mut S,
    name: &str,
    backend: Option<Backend>,
    family: Family,
    input: &mut ScanInput,
) -> bool {
    let fallback = match src.iptables_direct(name) {
        None => None,
        Some(Ok(direct)) => return read_iptables_direct(name, backend, family, direct, input),
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
    input: &mut ScanInput,
) -> bool {
    let mut status = SourceStatus::new(name, direct.state.unwrap_or(SourceState::Ok));
    status.origin = Some(crate::sources::live::iptables_netlink_label(family).to_string());
    status.backend = backend;
    status.family = Some(family);
    status.notes = direct.notes;
    match direct.value {
        Some(Ok(Some(parsed))) => push_rule_source(input, parsed, status),
        _ => input.sources.push(status),
    }
    true
}

/// Reads one iptables dump's text.
fn read_iptables_dump<S: Source>(
    src: &mut S,
    name: &str,
    backend: Option<Backend>,
    family: Family,
    input: &mut ScanInput,
) -> bool {
    let origin = src.label(name);
    let hint = SourceHint {
        backend,
        family: Some(family),
    };
    let fetched = src.fetch(name, move |r| {
        let mut counting = crate::sources::bundle::Counting { inner: r, count: 0 };
        let parsed = iptables::parse_save(&mut counting, &origin, hint)?;
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
            push_rule_source(input, parsed, status);
        }
    }
    true
}

fn push_rule_source(input: &mut ScanInput, source: RuleSource, mut status: SourceStatus) {
    if !source.complete && status.status == SourceState::Ok {
        status.status = SourceState::Partial;
    }
    status.backend = Some(source.backend);
    status.family = Some(source.family);
    status.items = Some(source.nodeports.len());
    status.unparsed = source.unparsed.len();
    status.notes.extend(source.notes.iter().cloned());
    if !source.has_kube_proxy {
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
pub fn read_nftables_only<S: Source>(src: &mut S) -> ScanInput {
    let mut input = ScanInput::default();
    read_nftables(src, &mut input);
    input
}

/// Reads kube-proxy's nftables tables the source's own way when it has one (the live
/// node: netlink), else from `nft.json`, or `nft.txt` when there is no JSON.
fn read_nftables<S: Source>(src: &mut S, input: &mut ScanInput) -> bool {
    let fallback = match src.nftables_direct() {
        None => None,
        Some(Ok(direct)) => return read_nftables_direct(direct, input),
        Some(Err(why)) => Some(format!(
            "reading over netlink failed ({why}); read with nft -j instead"
        )),
    };
    noting_fallback(input, fallback, |input| read_nftables_dump(src, input))
}

/// The tables as a source read them itself.
fn read_nftables_direct(direct: Fetched<Vec<RuleSource>>, input: &mut ScanInput) -> bool {
    let mut status = SourceStatus::new("nft.json", direct.state.unwrap_or(SourceState::Ok));
    status.origin = Some(crate::sources::live::NFT_NETLINK_LABEL.to_string());
    status.backend = Some(Backend::Nftables);
    status.notes = direct.notes;
    match direct.value {
        Some(Ok(sources)) if !sources.is_empty() => {
            for source in sources {
                push_rule_source(input, source, status.clone());
            }
        }
        _ => input.sources.push(status),
    }
    true
}

/// Reads `nft.json`, or `nft.txt` when there is no JSON.
fn read_nftables_dump<S: Source>(src: &mut S, input: &mut ScanInput) -> bool {
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
        match std::str::from_utf8(&bytes) {
            Ok(text) => nftables::parse_ruleset_text(text, &origin),
            Err(e) => {
                status.status = SourceState::Error;
                status.notes.push(format!("not text: {e}"));
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
                push_rule_source(input, s, status.clone());
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

/// Reads one socket table.
fn read_sockets<S: Source>(
    src: &mut S,
    name: &str,
    protocol: Protocol,
    v6: bool,
    input: &mut ScanInput,
) -> bool {
    let origin = src.label(name);
    let fetched = src.fetch(name, read_all);
    let Some(settled) = settle(src, name, fetched) else {
        return false;
    };
    let mut status = settled.status;
    if let Some(bytes) = settled.value {
        let (listeners, unparsed) = sockets::parse_proc_net(&bytes, protocol, v6, &origin);
        if !unparsed.is_empty() && status.status == SourceState::Ok {
            status.status = SourceState::Partial;
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

/// Reads the local port sysctls. Returns how many of the two files the source knew.
fn read_sysctls<S: Source>(src: &mut S, input: &mut ScanInput) -> usize {
    let mut present = 0;
    let mut sysctls = NodeSysctls::default();
    let mut read_any = false;

    let fetched = src.fetch(LOCAL_PORT_RANGE_FILE, read_small);
    if let Some(settled) = settle(src, LOCAL_PORT_RANGE_FILE, fetched) {
        present += 1;
        let mut status = settled.status;
        if let Some(text) = settled.value {
            read_any = true;
            match node::parse_local_port_range(&text) {
                Ok(range) => {
                    status.notes.push(format!("{}-{}", range.start(), range.end()));
                    sysctls.local_port_range = Some(range);
                }
                Err(e) => {
                    status.status = SourceState::Error;
                    status.notes.push(e.to_string());
                }
            }
        }
        input.sources.push(status);
    }

    let fetched = src.fetch(RESERVED_PORTS_FILE, read_small);
    if let Some(settled) = settle(src, RESERVED_PORTS_FILE, fetched) {
        present += 1;
        let mut status = settled.status;
        if let Some(text) = settled.value {
            read_any = true;
            let (ranges, errors) = node::parse_reserved_ports(&text);
            if status.status == SourceState::Empty || (ranges.is_empty() && errors.is_empty()) {
                // An empty sysctl is a fine answer: nothing is reserved.
                status.status = SourceState::Ok;
                status.notes.push("none reserved".into());
            }
            if !errors.is_empty() {
                status.status = SourceState::Partial;
                status.unparsed = errors.len();
                status.notes.extend(errors.iter().take(5).map(|e| e.to_string()));
            }
            if !ranges.is_empty() {
                status.notes.push(
                    ranges
                        .iter()
                        .map(|r| {
                            if r.start() == r.end() {
                                r.start().to_string()
                            } else {
                                format!("{}-{}", r.start(), r.end())
                            }
                        })
                        .collect::<Vec<_>>()
                        .join(","),
                );
            }
            sysctls.reserved_ports = ranges;
        }
        input.sources.push(status);
    }
    if read_any {
        input.observed.sysctls = Some(sysctls);
    }
    present
}

/// Reads kube-proxy's health answer.
fn read_healthz<S: Source>(src: &mut S, input: &mut ScanInput) -> bool {
    let fetched = src.fetch(HEALTHZ_FILE, read_small);
    let Some(settled) = settle(src, HEALTHZ_FILE, fetched) else {
        return false;
    };
    let mut status = settled.status;
    if let Some(body) = settled.value
        && matches!(
            status.status,
            SourceState::Ok | SourceState::Failed | SourceState::Empty
        )
    {
        let healthy = status.status != SourceState::Failed;
        match KubeProxyHealth::from_body(healthy, body.as_bytes()) {
            Ok(health) => {
                status.notes.extend(health.describe());
                input.observed.kube_proxy_health = Some(health);
            }
            Err(e) => {
                status.status = SourceState::Error;
                status.notes.push(format!("garbled answer: {e}"));
            }
        }
    }
    input.sources.push(status);
    true
}

/// Reads kube-proxy's `/proxyMode` answer.
fn read_proxy_mode<S: Source>(src: &mut S, input: &mut ScanInput) -> bool {
    let fetched = src.fetch(PROXY_MODE_FILE, read_small);
    let Some(settled) = settle(src, PROXY_MODE_FILE, fetched) else {
        return false;
    };
    let mut status = settled.status;
    if let Some(body) = settled.value
        && status.status == SourceState::Ok
    {
        let answer = body.trim();
        if crate::heart::proxy_mode::parse_reported(answer).is_some() {
            status.notes.push(format!("kube-proxy runs in {answer} mode"));
            input.observed.kube_proxy_mode = Some(answer.to_string());
        } else {
            status.status = SourceState::Error;
            status.notes.push(format!(
                "not a proxy mode this reads: {:?}",
                answer.chars().take(40).collect::<String>()
            ));
        }
    }
    input.sources.push(status);
    true
}

/// Reads IPVS mode's traces outside netfilter: `kube-ipvs0` among the interfaces, and
/// the kernel's IPVS virtual servers. Returns how many of the two files the source knew.
fn read_ipvs_traces<S: Source>(src: &mut S, input: &mut ScanInput) -> usize {
    let mut present = 0;
    let mut traces = crate::heart::observed::IpvsTraces::default();
    let mut read_any = false;
    let fetched = src.fetch(NET_DEV_FILE, |r| {
        let mut found = false;
        for line in r.lines() {
            found |= node::net_dev_has(&line?, node::IPVS_INTERFACE);
        }
        Ok(found)
    });
    if let Some(settled) = settle(src, NET_DEV_FILE, fetched) {
        present += 1;
        let mut status = settled.status;
        if let Some(found) = settled.value {
            read_any = true;
            traces.interface = found;
            if found {
                status.notes.push(format!("{} present", node::IPVS_INTERFACE));
            }
        }
        input.sources.push(status);
    }
    // A node without the ip_vs module has no such file: that is no news.
    let fetched = src.fetch(IP_VS_FILE, |r| {
        let mut count = 0;
        for line in r.lines() {
            count += node::count_ip_vs_services(&line?);
        }
        Ok(count)
    });
    if let Some(settled) = settle(src, IP_VS_FILE, fetched).filter(|s| s.status.status != SourceState::Absent)
    {
        present += 1;
        let mut status = settled.status;
        if let Some(count) = settled.value {
            read_any = true;
            traces.virtual_servers = Some(count);
            status.items = Some(count);
        }
        input.sources.push(status);
    }
    if read_any {
        input.observed.ipvs = Some(traces);
    }
    present
}

/// Reads the cluster state. Unreadable cluster state fails the scan: without it the
/// findings would silently lose every check that needs it.
fn read_cluster<S: Source>(src: &mut S, input: &mut ScanInput) -> Result<bool, SnapshotError> {
    let node = input.node.clone();
    let label = src.label("cluster.json");
    let fetched = src.fetch("cluster.json", move |r| {
        Ok(cluster::read_cluster_state(r, node.as_deref()))
    });
    let cluster_error = |source| SnapshotError::ClusterState {
        path: PathBuf::from(&label),
        source,
    };
    let state = fetched.state;
    let desired = match (state, fetched.value) {
        (None, _) => {
            let mut status = SourceStatus::new("cluster.json", SourceState::Absent);
            status.notes.push(
                "no cluster state: no cluster.json in the bundle and no --cluster-state; only checks that need none ran"
                    .into(),
            );
            input.sources.push(status);
            return Ok(false);
        }
        (_, Some(Ok(Ok(d)))) => d,
        (_, Some(Ok(Err(e)))) => return Err(cluster_error(e)),
        (_, Some(Err(e))) => return Err(cluster_error(cluster::ClusterFileError::Io(e))),
        (Some(s), None) => {
            return Err(cluster_error(cluster::ClusterFileError::Io(io::Error::other(
                format!("it was not captured ({s}): {}", fetched.notes.join("; ")),
            ))));
        }
    };
    let mut status = SourceStatus::new("cluster.json", SourceState::Ok);
    let label = src.label("cluster.json");
    if label != "cluster.json" {
        status.origin = Some(label);
    }
    status.describe_cluster_state(&desired);
    input.desired = Some(desired);
    input.sources.push(status);
    Ok(true)
}

#[cfg(test)]
mod tests;
