//! One scan, once (`portdrift scan`): this node as it is now, with its cluster state
//! from a file or the API server, or a bundle captured earlier; and the capture of this
//! node into a bundle (`portdrift snapshot`).

use crate::heart::acceptance::{AcceptanceError, AcceptanceInput, Acceptances};
use crate::heart::input::Input;
use crate::heart::outcome::InputStatus;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

use crate::heart::detect::{DetectConfig, Grace};
use crate::heart::outcome::{InputState, ScanInput, ScanReport, run_scan};
use crate::scan::bundle_error::SnapshotError;
use crate::scan::capture::{SnapshotOptions, write_snapshot};
use crate::scan::cluster_api::{
    ListToFileError, add_api_listing, list_cluster_from_api, list_cluster_to_file,
};
use crate::scan::input::{Manifest, joined, read_bundle_with, read_input};
use crate::sources::kube_client::KubeTarget;
use crate::sources::live::{LiveConfig, LiveNode, host_name};

/// What one scan reads, and how it judges what it read.
#[derive(Debug, Clone)]
pub struct OneshotConfig {
    /// Scan this bundle directory instead of this node.
    pub bundle: Option<PathBuf>,
    /// The cluster state file (with a bundle: in place of its `cluster.json`). Without
    /// one, a live scan lists the cluster state from the API server.
    pub cluster_state: Option<PathBuf>,
    /// The API server's kubeconfig and context (default: KUBECONFIG, ~/.kube/config,
    /// then the in-cluster service account).
    pub api: KubeTarget,
    /// How long listing the cluster state from the API may take.
    pub api_timeout: Duration,
    /// How to read this node; its `cluster_state` is taken from this config's.
    pub live: LiveConfig,
    /// The node whose endpoints count as local (default: the source's own name).
    pub node: Option<String>,
    /// How long kube-proxy may take to apply a change; zero turns the grace off.
    pub grace: Duration,
    /// The cluster's NodePort range.
    pub nodeport_range: RangeInclusive<u16>,
    /// The acceptances file (`--accept`).
    pub acceptances: Option<PathBuf>,
}

/// Why a one-shot command could not run at all (exit status 2).
#[derive(Debug, Error)]
pub enum OneshotError {
    /// The bundle could not be read.
    #[error("cannot scan {}", path.display())]
    Bundle {
        path: PathBuf,
        #[source]
        source: SnapshotError,
    },
    /// Nothing at all could be read from this node, or its cluster state file is unreadable.
    #[error("cannot scan this node")]
    Node(#[source] SnapshotError),
    /// The snapshot's cluster state is not a file.
    #[error("the cluster state {} is not a file", .0.display())]
    ClusterStateNotAFile(PathBuf),
    /// Listing the snapshot's cluster state from the API failed.
    #[error(transparent)]
    ListCluster(#[from] ListToFileError),
    /// The acceptances file cannot be read or used: an exception silently dropped
    /// would turn into a page, one silently widened would hide drift.
    #[error("cannot use the acceptances file {}", path.display())]
    Acceptances {
        path: PathBuf,
        #[source]
        source: AcceptancesFileError,
    },
    /// The bundle could not be written.
    #[error("cannot write a snapshot to {}", path.display())]
    Snapshot {
        path: PathBuf,
        #[source]
        source: SnapshotError,
    },
}

/// This node as a live scan reads it.
#[derive(Debug)]
pub struct LiveInput {
    pub input: ScanInput,
    /// The cluster state was listed from the API (or read from a file) in full.
    pub cluster_listed: bool,
}

/// Scans what `config` names (a bundle, or this node) and returns the report.
pub fn run_oneshot(config: &OneshotConfig) -> Result<ScanReport, OneshotError> {
    let input =
        match &config.bundle {
            Some(dir) => read_bundle_with(dir, config.node.as_deref(), config.cluster_state.clone())
                .map_err(|source| OneshotError::Bundle {
                    path: dir.clone(),
                    source,
                })?,
            None => read_live(config)?.input,
        };
    let mut input = input;
    let mut detect = detect_config(config);
    let mut file = Acceptances::default();
    if let Some(path) = &config.acceptances {
        let accepted = read_acceptances(path).map_err(|source| OneshotError::Acceptances {
            path: path.clone(),
            source,
        })?;
        let mut status = InputStatus::new(Input::Acceptances, InputState::Ok);
        status.origin = Some(path.display().to_string());
        status.items = Some(accepted.accept.len());
        input.sources.push(status);
        file = accepted;
    }
    // The Services' own acceptances apply with or without a file.
    detect.acceptances = Some(AcceptanceInput {
        file,
        now: jiff::Timestamp::now(),
    });
    Ok(run_scan(input, &detect))
}

/// Why an acceptances file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AcceptancesFileError {
    #[error(transparent)]
    Read(#[from] std::io::Error),
    #[error(transparent)]
    Invalid(#[from] AcceptanceError),
}

fn read_acceptances(path: &std::path::Path) -> Result<Acceptances, AcceptancesFileError> {
    Ok(Acceptances::parse(&std::fs::read(path)?)?)
}

/// The detector's settings for a scan made now.
pub fn detect_config(config: &OneshotConfig) -> DetectConfig {
    DetectConfig {
        grace: (!config.grace.is_zero()).then(|| Grace {
            now: jiff::Timestamp::now(),
            window: config.grace,
        }),
        // A one-shot scan lists the cluster state itself: it is current by construction.
        cluster_state_stale: false,
        acceptances: None,
        nodeport_range: config.nodeport_range.clone(),
    }
}

/// Reads this node and its cluster state (from the file, else the API server, listed
/// while the node is read).
pub fn read_live(config: &OneshotConfig) -> Result<LiveInput, OneshotError> {
    let node = LiveNode::new(LiveConfig {
        cluster_state: config.cluster_state.clone(),
        ..config.live.clone()
    });
    let name = config.node.clone().or_else(|| host_name(&config.live.proc_root));
    let input = match &config.cluster_state {
        Some(_) => read_input(&node, name.as_deref()),
        None => std::thread::scope(|s| {
            let listing = s.spawn(|| list_cluster_from_api(&config.api, name.as_deref(), config.api_timeout));
            let input = read_input(&node, name.as_deref());
            let listing = joined(listing);
            input.map(|mut input| {
                add_api_listing(&mut input, listing, &config.api, config.api_timeout);
                input
            })
        }),
    }
    .map_err(OneshotError::Node)?;
    let cluster_listed = input.desired.is_some()
        && input
            .sources
            .iter()
            .any(|s| s.source.is_cluster_state() && s.status == InputState::Ok);
    Ok(LiveInput {
        input,
        cluster_listed,
    })
}

/// What one capture of this node writes, and where.
#[derive(Debug, Clone)]
pub struct NodeSnapshotConfig {
    /// The bundle directory to write.
    pub out: PathBuf,
    /// Replace the bundle files of a non-empty directory.
    pub force: bool,
    /// A cluster state file to copy into the bundle; without one, the cluster state is
    /// listed from the API server when one is configured.
    pub cluster_state: Option<PathBuf>,
    /// The API server's kubeconfig and context (default: as kube finds one).
    pub api: KubeTarget,
    /// How long listing the cluster state from the API may take.
    pub api_timeout: Duration,
    /// The node's name for the bundle's `node` file (default: this host's name).
    pub node: Option<String>,
    /// How to read this node; its `cluster_state` is set by the capture.
    pub live: LiveConfig,
}

/// Captures this node (and its cluster state) into a bundle; returns its manifest.
pub fn snapshot_node(config: &NodeSnapshotConfig) -> Result<Manifest, OneshotError> {
    if let Some(path) = &config.cluster_state
        && !path.is_file()
    {
        return Err(OneshotError::ClusterStateNotAFile(path.clone()));
    }
    // The API's objects go through a file, so the bundle gets them exactly as a
    // --cluster-state file would be copied.
    let listed = match &config.cluster_state {
        Some(_) => None,
        None => list_cluster_to_file(&config.api, config.node.as_deref(), config.api_timeout)?,
    };
    let cluster_state = config
        .cluster_state
        .clone()
        .or_else(|| listed.as_ref().map(|f| f.path().to_path_buf()));
    let node = LiveNode::new(LiveConfig {
        cluster_state,
        ..config.live.clone()
    });
    let options = SnapshotOptions {
        node: config.node.clone(),
        force: config.force,
    };
    write_snapshot(&node, &config.out, &options).map_err(|source| OneshotError::Snapshot {
        path: config.out.clone(),
        source,
    })
}
