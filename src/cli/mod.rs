//! Command-line interface: clap definitions and the commands they run.

use std::io::Write;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::heart::detect::{DetectConfig, Grace};
use crate::heart::model::ProcessInfo;
use crate::heart::outcome::{API_SOURCE, ScanInput, SourceState, SourceStatus, run_scan};
use crate::heart::render::render_text;
use crate::scan::capture::{SnapshotOptions, write_snapshot};
use crate::scan::input::{read_bundle_with, read_input};
use crate::sources::kube_client;
use crate::sources::live::{self, LiveConfig, LiveNode, ToolLimits};
use std::collections::HashMap;

/// Finds where a node's NodePort plumbing has drifted from what the cluster says.
#[derive(Debug, Parser)]
#[command(name = "portdrift", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compare a node's NodePort rules and listeners with the cluster state, once:
    /// this node's (as a hostNetwork DaemonSet pod sees it), or a bundle's (--from).
    ///
    /// Exit status: 0 when every check ran on complete inputs and no finding is a
    /// warning or critical; 1 when one is; 2 when it could not scan (a missing bundle,
    /// an unreadable cluster.json); 3 when nothing warning or critical was found but the
    /// check was incomplete (no cluster state, a proxy mode portdrift does not read, a
    /// rule source that failed or was partial): the report then starts with what was not
    /// checked, and the JSON's `coverage` says it.
    #[command(
        after_help = "Exit status: 0 checked and clean, 1 findings, 2 could not scan, 3 nothing found but the check was incomplete."
    )]
    Scan(ScanArgs),
    /// Capture this node into a bundle directory that `scan --from` reads.
    Snapshot(SnapshotArgs),
    /// Run as a node agent: watch the API, scan this node every interval, serve
    /// /metrics, /healthz, /readyz and /findings.
    Run(RunArgs),
    /// The cluster's NodePort allocation table: every allocated port and its Service,
    /// collisions, and the free ports. Exit 1 when ports collide.
    Ports(PortsArgs),
    /// Check Service manifests before they are applied: nodePorts that collide with each
    /// other or (with --kubeconfig or --cluster-state) with the cluster, or fall outside
    /// the range; hard-coded nodePorts and other hazards as warnings. Exit 1 on errors.
    Lint(LintArgs),
    /// Ask every portdrift agent for its findings through the API server's pod proxy,
    /// and show each finding with the nodes that have it. Exit 1 when a warning or
    /// critical finding is on some node, or an agent did not answer.
    Fleet(FleetArgs),
    /// Developer tools (undocumented; for tests and benchmarks).
    #[command(hide = true, subcommand)]
    Dev(DevCommand),
}

/// `portdrift dev ...`: not a contract.
#[derive(Debug, Subcommand)]
pub enum DevCommand {
    /// Prints the rule model of this node's kube-proxy nftables tables as read one way,
    /// with the origin left out, so that two ways can be compared.
    NftSources {
        #[arg(long, value_enum, default_value = "netlink")]
        via: NftablesViaArg,
        /// Read once as the agent does (keeping the constant maps), apply this file with
        /// `nft -f`, and print the second read, with how many maps it reused.
        #[arg(long, value_name = "FILE")]
        reread_after: Option<PathBuf>,
    },
    /// Prints one family's iptables-nft tables as the netlink reader renders them, as
    /// `iptables-nft-save` prints them less its timestamped comments.
    IptablesSave {
        #[arg(long, default_value = "ipv4", value_parser = ["ipv4", "ipv6"])]
        family: String,
    },
}

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// Reach the API server with this kubeconfig (default: KUBECONFIG, ~/.kube/config,
    /// then the in-cluster service account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// The agents' namespace.
    #[arg(long, short = 'n', value_name = "NS", default_value = "portdrift")]
    pub namespace: String,

    /// The agents' pods: a label selector.
    #[arg(
        long,
        short = 'l',
        value_name = "LABELS",
        default_value = "app.kubernetes.io/name=portdrift"
    )]
    pub selector: String,

    /// The agents' HTTP port (their --listen).
    #[arg(long, value_name = "PORT", default_value_t = 9741)]
    pub port: u16,

    /// How long one agent may take to answer (and the pod list).
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_timeout)]
    pub timeout: Duration,

    /// How many agents are asked at once.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,

    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// Where a cluster-wide view reads the cluster's Services.
#[derive(Debug, Args)]
pub struct ClusterSourceArgs {
    /// Read the Services from the API server with this kubeconfig (default: KUBECONFIG,
    /// ~/.kube/config, then the in-cluster service account).
    #[arg(long, value_name = "FILE", conflicts_with = "cluster_state")]
    pub kubeconfig: Option<PathBuf>,

    /// Read the Services from a file, as `kubectl get services -A -o json` prints it
    /// (a bundle's cluster.json does too).
    #[arg(long, value_name = "FILE")]
    pub cluster_state: Option<PathBuf>,

    /// How long listing the Services from the API may take.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_timeout)]
    pub api_timeout: Duration,
}

impl ClusterSourceArgs {
    /// The source named on the command line: a file, else the API server.
    pub fn source(&self) -> crate::scan::cluster_services::ServiceSource {
        use crate::scan::cluster_services::ServiceSource;
        match &self.cluster_state {
            Some(path) => ServiceSource::File(path.clone()),
            None => ServiceSource::Api {
                kubeconfig: self.kubeconfig.clone(),
                timeout: self.api_timeout,
            },
        }
    }
}

#[derive(Debug, Args)]
pub struct LintArgs {
    /// Manifest files, directories (their .yaml, .yml and .json files, recursively), or
    /// `-` for standard input (`helm template ... | portdrift lint -`).
    #[arg(value_name = "FILE|DIR|-", required = true)]
    pub inputs: Vec<PathBuf>,

    /// With --kubeconfig or --cluster-state: also check against the cluster's allocation.
    #[command(flatten)]
    pub cluster: ClusterSourceArgs,

    /// The namespace of manifests that name none (as `kubectl apply -n NS`).
    #[arg(long, short = 'n', value_name = "NS", default_value = "default")]
    pub namespace: String,

    /// The cluster's NodePort range (the API server's --service-node-port-range).
    #[arg(long, value_name = "FIRST-LAST", default_value = "30000-32767", value_parser = parse_port_range)]
    pub nodeport_range: RangeInclusive<u16>,

    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct PortsArgs {
    #[command(flatten)]
    pub cluster: ClusterSourceArgs,

    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,

    /// The cluster's NodePort range (the API server's --service-node-port-range).
    #[arg(long, value_name = "FIRST-LAST", default_value = "30000-32767", value_parser = parse_port_range)]
    pub nodeport_range: RangeInclusive<u16>,

    /// How many free ports to suggest: the lowest free ones of the API server's static
    /// band first (see the README).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub next: usize,
}

/// How the agent logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// This node's name (the endpoints it counts as local).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node: String,

    /// Where to serve HTTP.
    #[arg(long, value_name = "ADDR:PORT", default_value = crate::agent::http::DEFAULT_LISTEN)]
    pub listen: SocketAddr,

    /// Time between scans.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_timeout)]
    pub interval: Duration,

    /// How long kube-proxy may take to apply a change (see `scan --grace`). `0` turns it off.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_duration)]
    pub grace: Duration,

    /// Watch the API server with this kubeconfig (default: KUBECONFIG, ~/.kube/config,
    /// then the in-cluster service account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Log format (on stderr).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// The cluster's NodePort range (the API server's --service-node-port-range).
    #[arg(long, value_name = "FIRST-LAST", default_value = "30000-32767", value_parser = parse_port_range)]
    pub nodeport_range: RangeInclusive<u16>,

    /// At most this many per-finding series (`portdrift_finding`) on /metrics, most
    /// severe first; the rest are counted in `portdrift_findings_not_detailed`. 0: none.
    #[arg(long, value_name = "N", default_value_t = crate::agent::metrics::DEFAULT_MAX_SERIES)]
    pub metrics_max_series: usize,

    /// Write a Kubernetes Event for each new warning or critical finding, on its Service
    /// (or on this Node), rate-limited. Needs RBAC to create events.
    #[arg(long)]
    pub events: bool,

    /// Keep a `NodePortDrift` condition on this Node: True while critical findings
    /// exist. Needs RBAC to patch nodes/status.
    #[arg(long)]
    pub node_condition: bool,

    #[command(flatten)]
    pub repair: RunRepairArgs,

    #[command(flatten)]
    pub live: LiveArgs,
}

/// `run --repair`: repair continuously, under the same safety rules as `scan --repair`.
#[derive(Debug, Args)]
pub struct RunRepairArgs {
    /// Remove stale rules every cycle: only what a finding seen in two scans, and
    /// older than --grace and two intervals, proves stale, while the API watch is fresh
    /// (see the README, Repair).
    #[arg(long = "repair")]
    pub enabled: bool,

    /// With --repair: log the exact commands each cycle would run, and change nothing.
    #[arg(long, requires = "enabled")]
    pub repair_dry_run: bool,

    /// The most repair actions in one cycle.
    #[arg(long, value_name = "N", default_value_t = crate::agent::repair::DEFAULT_MAX_ACTIONS, requires = "enabled")]
    pub repair_max: usize,

    /// How long a finding must have persisted (in two scans at least) before it is
    /// repaired; never less than two intervals.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_duration, requires = "enabled")]
    pub repair_min_age: Duration,

    /// How long a live kube-proxy, nudged to resync (its canary chain deleted), gets to
    /// clean up its own rules before the drift is removed directly.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_duration, requires = "enabled")]
    pub repair_nudge_wait: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Scan a snapshot bundle (a directory captured from a node) instead of this node.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["proc_root", "tool_timeout", "tool_max_output", "kube_proxy_healthz", "kube_proxy_metrics"])]
    pub from: Option<PathBuf>,

    /// The cluster state, as `kubectl get services,endpointslices -A -o json` prints it
    /// (with --from: in place of the bundle's cluster.json). Without any, only the
    /// checks that need no cluster state run.
    #[arg(long, value_name = "FILE")]
    pub cluster_state: Option<PathBuf>,

    /// Read the cluster state from the API server with this kubeconfig. Without it (and
    /// without --cluster-state) a live scan tries KUBECONFIG, ~/.kube/config and the
    /// in-cluster service account.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["cluster_state", "from"])]
    pub kubeconfig: Option<PathBuf>,

    /// How long listing the cluster state from the API may take.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_duration)]
    pub api_timeout: Duration,

    #[command(flatten)]
    pub live: LiveArgs,

    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,

    /// The node whose endpoints count as local (default: the bundle's `node` file, or
    /// this host's name).
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

    #[command(flatten)]
    pub repair: RepairArgs,
}

/// `scan --repair`: one careful repair pass on this node.
#[derive(Debug, Args)]
pub struct RepairArgs {
    /// Remove the stale rules the scan proves stale: scan, wait --repair-confirm, scan
    /// again, and act only on findings present both times (see the README, Repair).
    #[arg(long = "repair", conflicts_with = "from")]
    pub enabled: bool,

    /// With --repair: print the exact commands it would run, and change nothing.
    #[arg(long, requires = "enabled")]
    pub dry_run: bool,

    /// The most repair actions in one pass.
    #[arg(long, value_name = "N", default_value_t = crate::agent::repair::DEFAULT_MAX_ACTIONS, requires = "enabled")]
    pub repair_max: usize,

    /// The time between the two scans a finding must appear in before it is repaired.
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = parse_duration, requires = "enabled")]
    pub repair_confirm: Duration,

    /// How long a live kube-proxy, nudged to resync (its canary chain deleted), gets to
    /// clean up its own rules before the drift is removed directly.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_duration, requires = "enabled")]
    pub repair_nudge_wait: Duration,

    /// Repair from a --cluster-state file. A file may be stale, so repair refuses one
    /// unless told that it is current.
    #[arg(long, requires_all = ["enabled", "cluster_state"])]
    pub trust_cluster_state: bool,
}

/// How to read the live node.
#[derive(Debug, Args)]
pub struct LiveArgs {
    /// Where procfs is mounted: sockets are read from DIR/net, sysctls from DIR/sys
    /// (like node_exporter's --path.procfs; /host/proc in a container).
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    pub proc_root: PathBuf,

    /// How long each dump tool (iptables-*-save, nft) may run before it is killed and
    /// reported as timed out: `10s`, `500ms`, `2m`.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_timeout)]
    pub tool_timeout: Duration,

    /// The most each dump tool may print (bytes; K, M, G suffixes are binary units).
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse_size)]
    pub tool_max_output: u64,

    /// kube-proxy's health endpoint (its --healthz-bind-address), or `off`.
    #[arg(long, value_name = "ADDR", default_value = live::DEFAULT_KUBE_PROXY_HEALTHZ, value_parser = parse_healthz_addr)]
    pub kube_proxy_healthz: HealthzAddr,

    /// kube-proxy's metrics server (its --metrics-bind-address), asked for
    /// `/proxyMode`, or `off`. Without an answer the rules alone tell the mode.
    #[arg(long, value_name = "ADDR", default_value = live::DEFAULT_KUBE_PROXY_METRICS, value_parser = parse_healthz_addr)]
    pub kube_proxy_metrics: HealthzAddr,

    /// How kube-proxy's nftables tables are read: `netlink` (from the kernel, falling
    /// back to `nft -j` when that fails) or `nft` (`nft -j list table` only).
    #[arg(long, value_enum, value_name = "HOW", default_value = "netlink")]
    pub nftables_via: NftablesViaArg,

    /// How iptables-nft's tables are read: `netlink` (from the kernel, falling back to
    /// `iptables-nft-save` for a family whose rules it cannot print exactly) or `save`
    /// (`iptables-nft-save` and `ip6tables-nft-save` only).
    #[arg(long, value_enum, value_name = "HOW", default_value = "netlink")]
    pub iptables_via: IptablesViaArg,
}

/// `--iptables-via`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IptablesViaArg {
    Netlink,
    Save,
}

/// `--nftables-via`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NftablesViaArg {
    Netlink,
    Nft,
}

/// `--kube-proxy-healthz`: an address, or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthzAddr(pub Option<SocketAddr>);

impl LiveArgs {
    pub(crate) fn config(&self, cluster_state: Option<PathBuf>) -> LiveConfig {
        LiveConfig {
            proc_root: self.proc_root.clone(),
            limits: ToolLimits {
                timeout: self.tool_timeout,
                max_output: self.tool_max_output,
            },
            kube_proxy_healthz: self.kube_proxy_healthz.0,
            kube_proxy_metrics: self.kube_proxy_metrics.0,
            healthz_timeout: live::HEALTHZ_TIMEOUT,
            cluster_state,
            nftables_via: match self.nftables_via {
                NftablesViaArg::Netlink => live::NftablesVia::Netlink,
                NftablesViaArg::Nft => live::NftablesVia::Nft,
            },
            iptables_via: match self.iptables_via {
                IptablesViaArg::Netlink => live::IptablesVia::Netlink,
                IptablesViaArg::Save => live::IptablesVia::Save,
            },
        }
    }
}

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// The bundle directory to write (created if needed).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Replace the bundle files of a non-empty DIR.
    #[arg(long)]
    pub force: bool,

    /// A cluster state file to copy into the bundle as cluster.json. Without it, the
    /// Services, EndpointSlices and this Node are listed from the API server when one
    /// is configured (--kubeconfig, KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, value_name = "FILE")]
    pub cluster_state: Option<PathBuf>,

    /// Read the cluster state from the API server with this kubeconfig.
    #[arg(long, value_name = "FILE", conflicts_with = "cluster_state")]
    pub kubeconfig: Option<PathBuf>,

    /// How long listing the cluster state from the API may take.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_duration)]
    pub api_timeout: Duration,

    /// The node's name for the bundle's `node` file (default: this host's name).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node: Option<String>,

    #[command(flatten)]
    pub live: LiveArgs,
}

/// Parses `1048576`, `64K`, `256M`, `1G` (binary units; `KiB`, `MiB`, `GiB` too).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 256M)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(format!("{s:?}: unknown unit (use K, M or G)")),
    };
    let size = n
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))?;
    if size == 0 {
        return Err("the size must be more than zero".into());
    }
    Ok(size)
}

/// Parses `127.0.0.1:10256`, `[::1]:10256` or `off`.
pub fn parse_healthz_addr(s: &str) -> Result<HealthzAddr, String> {
    match s.trim() {
        "off" | "none" | "" => Ok(HealthzAddr(None)),
        t => t
            .parse()
            .map(|a| HealthzAddr(Some(a)))
            .map_err(|_| format!("{s:?} is not IP:PORT (or off)")),
    }
}

/// Parses durations written like `30s`, `2m`, `1h30m`, `500ms`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("{s:?} is not a duration like 30s or 2m: {e}"))?;
    std::time::Duration::try_from(d).map_err(|_| format!("{s:?} is negative"))
}

/// A tool timeout: a duration, more than zero.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("the timeout must be more than zero".into());
    }
    Ok(d)
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
        Command::Snapshot(args) => snapshot(args),
        Command::Ports(args) => ports(args),
        Command::Lint(args) => lint(args),
        Command::Fleet(args) => fleet(args),
        Command::Dev(DevCommand::NftSources { via, reread_after }) => {
            print_nft_sources(via, reread_after.as_deref())
        }
        Command::Dev(DevCommand::IptablesSave { family }) => print_iptables_save(&family),
        Command::Run(args) => {
            let live = args.live.config(None);
            let live_limits = live.limits;
            crate::agent::daemon::run(crate::agent::daemon::AgentConfig {
                node: args.node,
                listen: args.listen,
                interval: args.interval,
                grace: args.grace,
                kubeconfig: args.kubeconfig,
                live,
                nodeport_range: args.nodeport_range,
                metrics_max_series: args.metrics_max_series,
                events: args.events,
                node_condition: args.node_condition,
                repair: args.repair.enabled.then(|| crate::agent::repair::RepairConfig {
                    max_actions: args.repair.repair_max,
                    min_scans: 2,
                    // Two intervals at least: a change kube-proxy is still applying
                    // is not drift.
                    min_age: args.repair.repair_min_age.max(args.interval * 2),
                    nudge_wait: args.repair.repair_nudge_wait,
                    grace: args.grace,
                    dry_run: args.repair.repair_dry_run,
                    limits: live_limits,
                }),
            })?;
            Ok(0)
        }
    }
}

fn print_iptables_save(family: &str) -> anyhow::Result<u8> {
    use crate::heart::model::Family;
    let family = if family == "ipv6" {
        Family::Ipv6
    } else {
        Family::Ipv4
    };
    let limits = crate::sources::netlink::NetlinkLimits {
        timeout: live::DEFAULT_TOOL_TIMEOUT,
        max_bytes: live::DEFAULT_MAX_OUTPUT,
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

fn print_nft_sources(via: NftablesViaArg, reread_after: Option<&Path>) -> anyhow::Result<u8> {
    let mut node = live::LiveNode::new(LiveConfig {
        nftables_via: match via {
            NftablesViaArg::Netlink => live::NftablesVia::Netlink,
            NftablesViaArg::Nft => live::NftablesVia::Nft,
        },
        ..LiveConfig::default()
    });
    // Keeping the maps changes nothing in one read, and says how it got them.
    node = node.keeping_constant_maps();
    let mut input = crate::scan::input::read_nftables_only(&mut node);
    let mut out = std::io::stdout().lock();
    if let Some(change) = reread_after {
        let applied = std::process::Command::new("nft").arg("-f").arg(change).status()?;
        anyhow::ensure!(applied.success(), "nft -f {} failed", change.display());
        input = crate::scan::input::read_nftables_only(&mut node);
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

fn scan(args: ScanArgs) -> anyhow::Result<u8> {
    if args.repair.enabled {
        return crate::agent::repair::oneshot::scan_and_repair(&args);
    }
    let input = match &args.from {
        Some(dir) => read_bundle_with(dir, args.node.as_deref(), args.cluster_state.clone())
            .with_context(|| format!("cannot scan {}", dir.display()))?,
        None => read_live(&args)?.0,
    };
    let report = run_scan(input, &detect_config(&args));
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

/// The detector's settings for a scan made now.
pub(crate) fn detect_config(args: &ScanArgs) -> DetectConfig {
    DetectConfig {
        grace: (!args.grace.is_zero()).then(|| Grace {
            now: jiff::Timestamp::now(),
            window: args.grace,
        }),
        // A one-shot scan lists the cluster state itself: it is current by construction.
        cluster_state_stale: false,
        nodeport_range: args.nodeport_range.clone(),
    }
}

/// Reads this node and its cluster state for a live scan. The second value says
/// whether the cluster state was listed from the API (or read from a file) in full.
pub(crate) fn read_live(args: &ScanArgs) -> anyhow::Result<(ScanInput, bool)> {
    let mut node = LiveNode::new(args.live.config(args.cluster_state.clone()));
    let mut input = read_input(&mut node, args.node.as_deref()).context("cannot scan this node")?;
    if args.cluster_state.is_none() {
        read_cluster_from_api(&mut input, args.kubeconfig.as_deref(), args.api_timeout);
    }
    let listed = input.desired.is_some()
        && input
            .sources
            .iter()
            .any(|s| s.source.starts_with("cluster") && s.status == SourceState::Ok);
    Ok((input, listed))
}

/// Lists the cluster's objects from the API into a temporary `cluster.json`. None when
/// no API is configured at all; an explicit kubeconfig that fails is an error.
fn list_cluster_to_file(
    kubeconfig: Option<&Path>,
    node: Option<&str>,
    timeout: Duration,
) -> anyhow::Result<Option<tempfile::NamedTempFile>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let listed = runtime.block_on(async {
        let config = match kube_client::kube_config(kubeconfig).await {
            Ok(config) => config,
            Err(e) if kubeconfig.is_none() => {
                eprintln!("portdrift: no cluster state in the snapshot: {e}");
                return Ok(None);
            }
            Err(e) => return Err(anyhow::Error::new(e)),
        };
        let client = kube_client::kube_client(config)?;
        Ok(Some(kube_client::list_once(client, node, timeout).await?))
    });
    let Some(objects) = listed.context("cannot list the cluster state from the API server")? else {
        return Ok(None);
    };
    let mut file = tempfile::NamedTempFile::new()?;
    serde_json::to_writer_pretty(&mut file, &objects.to_list_json())?;
    file.write_all(b"\n")?;
    Ok(Some(file))
}

/// Lists the cluster state from the API server into `input`. An unreachable or
/// unconfigured API is a source status, not a failed scan: the checks that need no
/// cluster state still run, and the report says why the others did not.
fn read_cluster_from_api(input: &mut ScanInput, kubeconfig: Option<&Path>, timeout: Duration) {
    let mut status = SourceStatus::new(API_SOURCE, SourceState::Ok);
    let node = input.node.clone();
    // Pods are listed (on this node only) just when a squatter runs in one.
    let pod_uids = input.observed.owners.values().any(|p| p.pod.is_some());
    let loaded = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|runtime| {
            runtime
                .block_on(async {
                    let config = kube_client::kube_config(kubeconfig)
                        .await
                        .map_err(|e| (e.to_string(), true))?;
                    let url = config.cluster_url.to_string();
                    let client = kube_client::kube_client(config).map_err(|e| (e.to_string(), false))?;
                    let desired = kube_client::load_once(client.clone(), node.as_deref(), timeout)
                        .await
                        .map_err(|e| (e.to_string(), false))?;
                    let pods = match node.as_deref() {
                        Some(node) if pod_uids => {
                            Some(kube_client::pods_on_node(client, node, timeout).await)
                        }
                        _ => None,
                    };
                    Ok((desired, url, pods))
                })
                .map_err(|(e, unconfigured)| {
                    if unconfigured && kubeconfig.is_none() {
                        format!("unconfigured: {e}")
                    } else {
                        e
                    }
                })
        });
    match loaded {
        Ok((desired, url, pods)) => {
            match pods {
                Some(Ok(pods)) => name_pods(&mut input.observed.owners, &pods),
                Some(Err(e)) => status
                    .notes
                    .push(format!("cannot name the pods behind squatters: {e}")),
                None => {}
            }
            status.origin = Some(url);
            let pod_notes = std::mem::take(&mut status.notes);
            status.describe_cluster_state(&desired);
            status.notes.extend(pod_notes);
            input.desired = Some(desired);
        }
        Err(e) if e.starts_with("unconfigured: ") => {
            status.status = SourceState::Absent;
            status.notes.push(format!(
                "no cluster state: no --cluster-state or --kubeconfig, and {}; only checks that need none ran",
                e.trim_start_matches("unconfigured: ")
            ));
        }
        Err(e) => {
            eprintln!("portdrift: cannot read the cluster state from the API server: {e}");
            status.status = SourceState::Error;
            status
                .notes
                .push(format!("{e}; only checks that need no cluster state ran"));
        }
    }
    input.sources.push(status);
}

/// Replaces the pod UIDs read from cgroups with `namespace/name`, where the API knows them.
fn name_pods(owners: &mut HashMap<u64, ProcessInfo>, pods: &HashMap<String, String>) {
    for process in owners.values_mut() {
        if let Some(name) = process.pod.as_ref().and_then(|uid| pods.get(uid)) {
            process.pod = Some(name.clone());
        }
    }
}

fn ports(args: PortsArgs) -> anyhow::Result<u8> {
    use crate::heart::views::ports;
    use crate::scan::cluster_services;
    let services = cluster_services::load_services(&args.cluster.source())
        .context("cannot read the cluster's Services")?;
    let (claims, problems) = services.claims();
    let table = ports::allocation_table(claims, args.nodeport_range, args.next, problems);
    print_view(args.format, &table, ports::render_table)?;
    Ok(table.exit_code())
}

fn lint(args: LintArgs) -> anyhow::Result<u8> {
    use crate::heart::views::lint;
    use crate::scan::cluster_services::load_services;
    use crate::sources::manifest_files;
    let (services, problems) = manifest_files::read_manifests(&args.inputs)?;
    // The cluster is consulted only when asked: a CI job without credentials still
    // gets the checks that need none.
    let source = (args.cluster.kubeconfig.is_some() || args.cluster.cluster_state.is_some())
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
    print_view(args.format, &report, lint::render_lint)?;
    Ok(report.exit_code())
}

fn fleet(args: FleetArgs) -> anyhow::Result<u8> {
    use crate::heart::views::fleet;
    use crate::sources::fleet_client;
    let query = fleet_client::FleetQuery {
        kubeconfig: args.kubeconfig,
        namespace: args.namespace,
        selector: args.selector,
        port: args.port,
        timeout: args.timeout,
        concurrency: usize::from(args.concurrency),
    };
    let answers = fleet_client::ask_fleet(&query)?;
    if answers.is_empty() {
        anyhow::bail!(
            "no agent pods in namespace {} match {}",
            query.namespace,
            query.selector
        );
    }
    let view = fleet::fleet_view(&answers);
    print_view(args.format, &view, fleet::render_fleet)?;
    Ok(view.exit_code())
}

/// Prints a view on stdout: rendered for a terminal, or as pretty JSON.
fn print_view<T: serde::Serialize>(format: Format, view: &T, render: fn(&T) -> String) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match format {
        Format::Text => stdout.write_all(render(view).as_bytes())?,
        Format::Json => {
            serde_json::to_writer_pretty(&mut stdout, view)?;
            stdout.write_all(b"\n")?;
        }
    }
    stdout.flush()?;
    Ok(())
}

fn snapshot(args: SnapshotArgs) -> anyhow::Result<u8> {
    if let Some(path) = &args.cluster_state
        && !path.is_file()
    {
        anyhow::bail!("the cluster state {} is not a file", path.display());
    }
    // The API's objects go through a file, so the bundle gets them exactly as a
    // --cluster-state file would be copied.
    let listed = match &args.cluster_state {
        Some(_) => None,
        None => list_cluster_to_file(args.kubeconfig.as_deref(), args.node.as_deref(), args.api_timeout)?,
    };
    let cluster_state = args
        .cluster_state
        .clone()
        .or_else(|| listed.as_ref().map(|f| f.path().to_path_buf()));
    let mut node = LiveNode::new(args.live.config(cluster_state));
    let options = SnapshotOptions {
        node: args.node.clone(),
        force: args.force,
    };
    let manifest = write_snapshot(&mut node, &args.out, &options)
        .with_context(|| format!("cannot write a snapshot to {}", args.out.display()))?;
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

#[cfg(test)]
mod tests;
