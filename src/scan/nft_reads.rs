//! `portdrift dev nft-sources`: kube-proxy's nftables tables read one way, and read
//! again after a change, with how the reader got the tables' constant maps.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use thiserror::Error;

use crate::heart::outcome::ScanInput;
use crate::scan::input::read_nftables_only;
use crate::sources::live::{LiveConfig, LiveNode, NftablesVia};
use crate::sources::netlink::nftables::{ConstantMaps, MapFetches};

/// Why the change between the two reads could not be applied.
#[derive(Debug, Error)]
pub enum NftChangeError {
    #[error(transparent)]
    Run(#[from] io::Error),
    #[error("nft -f {} failed", .0.display())]
    Failed(PathBuf),
}

/// What the reads gave.
#[derive(Debug)]
pub struct NftReads {
    /// The last read.
    pub input: ScanInput,
    /// With a change: how many constant maps the second read reused.
    pub reused: Option<usize>,
    /// How the reader fetched the constant maps.
    pub fetched: MapFetches,
}

/// Reads kube-proxy's nftables tables `via` one way, keeping the constant maps as the
/// agent does; with `change`, applies it with `nft -f` and reads again.
pub fn read_nft_tables(via: NftablesVia, change: Option<&Path>) -> Result<NftReads, NftChangeError> {
    // Keeping the maps changes nothing in one read, and says how it got them.
    let node = LiveNode::new(LiveConfig {
        nftables_via: via,
        ..LiveConfig::default()
    })
    .keeping_constant_maps();
    let mut input = read_nftables_only(&node);
    let mut reused = None;
    if let Some(change) = change {
        let applied = Command::new("nft").arg("-f").arg(change).status()?;
        if !applied.success() {
            return Err(NftChangeError::Failed(change.to_path_buf()));
        }
        input = read_nftables_only(&node);
        reused = Some(node.with_constant_maps(ConstantMaps::reused).unwrap_or(0));
    }
    let fetched = node.with_constant_maps(ConstantMaps::fetched).unwrap_or_default();
    Ok(NftReads {
        input,
        reused,
        fetched,
    })
}
