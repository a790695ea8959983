//! Where the agent's desired state comes from: the API server's watches (the
//! [`ClusterView`]), or a cluster state file (`run --cluster-state`: demos, trials and
//! air-gapped nodes), read again when it changes. The scan loop, `/explain` and the
//! readiness gate ask either the same questions.

mod file;

use std::path::PathBuf;

use tokio::sync::watch;

use crate::agent::watch::{ClusterView, ViewStatus};
use crate::heart::desired::DesiredState;
use crate::heart::input::Input;

pub use file::{ClusterFile, FileViewError};

/// The agent's desired state: watched, or read from a file.
#[derive(Debug, Clone)]
pub enum DesiredView {
    Api(ClusterView),
    File(ClusterFile),
}

impl DesiredView {
    /// A counter that moves whenever the desired state may have changed.
    pub fn changes(&self) -> watch::Receiver<u64> {
        match self {
            DesiredView::Api(view) => view.changes(),
            DesiredView::File(file) => file.changes(),
        }
    }

    /// A desired state is known (the API's initial lists are complete; the file was
    /// read once).
    pub fn synced(&self) -> bool {
        match self {
            DesiredView::Api(view) => view.synced(),
            DesiredView::File(file) => file.synced(),
        }
    }

    /// The desired state is current: the watches are fresh; the file's last read
    /// parsed (a file that turned bad keeps its last good state, not current).
    pub fn fresh(&self) -> bool {
        match self {
            DesiredView::Api(view) => view.fresh(),
            DesiredView::File(file) => file.fresh(),
        }
    }

    /// The desired state now, or why there is none yet.
    pub fn desired_state(&self) -> Result<DesiredState, String> {
        match self {
            DesiredView::Api(view) => view.desired_state().map_err(|e| e.to_string()),
            DesiredView::File(file) => file.desired_state(),
        }
    }

    /// The watches' state (None for a file: there are no watches).
    pub fn watch_status(&self) -> Option<ViewStatus> {
        match self {
            DesiredView::Api(view) => Some(view.status()),
            DesiredView::File(_) => None,
        }
    }

    /// The report's name for this source, and where it was read (a file's path).
    pub fn source(&self) -> (Input, Option<PathBuf>) {
        match self {
            DesiredView::Api(_) => (Input::Api, None),
            DesiredView::File(file) => (Input::ClusterState, Some(file.path().to_path_buf())),
        }
    }

    /// The note a scan on a state that is not current carries.
    pub fn stale_note(&self) -> &'static str {
        match self {
            DesiredView::Api(_) => "the API watch is not current: findings are marked on_stale_cluster_state",
            DesiredView::File(_) => {
                "the cluster state file's last read failed: its last good contents are used, and findings are marked on_stale_cluster_state"
            }
        }
    }
}
