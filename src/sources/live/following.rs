//! What the live node keeps between reads when it follows the kernel's change
//! notifications (the agent), and how it says which way each read went.

use crate::heart::model::Family;
use crate::sources::live::{NFT_NETLINK_LABEL, iptables_netlink_label};
use crate::sources::netlink::follow::ReadKind;
use crate::sources::netlink::kept::KeptFamily;
use crate::sources::netlink::nftables::KeptNft;
use crate::sources::rule_changes::ChangeJournal;
use crate::sources::source::Fetched;

/// What a reader that follows the notifications keeps: iptables-nft's tables per family
/// (IPv4, IPv6), then kube-proxy's nftables tables (both families in one read).
#[derive(Debug)]
pub(super) struct Following {
    pub(super) journal: ChangeJournal,
    pub(super) kept: [Option<KeptFamily>; 2],
    pub(super) nft: Option<KeptNft>,
    /// The next read of each is whole (the periodic safety net).
    pub(super) whole_next: [bool; 3],
    /// Why the last read of each was whole, if it was, for logging changes only.
    pub(super) last_whole: [Option<String>; 3],
}

/// A clone keeps no nftables tables (their IR is not cloned): its next read of them is
/// whole.
impl Clone for Following {
    fn clone(&self) -> Self {
        Following {
            journal: self.journal.clone(),
            kept: self.kept.clone(),
            nft: None,
            whole_next: self.whole_next,
            last_whole: self.last_whole.clone(),
        }
    }
}

/// Where [`Following`] keeps the state of kube-proxy's nftables tables' reads.
pub(super) const NFT_AT: usize = 2;

impl Following {
    /// Notes how the read at `at` read its tables, and logs when that changes.
    pub(super) fn note(&mut self, at: usize, fetched: &mut Fetched<impl Sized>, kind: ReadKind) {
        fetched.notes.push(match &kind {
            ReadKind::Changed { chains, of } => format!(
                "read again only where the kernel announced changes: {chains} of {of} chains; the rest as last read"
            ),
            ReadKind::Whole(why) => format!("read whole: {why}"),
        });
        let why = match kind {
            ReadKind::Whole(why) => Some(why),
            ReadKind::Changed { .. } => None,
        };
        if why != self.last_whole[at] {
            let (label, tables) = match at {
                NFT_AT => (NFT_NETLINK_LABEL, "kube-proxy's nftables tables"),
                0 => (iptables_netlink_label(Family::Ipv4), "iptables-nft's tables"),
                _ => (iptables_netlink_label(Family::Ipv6), "iptables-nft's tables"),
            };
            match &why {
                Some(why) => tracing::info!(table = label, %why, "reading {tables} whole"),
                None => tracing::info!(
                    table = label,
                    "reading {tables} again only where the kernel announced changes"
                ),
            }
            self.last_whole[at] = why;
        }
    }
}
