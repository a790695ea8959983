//! Command-line interface: clap definitions and the commands they run.

use std::io::Write;
use std::ops::RangeInclusive;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::detect::{DetectConfig, Grace};
use crate::report::render_text;
use crate::scan::run_scan;
use crate::snapshot::read_bundle;

/// Finds where a node's NodePort plumbing has drifted from what the cluster says.
#[derive(Debug, Parser)]
#[command(name = "portdrift", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compare a node's NodePort rules and listeners with the cluster state, once.
    Scan(ScanArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Scan a snapshot bundle (a directory captured from a node) instead of this node.
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,

    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,

    /// The node whose endpoints count as local (default: the bundle's `node` file).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node: Option<String>,

    /// How long kube-proxy may take to apply a change: a difference about a Service or
    /// EndpointSlice that changed more recently (by the objects' own timestamps) is
    /// reported as pending, severity info. `0` turns it off.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_duration)]
    pub grace: std::time::Duration,

    /// The cluster's NodePort range (the API server's --service-node-port-range).
    #[arg(long, value_name = "FIRST-LAST", default_value = "30000-32767", value_parser = parse_port_range)]
    pub nodeport_range: RangeInclusive<u16>,
}

/// Parses durations written like `30s`, `2m`, `1h30m`, `500ms`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("{s:?} is not a duration like 30s or 2m: {e}"))?;
    std::time::Duration::try_from(d).map_err(|_| format!("{s:?} is negative"))
}

/// Parses `30000-32767`.
pub fn parse_port_range(s: &str) -> Result<RangeInclusive<u16>, String> {
    let (a, b) = s.split_once('-').ok_or("expected FIRST-LAST, e.g. 30000-32767")?;
    let a: u16 = a
        .trim()
        .parse()
        .map_err(|_| format!("{a:?} is not a port number"))?;
    let b: u16 = b
        .trim()
        .parse()
        .map_err(|_| format!("{b:?} is not a port number"))?;
    if a > b {
        return Err(format!("the range {a}-{b} is empty"));
    }
    Ok(a..=b)
}

/// Runs the parsed command. Returns the process exit status; errors mean "could not
/// run" (exit 2).
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Scan(args) => scan(args),
    }
}

fn scan(args: ScanArgs) -> anyhow::Result<u8> {
    let Some(dir) = &args.from else {
        bail!("scanning the live node is not available yet: capture a bundle and pass it with --from DIR");
    };
    let input =
        read_bundle(dir, args.node.as_deref()).with_context(|| format!("cannot scan {}", dir.display()))?;
    let grace = (!args.grace.is_zero()).then(|| Grace {
        now: jiff::Timestamp::now(),
        window: args.grace,
    });
    let config = DetectConfig {
        grace,
        nodeport_range: args.nodeport_range,
    };
    let report = run_scan(input, &config);
    let mut stdout = std::io::stdout().lock();
    match args.format {
        Format::Text => stdout.write_all(render_text(&report).as_bytes())?,
        Format::Json => {
            serde_json::to_writer_pretty(&mut stdout, &report)?;
            stdout.write_all(b"\n")?;
        }
    }
    stdout.flush()?;
    Ok(report.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_ranges_parse_and_reject_nonsense() {
        assert_eq!(parse_port_range("30000-32767"), Ok(30000..=32767));
        assert!(parse_port_range("32767-30000").is_err());
        assert!(parse_port_range("30000").is_err());
        assert!(parse_port_range("a-b").is_err());
    }

    #[test]
    fn durations_parse_like_kubectl_flags() {
        assert_eq!(parse_duration("30s"), Ok(std::time::Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(std::time::Duration::from_secs(120)));
        assert_eq!(parse_duration("500ms"), Ok(std::time::Duration::from_millis(500)));
        assert_eq!(parse_duration("0s"), Ok(std::time::Duration::ZERO));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
