//! `portdrift dev ...`: developer tools for tests and benchmarks, not a contract.

use std::io::Write;
use std::path::Path;

use super::args::NftablesViaArg;
use crate::scan::nft_reads::read_nft_tables;
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
    let reads = read_nft_tables(via.via(), reread_after)?;
    let mut out = std::io::stdout().lock();
    if let Some(reused) = reads.reused {
        writeln!(out, "# reused {reused} constant maps")?;
    }
    for status in &reads.input.sources {
        writeln!(out, "# {} {:?} {:?}", status.source, status.status, status.notes)?;
    }
    if via == NftablesViaArg::Netlink {
        writeln!(
            out,
            "# maps read key by key {}, dumped {}",
            reads.fetched.by_key, reads.fetched.dumped
        )?;
    }
    for mut source in reads.input.observed.sources {
        source.origin.clear();
        writeln!(out, "{source:#?}")?;
    }
    Ok(0)
}
