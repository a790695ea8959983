//! `run --cluster-state FILE`: the desired state from a file in the form `scan
//! --cluster-state` reads, read again when its contents change (a mounted ConfigMap is
//! replaced, not edited in place, so the contents are compared, not the mtime).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::decode::cluster::read_cluster_state;
use crate::heart::desired::DesiredState;

/// How often the file is read again.
const REREAD_EVERY: Duration = Duration::from_secs(2);

/// Why the agent could not start on the file.
#[derive(Debug, thiserror::Error)]
#[error("cannot use the cluster state {}: {why}", path.display())]
pub struct FileViewError {
    path: PathBuf,
    why: String,
}

/// The file's last good desired state, kept current by a task that runs until the
/// last handle is dropped.
#[derive(Clone)]
pub struct ClusterFile {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    node: Option<String>,
    state: Mutex<FileState>,
    changes: watch::Sender<u64>,
    /// Re-reads the file; holds only a weak handle, and is stopped with the last strong one.
    task: JoinHandle<()>,
}

#[derive(Default)]
struct FileState {
    /// The bytes last read, good or bad.
    seen: Vec<u8>,
    /// The last contents that parsed.
    good: Option<DesiredState>,
    /// Why the last read could not be used.
    problem: Option<String>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for ClusterFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterFile")
            .field("path", &self.inner.path)
            .field("fresh", &self.fresh())
            .finish()
    }
}

impl ClusterFile {
    /// Reads `path` for `node` and starts re-reading it. Fails when the first read
    /// gives no desired state: an agent that could never say anything should not start
    /// quietly. Must be called inside a Tokio runtime.
    pub fn start(path: &Path, node: Option<&str>) -> Result<ClusterFile, FileViewError> {
        let inner = Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| {
            let weak = weak.clone();
            // The first tick is a whole interval away: the first read below is not raced.
            let task = tokio::spawn(async move {
                let mut tick = tokio::time::interval(REREAD_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let Some(inner) = weak.upgrade() else { return };
                    // Parsing a large file is blocking work.
                    let _ = tokio::task::spawn_blocking(move || {
                        inner.reread();
                    })
                    .await;
                }
            });
            Inner {
                path: path.to_path_buf(),
                node: node.map(str::to_string),
                state: Mutex::new(FileState::default()),
                changes: watch::Sender::new(0),
                task,
            }
        });
        // On an error the view is dropped here, and its task with it.
        if let Some(why) = inner.reread() {
            return Err(FileViewError {
                path: path.to_path_buf(),
                why,
            });
        }
        Ok(ClusterFile { inner })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    pub fn synced(&self) -> bool {
        self.inner.state.lock().is_ok_and(|s| s.good.is_some())
    }

    pub fn fresh(&self) -> bool {
        self.inner
            .state
            .lock()
            .is_ok_and(|s| s.good.is_some() && s.problem.is_none())
    }

    pub fn desired_state(&self) -> Result<DesiredState, String> {
        let state = self
            .inner
            .state
            .lock()
            .map_err(|_| "the cluster state is unavailable".to_string())?;
        match (&state.good, &state.problem) {
            (Some(good), _) => Ok(good.clone()),
            (None, Some(why)) => Err(why.clone()),
            (None, None) => Err("the cluster state file has not been read yet".to_string()),
        }
    }
}

impl Inner {
    /// Reads the file; when its contents changed, parses them and tells the
    /// subscribers. Returns why the file cannot be used now (None: it can).
    fn reread(&self) -> Option<String> {
        let read = std::fs::read(&self.path);
        let Ok(mut state) = self.state.lock() else {
            return Some("the cluster state is unavailable".to_string());
        };
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(e) => {
                let why = format!("cannot be read: {e}");
                if state.problem.as_ref() != Some(&why) {
                    tracing::warn!(path = %self.path.display(), %why, "the cluster state file cannot be used; its last good contents still apply");
                    state.problem = Some(why.clone());
                    state.seen.clear();
                    self.changes.send_modify(|n| *n = n.wrapping_add(1));
                }
                return Some(why);
            }
        };
        if bytes == state.seen && (state.good.is_some() || state.problem.is_some()) {
            return state.problem.clone();
        }
        let parsed = read_cluster_state(bytes.as_slice(), self.node.as_deref());
        state.seen = bytes;
        match parsed {
            Ok(desired) => {
                tracing::info!(
                    path = %self.path.display(),
                    service_ports = desired.ports.len(),
                    "cluster state read"
                );
                state.good = Some(desired);
                state.problem = None;
            }
            Err(e) => {
                let why = format!("is not a cluster state: {e}");
                tracing::warn!(path = %self.path.display(), %why, "the cluster state file cannot be used; its last good contents still apply");
                state.problem = Some(why);
            }
        }
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
        state.problem.clone()
    }
}

#[cfg(test)]
mod tests;
