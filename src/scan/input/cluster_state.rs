//! Reading the cluster state (`cluster.json`, or what stands in for it).

use std::io;
use std::path::PathBuf;

use crate::decode::cluster;
use crate::heart::input::Input;
use crate::heart::outcome::{InputState, InputStatus, ScanInput};
use crate::scan::bundle_error::SnapshotError;
use crate::sources::source::Source;

/// Reads the cluster state. Unreadable cluster state fails the scan: without it the
/// findings would silently lose every check that needs it.
pub(super) fn read_cluster<S: Source>(src: &S, input: &mut ScanInput) -> Result<bool, SnapshotError> {
    let node = input.node.clone();
    let label = src.label(Input::ClusterState);
    let fetched = src.fetch_bytes(Input::ClusterState, move |r| {
        Ok(cluster::read_cluster_state(r, node.as_deref()))
    });
    let cluster_error = |source| SnapshotError::ClusterState {
        path: PathBuf::from(&label),
        source,
    };
    let state = fetched.state;
    let desired = match (state, fetched.value) {
        (None, _) => {
            let mut status = InputStatus::new(Input::ClusterState, InputState::Absent);
            status.notes.push(format!(
                "no cluster state: no {} in the bundle and no --cluster-state; only checks that need none ran",
                Input::ClusterState
            ));
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
    let mut status = InputStatus::new(Input::ClusterState, InputState::Ok);
    let label = src.label(Input::ClusterState);
    if label != Input::ClusterState.name() {
        status.origin = Some(label);
    }
    status.describe_cluster_state(&desired);
    input.desired = Some(desired);
    input.sources.push(status);
    Ok(true)
}
