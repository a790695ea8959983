//! `portdrift dev ...`: developer tools for tests and benchmarks, not a contract.

use std::io::Write;
use std::path::Path;

use super::args::NftablesViaArg;
use crate::scan::input::read_nftables_only;
use crate::sources::live::{LiveConfig, LiveNode};
use crate::sources::tools::{DEFAULT_MAX_OUTPUT, DEFAULT_TOOL_TIMEOUT};

pub(super) fn print_iptables_save(family: &str) -> anyhow::Result<u8> {
    use crate::heart::model::Family;
    let family = if family == "ipv6" {
        Family::Ipv6
    } else {
        Family::Ipv4
    };
    let limits = crate::sources::netlink::NetlinkLimits {
        timeout: DEFAULT_TOOL_TIMEOUT,
        max_bytes: DEFAULT_MAX_OUTPUT,
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut failed = None;
    crate::sources::netlink::iptables::render_save(family, limits, &mut |line| {
        if let Err(e) = writeln!(out, "{line}") {
            failed.get_or_insert(e);
        }
    })?;
    out.flush()?;
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(0),
    }
}

pub(super) fn print_nft_sources(via: NftablesViaArg, reread_after: Option<&Path>) -> anyhow::Result<u8> {
    let mut node = LiveNode::new(LiveConfig {
        nftables_via: via.via(),
        ..LiveConfig::default()
    });
    // Keeping the maps changes nothing in one read, and says how it got them.
    node = node.keeping_constant_maps();
    let mut input = read_nftables_only(&mut node);
    let mut out = std::io::stdout().lock();
    if let Some(change) = reread_after {
        let applied = std::process::Command::new("nft").arg("-f").arg(change).status()?;
        anyhow::ensure!(applied.success(), "nft -f {} failed", change.display());
        input = read_nftables_only(&mut node);
        let reused = node.constant_maps().map_or(0, |m| m.reused());
        writeln!(out, "# reused {reused} constant maps")?;
    }
    for status in &input.sources {
        writeln!(out, "# {} {:?} {:?}", status.source, status.status, status.notes)?;
    }
    if via == NftablesViaArg::Netlink {
        let fetched = node.constant_maps().map(|m| m.fetched()).unwrap_or_default();
        writeln!(
            out,
            "# maps read key by key {}, dumped {}",
            fetched.by_key, fetched.dumped
        )?;
    }
    for mut source in input.observed.sources {
        source.origin.clear();
        writeln!(out, "{source:#?}")?;
    }
    Ok(0)
}
