//! Runs the parsed command: hands its config to the scan, the snapshot, repair or the
//! agent, prints what came back, and maps it to the exit status.

use crate::heart::document::{Document, DocumentKind};
use std::io::Write;

use anyhow::Context;

use super::args::{
    Cli, Command, DevCommand, ExplainArgs, FleetArgs, Format, LintArgs, PortsArgs, ScanArgs, SnapshotArgs,
};
use super::dev;
use crate::agent::repair::oneshot::scan_and_repair;
use crate::heart::render::render_text;
use crate::scan::oneshot::{run_oneshot, snapshot_node};

/// Runs the parsed command. Returns the process exit status; errors mean "could not
/// run" (exit 2).
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Scan(args) => scan(args),
        Command::Explain(args) => explain(args),
        Command::Snapshot(args) => snapshot(args),
        Command::Ports(args) => ports(args),
        Command::Lint(args) => lint(args),
        Command::Fleet(args) => fleet(args),
        Command::Completions { shell } => {
            super::docs::write_completions(shell, &mut std::io::stdout().lock())?;
            Ok(0)
        }
        Command::Man { dir } => {
            for page in super::docs::write_man_pages(&dir)? {
                eprintln!("wrote {}", page.display());
            }
            Ok(0)
        }
        Command::Dev(DevCommand::NftSources { via, reread_after }) => {
            dev::print_nft_sources(via, reread_after.as_deref())
        }
        Command::Dev(DevCommand::IptablesSave { family }) => dev::print_iptables_save(&family),
        Command::Dev(DevCommand::CliReference) => print_page(&super::docs::cli_reference()),
        Command::Dev(DevCommand::MetricsReference) => print_page(&super::docs::metrics_reference()),
        Command::Dev(DevCommand::Schema { dir }) => {
            for file in dev::write_schemas(&dir)? {
                eprintln!("wrote {}", file.display());
            }
            Ok(0)
        }
        Command::Run(args) => {
            crate::agent::daemon::run(args.agent_config()?)?;
            Ok(0)
        }
    }
}

fn scan(args: ScanArgs) -> anyhow::Result<u8> {
    if args.repair.enabled {
        let pass = scan_and_repair(&args.repair_pass_config())?;
        let mut stdout = std::io::stdout().lock();
        match args.format {
            Format::Text => stdout.write_all(pass.render_text().as_bytes())?,
            Format::Json => {
                let json = pass.to_json()?;
                serde_json::to_writer_pretty(
                    &mut stdout,
                    &Document::new(
                        DocumentKind::ScanReport,
                        pass.report.node.as_deref(),
                        jiff::Timestamp::now(),
                        &json,
                    ),
                )?;
                stdout.write_all(b"\n")?;
            }
        }
        stdout.flush()?;
        return Ok(pass.exit_code());
    }
    let report = run_oneshot(&args.oneshot_config())?;
    print_view(
        args.format,
        (DocumentKind::ScanReport, report.node.as_deref()),
        &report,
        render_text,
    )?;
    Ok(report.exit_code())
}

fn explain(args: ExplainArgs) -> anyhow::Result<u8> {
    use crate::heart::explain::render::render_text;
    let outcome = crate::scan::explain::run_explain(&args.explain_config())?;
    let node = outcome.node.as_deref();
    let e = &outcome.explanation;
    let mut stdout = std::io::stdout().lock();
    match args.format {
        Format::Text => stdout.write_all(render_text(e, node).as_bytes())?,
        Format::Json => {
            let document = Document::new(DocumentKind::Explanation, node, jiff::Timestamp::now(), e);
            serde_json::to_writer_pretty(&mut stdout, &document)?;
            stdout.write_all(b"\n")?;
        }
    }
    stdout.flush()?;
    Ok(e.exit_code())
}

fn ports(args: PortsArgs) -> anyhow::Result<u8> {
    use crate::heart::views::ports;
    use crate::scan::cluster_services;
    let services = cluster_services::load_services(&args.cluster.source())
        .context("cannot read the cluster's Services")?;
    let (claims, problems) = services.claims();
    let table = ports::allocation_table(claims, args.nodeport_range, args.next, problems);
    print_view(
        args.format,
        (DocumentKind::PortAllocation, None),
        &table,
        ports::render_table,
    )?;
    Ok(table.exit_code())
}

fn lint(args: LintArgs) -> anyhow::Result<u8> {
    use crate::heart::views::lint;
    use crate::scan::cluster_services::load_services;
    use crate::sources::manifest_files;
    let (services, problems) = manifest_files::read_manifests(&args.inputs)?;
    // The cluster is consulted only when asked: a CI job without credentials still
    // gets the checks that need none.
    let source = (args.cluster.api().is_named() || args.cluster.cluster_state.is_some())
        .then(|| args.cluster.source());
    let live = match &source {
        Some(source) => {
            let cluster = load_services(source).context("cannot read the cluster's Services")?;
            Some(cluster.claims().0)
        }
        None => None,
    };
    let config = lint::LintConfig {
        nodeport_range: args.nodeport_range,
        default_namespace: args.namespace,
    };
    let report = lint::lint(&services, &problems, live.as_deref(), &config);
    print_view(
        args.format,
        (DocumentKind::LintReport, None),
        &report,
        lint::render_lint,
    )?;
    Ok(report.exit_code())
}

fn fleet(args: FleetArgs) -> anyhow::Result<u8> {
    use crate::heart::views::fleet;
    use crate::sources::{fleet_client, fleet_prometheus};
    if let Some(url) = args.prometheus {
        let query = fleet_prometheus::PromQuery {
            url: url.clone(),
            job: args.prometheus_job,
            timeout: args.timeout,
        };
        let answers = fleet_prometheus::query_prometheus(&query)?;
        if answers.up.is_empty() {
            anyhow::bail!("Prometheus at {url} has no target of job {:?} (up)", query.job);
        }
        let source = format!("Prometheus at {url} (job {})", query.job);
        return print_fleet(args.format, &fleet::prometheus::prometheus_view(&answers, source));
    }
    let query = fleet_client::FleetQuery {
        api: super::configs::api_target(&args.kubeconfig, &args.context),
        namespace: args.namespace,
        selector: args.selector,
        port: args.port,
        timeout: args.timeout,
        concurrency: usize::from(args.concurrency),
        all: args.all,
    };
    let fleet_client::FleetAnswers {
        nodes,
        answers,
        notes,
    } = fleet_client::ask_fleet(&query)?;
    if nodes.is_none() && answers.is_empty() {
        anyhow::bail!(
            "no agent pods in namespace {} match {}",
            query.namespace,
            query.selector
        );
    }
    let (source, summary) = match &nodes {
        Some(statuses) => (
            Some("their NodePortDrift condition".to_string()),
            Some(fleet::nodes::NodesSummary::of(statuses)),
        ),
        None => (None, None),
    };
    print_fleet(
        args.format,
        &fleet::fleet_view(&answers).with_nodes(source, summary, notes),
    )
}

/// Prints the fleet's view (about no one node); its exit status.
fn print_fleet(format: Format, view: &crate::heart::views::fleet::FleetView) -> anyhow::Result<u8> {
    use crate::heart::views::fleet::render_fleet;
    print_view(format, (DocumentKind::FleetView, None), view, render_fleet)?;
    Ok(view.exit_code())
}

/// Prints a view on stdout: rendered for a terminal, or as a pretty JSON document of
/// `kind` about `node`.
fn print_view<T: serde::Serialize>(
    format: Format,
    (kind, node): (DocumentKind, Option<&str>),
    view: &T,
    render: fn(&T) -> String,
) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match format {
        Format::Text => stdout.write_all(render(view).as_bytes())?,
        Format::Json => {
            let document = Document::new(kind, node, jiff::Timestamp::now(), view);
            serde_json::to_writer_pretty(&mut stdout, &document)?;
            stdout.write_all(b"\n")?;
        }
    }
    stdout.flush()?;
    Ok(())
}

fn snapshot(args: SnapshotArgs) -> anyhow::Result<u8> {
    let manifest = snapshot_node(&args.snapshot_config())?;
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "portdrift: wrote {} (node {})",
        args.out.display(),
        manifest.node.as_deref().unwrap_or("unknown")
    )?;
    for e in &manifest.sources {
        let mut line = format!("  {:<42} {:<9}", e.source, e.status.as_str());
        if e.file {
            line.push_str(&format!(" {} bytes", e.bytes.unwrap_or(0)));
        }
        writeln!(stdout, "{}", line.trim_end())?;
        if !matches!(e.status, crate::heart::outcome::SourceState::Ok) {
            for n in &e.notes {
                writeln!(stdout, "      {n}")?;
            }
        }
    }
    stdout.flush()?;
    Ok(0)
}

/// Prints a generated page (docs/cli.md, docs/metrics.md) to standard output.
fn print_page(page: &str) -> anyhow::Result<u8> {
    std::io::Write::write_all(&mut std::io::stdout().lock(), page.as_bytes())?;
    Ok(0)
}
