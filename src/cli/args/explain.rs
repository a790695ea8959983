//! `portdrift explain`'s flags.

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::super::parse::{parse_duration, parse_port_range};
use super::{LiveArgs, OutputArgs};

/// `portdrift explain PROTO/PORT`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The port: `tcp/30080`, or with the address connected to, `tcp/10.0.0.5:30080`
    /// (`tcp/[fd00::5]:30080`). Without one, any address of the node.
    #[arg(value_name = "PROTO/PORT")]
    pub port: crate::heart::explain::model::PortQuery,

    /// The client's address (default: 203.0.113.10, or 2001:db8::10 for IPv6: a client
    /// outside the cluster).
    #[arg(long, value_name = "IP")]
    pub source: Option<std::net::IpAddr>,

    /// Explain a snapshot bundle (a directory captured from a node) instead of this node.
    #[arg(long, value_name = "DIR", value_hint = clap::ValueHint::DirPath, conflicts_with_all = ["proc_root", "bpf_root", "tool_timeout", "tool_max_output", "kube_proxy_healthz", "kube_proxy_metrics"])]
    pub from: Option<PathBuf>,

    /// The cluster state, as `kubectl get services,endpointslices -A -o json` prints it
    /// (with --from: in place of the bundle's cluster.json).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub cluster_state: Option<PathBuf>,

    /// Read the cluster state from the API server with this kubeconfig (default as
    /// for `scan`).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath, conflicts_with_all = ["cluster_state", "from"])]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig's context to use instead of its current-context.
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

    /// The cluster's NodePort range (the API server's --service-node-port-range).
    #[arg(long, value_name = "FIRST-LAST", default_value = "30000-32767", value_parser = parse_port_range)]
    pub nodeport_range: RangeInclusive<u16>,
}
