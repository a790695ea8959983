//! `portdrift dev ...`: developer tools for tests and benchmarks, not a contract.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::args::NftablesViaArg;
use crate::heart::document::DocumentKind;
use crate::heart::document::schema::{document_schema, file_name};
use crate::scan::nft_reads::read_nft_tables;
use crate::sources::tools::{DEFAULT_MAX_OUTPUT, DEFAULT_TOOL_TIMEOUT};

/// Writes the JSON Schema of every kind of document into `dir` (docs/schema/), and
/// returns the files written.
pub(super) fn write_schemas(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use crate::heart::outcome::ScanReport;
    use crate::heart::views::{fleet::FleetView, lint::LintReport, ports::AllocationTable};
    use crate::sources::bundle::Manifest;
    // Each kind by the type of its body.
    let schema_of = |kind| match kind {
        DocumentKind::ScanReport => document_schema::<ScanReport>(kind),
        DocumentKind::FleetView => document_schema::<FleetView>(kind),
        DocumentKind::PortAllocation => document_schema::<AllocationTable>(kind),
        DocumentKind::LintReport => document_schema::<LintReport>(kind),
        DocumentKind::Snapshot => document_schema::<Manifest>(kind),
        DocumentKind::Explanation => document_schema::<crate::heart::explain::explanation::Explanation>(kind),
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    for kind in DocumentKind::ALL {
        let path = dir.join(file_name(kind));
        std::fs::write(&path, format!("{:#}\n", schema_of(kind)))
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

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
    for mut source in reads.input.observed.dumps {
        source.origin.clear();
        writeln!(out, "{source:#?}")?;
    }
    Ok(0)
}
