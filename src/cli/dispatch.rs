//! Runs the parsed command: hands its config to the scan, the snapshot, repair or the
//! agent, prints what came back, and maps it to the exit status.

use crate::heart::document::{Document, DocumentKind};
use std::io::Write;

use anyhow::Context;

use super::args::{
    Cli, Command, DevCommand, ExplainArgs, FleetArgs, LintArgs, Output, PortsArgs, ScanArgs, SnapshotArgs,
};
use super::dev;
use super::failure::stdout;
use crate::agent::repair::oneshot::scan_and_repair;
use crate::heart::render::{Terminal, for_terminal, render_text, render_wide};
use crate::scan::oneshot::{run_oneshot, snapshot_node};

/// Runs the parsed command. Returns the process exit status; errors mean "could not
/// run" (exit 2).
pub fn run(mut cli: Cli) -> anyhow::Result<u8> {
    if let Command::Lint(args) = &cli.command
        && args.inputs.iter().any(|p| p.as_os_str() == "-")
        && args
            .cluster
            .cluster_state
            .as_ref()
            .is_some_and(|p| p.as_os_str() == "-")
    {
        anyhow::bail!(
            "the manifests and --cluster-state both read standard input (-), which can be read once"
        );
    }
    // Held to the end: the file that stands for standard input.
    let _stdin = super::stdin::spool_stdin(cli.command.file_inputs())?;
    cli.command.check_named_api()?;
    let terminal = super::terminal::stdout_terminal(cli.global.color);
    let out = Out { terminal: &terminal };
    match cli.command {
        Command::Scan(args) => scan(args, out),
        Command::Explain(args) => explain(args, out),
        Command::Snapshot(args) => snapshot(args),
        Command::Ports(args) => ports(args, out),
        Command::Lint(args) => lint(args, out),
        Command::Fleet(args) => fleet(args, out),
        Command::Completions { shell } => {
            super::docs::write_completions(shell, &mut stdout())?;
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

/// Where a view's text goes.
#[derive(Clone, Copy)]
struct Out<'a> {
    terminal: &'a Terminal,
}

impl Out<'_> {
    /// Writes rendered text, fitted to the terminal.
    fn text(&self, text: &str) -> anyhow::Result<()> {
        let mut stdout = stdout();
        stdout.write_all(for_terminal(text, self.terminal).as_bytes())?;
        stdout.flush()?;
        Ok(())
    }

    /// Writes `view` as a pretty JSON document of `kind` about `node`.
    fn json<T: serde::Serialize>(
        &self,
        (kind, node): (DocumentKind, Option<&str>),
        view: &T,
    ) -> anyhow::Result<()> {
        let document = Document::new(kind, node, jiff::Timestamp::now(), view);
        let mut bytes = serde_json::to_vec_pretty(&document)?;
        bytes.push(b'\n');
        let mut stdout = stdout();
        stdout.write_all(&bytes)?;
        stdout.flush()?;
        Ok(())
    }
}

fn scan(args: ScanArgs, out: Out) -> anyhow::Result<u8> {
    if args.repair.enabled {
        let pass = scan_and_repair(&args.repair_pass_config())?;
        match args.output.format {
            Output::Text => out.text(&pass.render_text())?,
            Output::Wide => out.text(&format!("{}{}", render_wide(&pass.report), pass.render_actions()))?,
            Output::Json => out.json(
                (DocumentKind::ScanReport, pass.report.node.as_deref()),
                &pass.to_json()?,
            )?,
        }
        return Ok(pass.exit_code());
    }
    let report = run_oneshot(&args.oneshot_config())?;
    let about = (DocumentKind::ScanReport, report.node.as_deref());
    match args.output.format {
        Output::Text => out.text(&render_text(&report))?,
        Output::Wide => out.text(&render_wide(&report))?,
        Output::Json => out.json(about, &report)?,
    }
    Ok(report.exit_code())
}

fn explain(args: ExplainArgs, out: Out) -> anyhow::Result<u8> {
    use crate::heart::explain::render::render_text;
    let outcome = crate::scan::explain::run_explain(&args.explain_config())?;
    let node = outcome.node.as_deref();
    let e = &outcome.explanation;
    match args.output.format {
        Output::Text | Output::Wide => out.text(&render_text(e, node))?,
        Output::Json => out.json((DocumentKind::Explanation, node), e)?,
    }
    Ok(e.exit_code())
}

fn ports(args: PortsArgs, out: Out) -> anyhow::Result<u8> {
    use crate::heart::views::ports;
    use crate::scan::cluster_services;
    let services = cluster_services::load_services(&args.cluster.source())
        .context("cannot read the cluster's Services")?;
    let (claims, problems) = services.claims();
    let table = ports::allocation_table(claims, args.nodeport_range, args.next, problems);
    print_view(
        out,
        args.output.format,
        (DocumentKind::PortAllocation, None),
        &table,
        ports::render_table,
    )?;
    Ok(table.exit_code())
}

fn lint(args: LintArgs, out: Out) -> anyhow::Result<u8> {
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
        out,
        args.output.format,
        (DocumentKind::LintReport, None),
        &report,
        lint::render_lint,
    )?;
    Ok(report.exit_code())
}

fn fleet(args: FleetArgs, out: Out) -> anyhow::Result<u8> {
    use crate::heart::views::fleet;
    use crate::sources::{fleet_client, fleet_prometheus};
    if let Some(url) = args.prometheus {
        let query = fleet_prometheus::PromQuery {
            url: url.clone(),
            job: args.prometheus_job,
            timeout: args.api_timeout,
        };
        let answers = fleet_prometheus::query_prometheus(&query)?;
        if answers.up.is_empty() {
            anyhow::bail!("Prometheus at {url} has no target of job {:?} (up)", query.job);
        }
        let source = format!("Prometheus at {url} (job {})", query.job);
        return print_fleet(
            out,
            args.output.format,
            &fleet::prometheus::prometheus_view(&answers, source),
        );
    }
    let query = fleet_client::FleetQuery {
        api: super::configs::api_target(&args.kubeconfig, &args.context),
        namespace: args.namespace,
        selector: args.selector,
        port: args.port,
        timeout: args.api_timeout,
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
        out,
        args.output.format,
        &fleet::fleet_view(&answers).with_nodes(source, summary, notes),
    )
}

/// Prints the fleet's view (about no one node); its exit status.
fn print_fleet(out: Out, output: Output, view: &crate::heart::views::fleet::FleetView) -> anyhow::Result<u8> {
    use crate::heart::views::fleet::render_fleet;
    print_view(out, output, (DocumentKind::FleetView, None), view, render_fleet)?;
    Ok(view.exit_code())
}

/// Prints a view on stdout: rendered for a terminal (`wide` too: these views' text
/// already has a line per item), or as a pretty JSON document of `kind` about `node`.
fn print_view<T: serde::Serialize>(
    out: Out,
    output: Output,
    about: (DocumentKind, Option<&str>),
    view: &T,
    render: fn(&T) -> String,
) -> anyhow::Result<()> {
    match output {
        Output::Text | Output::Wide => out.text(&render(view)),
        Output::Json => out.json(about, view),
    }
}

fn snapshot(args: SnapshotArgs) -> anyhow::Result<u8> {
    let manifest = snapshot_node(&args.snapshot_config())?;
    let mut stdout = stdout();
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
        if !matches!(e.status, crate::heart::outcome::InputState::Ok) {
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
    stdout().write_all(page.as_bytes())?;
    Ok(0)
}
