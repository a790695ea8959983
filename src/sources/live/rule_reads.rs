//! The live node's rule dumps read over netlink: kube-proxy's nftables tables and
//! iptables-nft's, whole or, when it follows the kernel's change notifications, again
//! only where they changed.

use std::time::Instant;

use super::following::{Following, NFT_AT};
use super::{IptablesVia, LiveNode, NFT_NETLINK_LABEL, NftablesVia, iptables_netlink_label, lock};
use crate::heart::input::{Input, IptablesBackend};
use crate::heart::model::{Family, RuleDump};
use crate::heart::outcome::InputState;
use crate::sources::netlink::follow::ReadKind;
use crate::sources::netlink::iptables::{read_rules_following, read_rules_netlink};
use crate::sources::netlink::nftables::{
    ConstantMaps, read_tables_following, read_tables_netlink, read_tables_netlink_keeping,
};
use crate::sources::netlink::{NetlinkError, NetlinkLimits};
use crate::sources::source::{Fetched, Rules};

impl LiveNode {
    /// `input`'s rules read over netlink, when it is a dump this node reads that way:
    /// Err(why) when that way failed.
    pub(super) fn read_rules(&self, input: Input) -> Option<Result<Fetched<Rules>, String>> {
        match input {
            Input::NftJson if self.config.nftables_via == NftablesVia::Netlink => {
                let read = self.nftables_netlink().map(|fetched| {
                    fetched.map(|dumps| Rules {
                        origin: NFT_NETLINK_LABEL.to_string(),
                        dumps,
                    })
                });
                Some(read)
            }
            Input::Iptables {
                backend: Some(IptablesBackend::Nft),
                family,
            } if self.config.iptables_via == IptablesVia::Netlink => {
                let read = self.iptables_netlink(family).map(|fetched| {
                    fetched.map(|dump| Rules {
                        origin: iptables_netlink_label(family).to_string(),
                        dumps: dump.into_iter().collect(),
                    })
                });
                Some(read)
            }
            _ => None,
        }
    }

    /// kube-proxy's nftables tables over netlink.
    fn nftables_netlink(&self) -> Result<Fetched<Vec<RuleDump>>, String> {
        let mut maps = lock(&self.constant_maps);
        let mut following = lock(&self.following);
        match following.as_mut() {
            Some(following) => {
                let mut scratch = ConstantMaps::default();
                self.read_following(
                    following,
                    NFT_AT,
                    |limits, f, whole| {
                        read_tables_following(
                            NFT_NETLINK_LABEL,
                            limits,
                            &f.journal,
                            &mut f.nft,
                            maps.as_mut().unwrap_or(&mut scratch),
                            whole,
                        )
                    },
                    |sources| !sources.is_empty(),
                )
            }
            None => self.read_netlink(
                |limits| match maps.as_mut() {
                    Some(maps) => read_tables_netlink_keeping(NFT_NETLINK_LABEL, limits, maps),
                    None => read_tables_netlink(NFT_NETLINK_LABEL, limits),
                },
                |sources| !sources.is_empty(),
            ),
        }
    }

    /// iptables-nft's tables of `family` over netlink: None in the value when the
    /// family has no iptables-nft table.
    fn iptables_netlink(&self, family: Family) -> Result<Fetched<Option<RuleDump>>, String> {
        let label = iptables_netlink_label(family);
        let mut following = lock(&self.following);
        let Some(following) = following.as_mut() else {
            return self.read_netlink(
                |limits| read_rules_netlink(family, label, limits),
                Option::is_some,
            );
        };
        let at = usize::from(family == Family::Ipv6);
        self.read_following(
            following,
            at,
            |limits, f, whole| {
                read_rules_following(family, label, limits, &f.journal, &mut f.kept[at], whole)
            },
            Option::is_some,
        )
    }

    /// One read over netlink, within the tool limits, as a fetch (`present`: whether
    /// it found anything); Err(why) when it failed and the caller falls back.
    fn read_netlink<T>(
        &self,
        read: impl FnOnce(NetlinkLimits) -> Result<(T, u64), NetlinkError>,
        present: impl FnOnce(&T) -> bool,
    ) -> Result<Fetched<T>, String> {
        let start = Instant::now();
        let limits = NetlinkLimits {
            timeout: self.config.limits.timeout,
            max_bytes: self.config.limits.max_output,
        };
        let (value, bytes) = read(limits).map_err(|e| e.to_string())?;
        Ok(Fetched {
            state: Some(if present(&value) {
                InputState::Ok
            } else {
                InputState::Empty
            }),
            value: Some(Ok(value)),
            notes: vec!["read from the kernel over netlink".to_string()],
            bytes: Some(bytes),
            elapsed: Some(start.elapsed()),
        })
    }

    /// [`Self::read_netlink`] of a reader that follows the notifications: the read at
    /// `at` of [`Following`], noted and logged as it read.
    fn read_following<T>(
        &self,
        following: &mut Following,
        at: usize,
        read: impl FnOnce(NetlinkLimits, &mut Following, &mut bool) -> Result<(T, u64, ReadKind), NetlinkError>,
        present: impl FnOnce(&T) -> bool,
    ) -> Result<Fetched<T>, String> {
        // Cleared by a whole read that completes; churn can keep one from completing.
        let mut whole = following.whole_next[at];
        let mut kind = None;
        let mut fetched = self.read_netlink(
            |limits| {
                let (value, bytes, how) = read(limits, &mut *following, &mut whole)?;
                kind = Some(how);
                Ok((value, bytes))
            },
            present,
        );
        following.whole_next[at] = whole;
        if let (Ok(fetched), Some(kind)) = (&mut fetched, kind) {
            following.note(at, fetched, kind);
        }
        fetched
    }
}
