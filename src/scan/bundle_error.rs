//! Why a bundle could not be scanned or written at all: the error of reading any
//! [`crate::sources::source::Source`] into a scan input and of capturing one.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::decode::cluster;

/// Why a bundle could not be scanned or written at all.
#[derive(Debug, Error)]
pub enum SnapshotError {
    #[error("{0} is not a directory: a bundle is a directory of captured files")]
    NotADirectory(PathBuf),
    #[error("{0} does not exist: give the directory a snapshot was written to")]
    NotFound(PathBuf),
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
