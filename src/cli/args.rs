//! The command line's definitions: every command, flag, help text and default.

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum, ValueHint};

use super::parse::{
    HealthzAddr, parse_duration, parse_healthz_addr, parse_port_range, parse_size, parse_timeout,
};
use crate::sources::kube_proxy_http::{DEFAULT_KUBE_PROXY_HEALTHZ, DEFAULT_KUBE_PROXY_METRICS};

/// Finds where a node's NodePort plumbing has drifted from what the cluster says.
#[derive(Debug, Parser)]
#[command(name = "portdrift", version = crate::BUILD_VERSION, about)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

mod common;
mod explain;

pub use common::{ColorWhen, GlobalArgs, LogFormat, LogLevelParser, Output, OutputArgs};
pub use explain::ExplainArgs;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compare a node's NodePort rules and listeners with the cluster state, once:
    /// this node's (as a hostNetwork DaemonSet pod sees it), or a bundle's (--from).
    ///
    /// Exit status: 0 checked and clean; 1 a warning or critical finding; 2 could not
    /// scan; 3 nothing found but the check was incomplete (the report and the JSON's
    /// `coverage` say what was not checked).
    #[command(
        after_help = "Exit status: 0 checked and clean, 1 findings, 2 could not scan, 3 nothing found but the check was incomplete."
    )]
    Scan(ScanArgs),
    /// Where a new connection to a NodePort goes on this node (or a bundle's), rule by
    /// rule: each hook and chain it passes, each rule it matches or skips and why, the
    /// endpoints it reaches and in what shares, beside what the API says.
    ///
    /// Exit status: 0 the result matches the API; 1 it differs; 2 could not explain;
    /// 3 a rule on the path could not be checked.
    #[command(
        after_help = "Exit status: 0 as the API says, 1 differs from the API, 2 could not explain, 3 not every rule on the path could be checked."
    )]
    Explain(ExplainArgs),
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
    /// Show the fleet's drift: every Node's NodePortDrift condition (one list), then
    /// the findings of the agents on drifted and unknown nodes through the API
    /// server's pod proxy (or from Prometheus with --prometheus), each finding with the
    /// nodes that have it. Exit 1 when some node drifted, a node could not be checked
    /// or an agent did not answer; 2 when nothing could be listed.
    Fleet(FleetArgs),
    /// Print a shell's completion script for portdrift (bash: source it, or put it in
    /// /usr/share/bash-completion/completions/portdrift).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write portdrift's man pages (portdrift.1 and one per command) into a directory.
    Man {
        /// Where to write them (created if missing), e.g. /usr/local/share/man/man1.
        #[arg(value_hint = ValueHint::DirPath)]
        dir: PathBuf,
    },
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
        #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
        reread_after: Option<PathBuf>,
    },
    /// Prints one family's iptables-nft tables as the netlink reader renders them, as
    /// `iptables-nft-save` prints them less its timestamped comments.
    IptablesSave {
        #[arg(long, default_value = "ipv4", value_parser = ["ipv4", "ipv6"])]
        family: String,
    },
    /// Prints docs/cli.md: every command's --help.
    CliReference,
    /// Prints docs/metrics.md: every metric the agent serves.
    MetricsReference,
    /// Writes docs/schema/: the JSON Schema of every document portdrift writes, one file
    /// per kind, generated from the types that write them.
    Schema {
        /// Where to write them (created if missing): docs/schema.
        dir: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// Reach the API server with this kubeconfig (default: KUBECONFIG, ~/.kube/config,
    /// then the in-cluster service account).
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig's context to use instead of its current-context (as kubectl's
    /// --context; without --kubeconfig, of KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

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

    /// How long one agent may take to answer (and each list, or Prometheus query).
    /// (`--timeout`, its old name, still works.)
    #[arg(long, alias = "timeout", value_name = "DUR", default_value = "10s", value_parser = parse_timeout)]
    pub api_timeout: Duration,

    /// How many agents are asked at once.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,

    /// Ask every agent, not only those on nodes whose condition says drift or is
    /// unknown.
    #[arg(long)]
    pub all: bool,

    /// Read the findings from Prometheus's HTTP API at this URL instead of the API
    /// server (portdrift_findings_by_severity, portdrift_finding, up and coverage by
    /// the `node` label, else `instance`).
    #[arg(long, value_name = "URL", conflicts_with_all = ["all", "kubeconfig", "context"])]
    pub prometheus: Option<String>,

    /// With --prometheus: the `job` label of the agents' scrape job.
    #[arg(
        long,
        value_name = "JOB",
        default_value = "portdrift",
        requires = "prometheus"
    )]
    pub prometheus_job: String,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Where a cluster-wide view reads the cluster's Services.
#[derive(Debug, Args)]
pub struct ClusterSourceArgs {
    /// Read the Services from the API server with this kubeconfig (default: KUBECONFIG,
    /// ~/.kube/config, then the in-cluster service account).
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath, conflicts_with = "cluster_state")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig's context to use instead of its current-context (as kubectl's
    /// --context; without --kubeconfig, of KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "NAME", conflicts_with = "cluster_state")]
    pub context: Option<String>,

    /// Read the Services from a file, as `kubectl get services -A -o json` prints it
    /// (a bundle's cluster.json does too).
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub cluster_state: Option<PathBuf>,

    /// How long listing the Services from the API may take.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_timeout)]
    pub api_timeout: Duration,
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

    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct PortsArgs {
    #[command(flatten)]
    pub cluster: ClusterSourceArgs,

    #[command(flatten)]
    pub output: OutputArgs,

    /// The cluster's NodePort range (the API server's --service-node-port-range).
    #[arg(long, value_name = "FIRST-LAST", default_value = "30000-32767", value_parser = parse_port_range)]
    pub nodeport_range: RangeInclusive<u16>,

    /// How many free ports to suggest: the lowest free ones of the API server's static
    /// band first (see docs/cluster-views.md).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub next: usize,
}

/// `run --startup-jitter`'s default. At 5,000 nodes a DaemonSet created at once starts
/// about 170 agents a second over it instead of all in the same second, each listing
/// every Service and EndpointSlice; a rolling update (10 % of the nodes at a time) waits
/// for its slowest pod's delay, at most 30 s a step. See docs/operate.md, How it reads
/// the API.
const STARTUP_JITTER: &str = "30s";

/// `--repair-nudge-wait`'s default, for `scan` and `run` alike: kube-proxy checks its
/// canary chain every sync period (30 s by default) and then resyncs, so half a minute
/// could end the wait just before it cleans up.
const REPAIR_NUDGE_WAIT: &str = "60s";

#[derive(Debug, Args)]
pub struct RunArgs {
    /// This node's name (the endpoints it counts as local; default: this host's name, as
    /// the kernel has it).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node: Option<String>,

    /// Where to serve /metrics, /healthz and /readyz: counts and states, which name no
    /// pod, address or process.
    #[arg(long, value_name = "ADDR:PORT", default_value = crate::agent::http::DEFAULT_LISTEN)]
    pub listen: SocketAddr,

    /// Where to serve /findings (which names pods' addresses, rules and processes) with
    /// the other endpoints: the node's loopback by default (reach it with `kubectl
    /// port-forward`, or kube-rbac-proxy), or `off`. The address of --listen serves
    /// everything on one listener (see SECURITY.md).
    #[arg(long, value_name = "ADDR:PORT", default_value = crate::agent::http::DEFAULT_FINDINGS_LISTEN, value_parser = parse_healthz_addr)]
    pub findings_listen: HealthzAddr,

    /// Time between scans.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_timeout)]
    pub interval: Duration,

    /// How long kube-proxy may take to apply a change (see `scan --grace`). `0` turns it off.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_duration)]
    pub grace: Duration,

    /// Watch the API server with this kubeconfig (default: KUBECONFIG, ~/.kube/config,
    /// then the in-cluster service account).
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig's context to use instead of its current-context (as kubectl's
    /// --context; without --kubeconfig, of KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// Take the desired state from this file (as `kubectl get
    /// services,endpointslices,nodes -A -o json` prints it; a bundle's cluster.json)
    /// instead of the API server, read again when it changes: to try the agent without
    /// a cluster, and on air-gapped nodes. No Events, Node condition or repair: they
    /// need the API.
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath, conflicts_with_all = ["kubeconfig", "context", "events", "node_condition", "enabled"])]
    pub cluster_state: Option<PathBuf>,

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

    /// Wait a random delay up to this before the first API list, so that agents
    /// started together do not list together. `0s` turns it off.
    #[arg(long, value_name = "DUR", default_value = STARTUP_JITTER, value_parser = parse_duration)]
    pub startup_jitter: Duration,

    /// Findings accepted as exceptions (the JSON of `scan --accept`; mount it from a
    /// ConfigMap): read again when it changes, and while it is bad the last good one
    /// still applies. Services' own `portdrift.io/accept` annotations apply without it.
    #[arg(long, env = "PORTDRIFT_ACCEPT", value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub accept: Option<PathBuf>,

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
    /// (see docs/repair.md).
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
    #[arg(long, value_name = "DUR", default_value = REPAIR_NUDGE_WAIT, value_parser = parse_duration, requires = "enabled")]
    pub repair_nudge_wait: Duration,
}

#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Scan a snapshot bundle (a directory captured from a node) instead of this node.
    #[arg(long, value_name = "DIR", value_hint = ValueHint::DirPath, conflicts_with_all = ["proc_root", "bpf_root", "tool_timeout", "tool_max_output", "kube_proxy_healthz", "kube_proxy_metrics"])]
    pub from: Option<PathBuf>,

    /// The cluster state, as `kubectl get services,endpointslices -A -o json` prints it
    /// (with --from: in place of the bundle's cluster.json). Without any, only the
    /// checks that need no cluster state run.
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub cluster_state: Option<PathBuf>,

    /// Read the cluster state from the API server with this kubeconfig. Without it (and
    /// without --cluster-state) a live scan tries KUBECONFIG, ~/.kube/config and the
    /// in-cluster service account.
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath, conflicts_with_all = ["cluster_state", "from"])]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig's context to use instead of its current-context (as kubectl's
    /// --context; without --kubeconfig, of KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["cluster_state", "from"])]
    pub context: Option<String>,

    /// How long listing the cluster state from the API may take.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_duration)]
    pub api_timeout: Duration,

    #[command(flatten)]
    pub live: LiveArgs,

    #[command(flatten)]
    pub output: OutputArgs,

    /// The node whose endpoints count as local (default: the bundle's `node` file, or
    /// this host's name).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node: Option<String>,

    /// Findings accepted as exceptions (JSON: `{"accept": [{"kind": "squatter", "port":
    /// "tcp/30080", "reason": "…"}]}`): shown as accepted, never counted in the exit
    /// status; each entry needs a reason and may expire.
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub accept: Option<PathBuf>,

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
    /// again, and act only on findings present both times (see docs/repair.md).
    #[arg(long = "repair", conflicts_with = "from")]
    pub enabled: bool,

    /// With --repair: print the exact commands it would run, and change nothing.
    /// (`--dry-run`, its old name, still works.)
    #[arg(long, alias = "dry-run", requires = "enabled")]
    pub repair_dry_run: bool,

    /// The most repair actions in one pass.
    #[arg(long, value_name = "N", default_value_t = crate::agent::repair::DEFAULT_MAX_ACTIONS, requires = "enabled")]
    pub repair_max: usize,

    /// The time between the two scans a finding must appear in before it is repaired.
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = parse_duration, requires = "enabled")]
    pub repair_confirm: Duration,

    /// How long a live kube-proxy, nudged to resync (its canary chain deleted), gets to
    /// clean up its own rules before the drift is removed directly.
    #[arg(long, value_name = "DUR", default_value = REPAIR_NUDGE_WAIT, value_parser = parse_duration, requires = "enabled")]
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
    #[arg(long, value_name = "DIR", value_hint = ValueHint::DirPath, default_value = "/proc")]
    pub proc_root: PathBuf,

    /// Where the BPF filesystem is mounted: Cilium's service maps are read from
    /// DIR/tc/globals (with `bpftool -j`, read only). A node without them is read as
    /// before.
    #[arg(long, value_name = "DIR", value_hint = ValueHint::DirPath, default_value = crate::sources::live::DEFAULT_BPF_ROOT)]
    pub bpf_root: PathBuf,

    /// Show a socket owner's command line in findings, with the values of
    /// secret-looking arguments (token, password, secret, key, credential, auth)
    /// redacted. Off: processes are named by comm, exe, pid, uid, container and pod.
    #[arg(long)]
    pub process_argv: bool,

    /// How long each dump tool (iptables-*-save, nft) may run before it is killed and
    /// reported as timed out: `10s`, `500ms`, `2m`.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_timeout)]
    pub tool_timeout: Duration,

    /// The most each dump tool may print (bytes; K, M, G suffixes are binary units).
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse_size)]
    pub tool_max_output: u64,

    /// kube-proxy's health endpoint (its --healthz-bind-address), or `off`.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_KUBE_PROXY_HEALTHZ, value_parser = parse_healthz_addr)]
    pub kube_proxy_healthz: HealthzAddr,

    /// kube-proxy's metrics server (its --metrics-bind-address), asked for
    /// `/proxyMode`, or `off`. Without an answer the rules alone tell the mode.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_KUBE_PROXY_METRICS, value_parser = parse_healthz_addr)]
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

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// The bundle directory to write (created if needed).
    #[arg(long, value_name = "DIR", value_hint = ValueHint::DirPath)]
    pub out: PathBuf,

    /// Replace the bundle files of a non-empty DIR.
    #[arg(long)]
    pub force: bool,

    /// A cluster state file to copy into the bundle as cluster.json. Without it, the
    /// Services, EndpointSlices and this Node are listed from the API server when one
    /// is configured (--kubeconfig, KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub cluster_state: Option<PathBuf>,

    /// Read the cluster state from the API server with this kubeconfig.
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath, conflicts_with = "cluster_state")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig's context to use instead of its current-context (as kubectl's
    /// --context; without --kubeconfig, of KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "NAME", conflicts_with = "cluster_state")]
    pub context: Option<String>,

    /// How long listing the cluster state from the API may take.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_duration)]
    pub api_timeout: Duration,

    /// The node's name for the bundle's `node` file (default: this host's name).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node: Option<String>,

    #[command(flatten)]
    pub live: LiveArgs,
}
