//! Snapshot bundles: a directory of files captured from a node and from `kubectl`.
//!
//! Layout (every file optional; see the README):
//! `iptables-nft-save.txt`, `iptables-legacy-save.txt`, `ip6tables-nft-save.txt`,
//! `ip6tables-legacy-save.txt` (or one `iptables-save.txt` / `ip6tables-save.txt`),
//! `nft.json` (`nft -j list ruleset`) or `nft.txt` (`nft list ruleset`),
//! `proc/net/{tcp,tcp6,udp,udp6}`, `cluster.json`, `node`.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::desired::{self, DesiredState};
use crate::model::{Backend, Family, Protocol, RuleSource};
use crate::observed::iptables::{self, SourceHint};
use crate::observed::{nftables, sockets};
use crate::scan::{ScanInput, SourceState, SourceStatus};

/// Why a bundle could not be scanned at all.
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
        source: desired::ClusterFileError,
    },
}

/// The iptables dumps a bundle may hold, with what their names say.
const IPTABLES_FILES: [(&str, Option<Backend>, Family); 6] = [
    ("iptables-nft-save.txt", Some(Backend::IptablesNft), Family::Ipv4),
    (
        "iptables-legacy-save.txt",
        Some(Backend::IptablesLegacy),
        Family::Ipv4,
    ),
    ("ip6tables-nft-save.txt", Some(Backend::IptablesNft), Family::Ipv6),
    (
        "ip6tables-legacy-save.txt",
        Some(Backend::IptablesLegacy),
        Family::Ipv6,
    ),
    // A dump whose backend only its header tells.
    ("iptables-save.txt", None, Family::Ipv4),
    ("ip6tables-save.txt", None, Family::Ipv6),
];

const SOCKET_FILES: [(&str, Protocol, bool); 4] = [
    ("proc/net/tcp", Protocol::Tcp, false),
    ("proc/net/tcp6", Protocol::Tcp, true),
    ("proc/net/udp", Protocol::Udp, false),
    ("proc/net/udp6", Protocol::Udp, true),
];

/// Reads a bundle. `node` overrides the bundle's `node` file.
pub fn read_bundle(dir: &Path, node: Option<&str>) -> Result<ScanInput, SnapshotError> {
    if !dir.is_dir() {
        return Err(SnapshotError::NotADirectory(dir.to_path_buf()));
    }
    let mut input = ScanInput {
        node: node
            .map(str::to_string)
            .or_else(|| read_node_name(&dir.join("node"))),
        ..Default::default()
    };
    let mut present = 0;
    for (name, backend, family) in IPTABLES_FILES {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        present += 1;
        let hint = SourceHint {
            backend,
            family: Some(family),
        };
        match File::open(&path).and_then(|f| iptables::parse_save(BufReader::new(f), name, hint)) {
            Ok(source) => push_rule_source(&mut input, source),
            Err(e) => input.sources.push(error_status(name, &e)),
        }
    }
    present += read_nftables(dir, &mut input);
    present += read_sockets(dir, &mut input);
    let cluster = dir.join("cluster.json");
    if cluster.exists() {
        present += 1;
        input.desired = Some(read_cluster(&cluster, input.node.as_deref())?);
        let d = input.desired.as_ref().expect("just set");
        let mut status = SourceStatus::new("cluster.json", SourceState::Ok);
        status.items = Some(d.ports.len());
        status.unparsed = d.problems.len();
        if !d.problems.is_empty() {
            status.status = SourceState::Partial;
        }
        status.notes = d
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.object, p.problem))
            .collect();
        input.sources.push(status);
    } else {
        let mut status = SourceStatus::new("cluster.json", SourceState::Absent);
        status
            .notes
            .push("no cluster state: only checks that need none ran".into());
        input.sources.push(status);
    }
    if present == 0 {
        return Err(SnapshotError::Empty(dir.to_path_buf()));
    }
    Ok(input)
}

fn read_node_name(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let name = text.trim();
    (!name.is_empty()).then(|| name.to_string())
}

fn read_cluster(path: &Path, node: Option<&str>) -> Result<DesiredState, SnapshotError> {
    let cluster_error = |source| SnapshotError::ClusterState {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(|e| cluster_error(desired::ClusterFileError::Io(e)))?;
    desired::read_cluster_state(BufReader::new(file), node).map_err(cluster_error)
}

fn push_rule_source(input: &mut ScanInput, source: RuleSource) {
    let mut status = SourceStatus::new(
        source.origin.clone(),
        if source.complete {
            SourceState::Ok
        } else {
            SourceState::Partial
        },
    );
    status.backend = Some(source.backend);
    status.family = Some(source.family);
    status.items = Some(source.nodeports.len());
    status.unparsed = source.unparsed.len();
    status.notes = source.notes.clone();
    if !source.has_kube_proxy {
        status.notes.push("no kube-proxy chains".into());
    }
    input.sources.push(status);
    input.observed.sources.push(source);
}

fn error_status(name: &str, e: &dyn std::fmt::Display) -> SourceStatus {
    let mut status = SourceStatus::new(name, SourceState::Error);
    status.notes.push(e.to_string());
    status
}

/// Reads `nft.json`, or `nft.txt` when there is no JSON. Returns how many were present.
fn read_nftables(dir: &Path, input: &mut ScanInput) -> usize {
    let json = dir.join("nft.json");
    let text = dir.join("nft.txt");
    let (name, parsed) = if json.exists() {
        (
            "nft.json",
            std::fs::read(&json).map_err(|e| e.to_string()).and_then(|bytes| {
                nftables::parse_ruleset_json(&bytes, "nft.json").map_err(|e| e.to_string())
            }),
        )
    } else if text.exists() {
        (
            "nft.txt",
            std::fs::read_to_string(&text)
                .map_err(|e| e.to_string())
                .and_then(|t| nftables::parse_ruleset_text(&t, "nft.txt").map_err(|e| e.to_string())),
        )
    } else {
        return 0;
    };
    match parsed {
        Ok(sources) if sources.is_empty() => {
            let mut status = SourceStatus::new(name, SourceState::Ok);
            status.backend = Some(Backend::Nftables);
            status.items = Some(0);
            status.notes.push("no kube-proxy nftables table".into());
            input.sources.push(status);
        }
        Ok(sources) => sources.into_iter().for_each(|s| push_rule_source(input, s)),
        Err(e) => input.sources.push(error_status(name, &e)),
    }
    1
}

/// Reads the socket tables. Returns how many were present.
fn read_sockets(dir: &Path, input: &mut ScanInput) -> usize {
    let mut present = 0;
    for (name, protocol, v6) in SOCKET_FILES {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        present += 1;
        match read_limited(&path) {
            Ok(bytes) => {
                let (listeners, unparsed) = sockets::parse_proc_net(&bytes, protocol, v6, name);
                let mut status = SourceStatus::new(
                    name,
                    if unparsed.is_empty() {
                        SourceState::Ok
                    } else {
                        SourceState::Partial
                    },
                );
                status.items = Some(listeners.len());
                status.unparsed = unparsed.len();
                status.notes = unparsed
                    .iter()
                    .take(5)
                    .map(|u| format!("line {}: {}", u.line, u.reason))
                    .collect();
                input.sources.push(status);
                input.observed.listeners.extend(listeners);
            }
            Err(e) => input.sources.push(error_status(name, &e)),
        }
    }
    present
}

/// /proc/net tables are small; a huge file is not one, so reading stops at 256 MiB.
fn read_limited(path: &Path) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)?.take(256 << 20).read_to_end(&mut bytes)?;
    Ok(bytes)
}
