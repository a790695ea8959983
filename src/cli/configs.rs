//! The flags, turned into the configs of the scan, the snapshot, repair and the agent.

use std::path::PathBuf;

use super::args::{
    ClusterSourceArgs, Command, ExplainArgs, IptablesViaArg, LiveArgs, NftablesViaArg, RunArgs, ScanArgs,
    SnapshotArgs,
};
use crate::agent::daemon::AgentConfig;
use crate::agent::repair::RepairConfig;
use crate::agent::repair::oneshot::RepairPassConfig;
use crate::scan::cluster_services::ServiceSource;
use crate::scan::explain::ExplainConfig;
use crate::scan::oneshot::{NodeSnapshotConfig, OneshotConfig};
use crate::sources::kube_client::KubeTarget;
use crate::sources::kube_proxy_http::HEALTHZ_TIMEOUT;
use crate::sources::live::{IptablesVia, LiveConfig, NftablesVia};
use crate::sources::tools::ToolLimits;

impl ClusterSourceArgs {
    /// The API server --kubeconfig and --context name.
    pub fn api(&self) -> KubeTarget {
        api_target(&self.kubeconfig, &self.context)
    }

    /// The source named on the command line: a file, else the API server.
    pub fn source(&self) -> ServiceSource {
        match &self.cluster_state {
            Some(path) => ServiceSource::File(path.clone()),
            None => ServiceSource::Api {
                api: self.api(),
                timeout: self.api_timeout,
            },
        }
    }
}

impl NftablesViaArg {
    /// The live reader's way of reading the nftables tables.
    pub fn via(self) -> NftablesVia {
        match self {
            NftablesViaArg::Netlink => NftablesVia::Netlink,
            NftablesViaArg::Nft => NftablesVia::Nft,
        }
    }
}

impl LiveArgs {
    /// How to read this node, with `cluster_state` as its cluster state.
    pub(crate) fn config(&self, cluster_state: Option<PathBuf>) -> LiveConfig {
        LiveConfig {
            proc_root: self.proc_root.clone(),
            limits: ToolLimits {
                timeout: self.tool_timeout,
                max_output: self.tool_max_output,
            },
            kube_proxy_healthz: self.kube_proxy_healthz.0,
            kube_proxy_metrics: self.kube_proxy_metrics.0,
            healthz_timeout: HEALTHZ_TIMEOUT,
            cluster_state,
            nftables_via: self.nftables_via.via(),
            iptables_via: match self.iptables_via {
                IptablesViaArg::Netlink => IptablesVia::Netlink,
                IptablesViaArg::Save => IptablesVia::Save,
            },
            bpf_root: self.bpf_root.clone(),
            process_argv: if self.process_argv {
                crate::decode::proc_process::ArgvEvidence::Redacted
            } else {
                crate::decode::proc_process::ArgvEvidence::Omitted
            },
        }
    }
}

impl ScanArgs {
    /// The one-shot scan's config.
    pub(crate) fn oneshot_config(&self) -> OneshotConfig {
        OneshotConfig {
            bundle: self.from.clone(),
            cluster_state: self.cluster_state.clone(),
            api: api_target(&self.kubeconfig, &self.context),
            api_timeout: self.api_timeout,
            live: self.live.config(None),
            node: self.node.clone(),
            grace: self.grace,
            nodeport_range: self.nodeport_range.clone(),
            acceptances: self.accept.clone(),
        }
    }

    /// `scan --repair`'s config: the scan's, and the repair's.
    pub(crate) fn repair_pass_config(&self) -> RepairPassConfig {
        let r = &self.repair;
        RepairPassConfig {
            scan: self.oneshot_config(),
            repair: RepairConfig {
                max_actions: r.repair_max,
                min_scans: 2,
                min_age: r.repair_confirm,
                nudge_wait: r.repair_nudge_wait,
                grace: self.grace,
                dry_run: r.repair_dry_run,
                limits: self.live.config(None).limits,
            },
            trust_cluster_state: r.trust_cluster_state,
        }
    }
}

impl ExplainArgs {
    /// The explanation's config: a scan's, with no grace (the path is what the kernel
    /// does now) and no acceptances (they change findings, not where connections go).
    pub(crate) fn explain_config(&self) -> ExplainConfig {
        ExplainConfig {
            scan: OneshotConfig {
                bundle: self.from.clone(),
                cluster_state: self.cluster_state.clone(),
                api: api_target(&self.kubeconfig, &self.context),
                api_timeout: self.api_timeout,
                live: self.live.config(None),
                node: self.node.clone(),
                grace: std::time::Duration::ZERO,
                nodeport_range: self.nodeport_range.clone(),
                acceptances: None,
            },
            query: self.port,
            source: self.source,
        }
    }
}

impl SnapshotArgs {
    /// The capture's config.
    pub(crate) fn snapshot_config(&self) -> NodeSnapshotConfig {
        NodeSnapshotConfig {
            out: self.out.clone(),
            force: self.force,
            cluster_state: self.cluster_state.clone(),
            api: api_target(&self.kubeconfig, &self.context),
            api_timeout: self.api_timeout,
            node: self.node.clone(),
            live: self.live.config(None),
        }
    }
}

impl RunArgs {
    /// The agent's config; fails without a node name.
    pub(crate) fn agent_config(self) -> anyhow::Result<AgentConfig> {
        let live = self.live.config(None);
        let live_limits = live.limits;
        // As `scan` does: the host's name, from the /proc it reads the node through.
        let node = match self.node {
            Some(node) => node,
            None => crate::sources::live::host_name(&live.proc_root).ok_or_else(|| {
                anyhow::anyhow!(
                    "no node name: set --node or NODE_NAME (the host's name could not be read from {})",
                    live.proc_root.join("sys/kernel/hostname").display()
                )
            })?,
        };
        Ok(AgentConfig {
            node,
            listen: self.listen,
            findings_listen: self.findings_listen.0,
            interval: self.interval,
            grace: self.grace,
            api: api_target(&self.kubeconfig, &self.context),
            live,
            nodeport_range: self.nodeport_range,
            metrics_max_series: self.metrics_max_series,
            events: self.events,
            node_condition: self.node_condition,
            startup_jitter: self.startup_jitter,
            acceptances: self.accept,
            cluster_state: self.cluster_state,
            repair: self.repair.enabled.then(|| RepairConfig {
                max_actions: self.repair.repair_max,
                min_scans: 2,
                // Two intervals at least: a change kube-proxy is still applying
                // is not drift.
                min_age: self.repair.repair_min_age.max(self.interval * 2),
                nudge_wait: self.repair.repair_nudge_wait,
                grace: self.grace,
                dry_run: self.repair.repair_dry_run,
                limits: live_limits,
            }),
        })
    }
}

/// The API server a command's --kubeconfig and --context name.
pub(crate) fn api_target(kubeconfig: &Option<PathBuf>, context: &Option<String>) -> KubeTarget {
    KubeTarget {
        kubeconfig: kubeconfig.clone(),
        context: context.clone(),
    }
}

impl Command {
    /// The files the command line names that `-` may stand for (standard input), with
    /// their flags.
    pub(crate) fn file_inputs(&mut self) -> Vec<(&'static str, &mut PathBuf)> {
        let mut inputs: Vec<(&'static str, Option<&mut PathBuf>)> = Vec::new();
        match self {
            Command::Scan(a) => {
                inputs.push(("--cluster-state", a.cluster_state.as_mut()));
                inputs.push(("--accept", a.accept.as_mut()));
                inputs.push(("--kubeconfig", a.kubeconfig.as_mut()));
            }
            Command::Explain(a) => {
                inputs.push(("--cluster-state", a.cluster_state.as_mut()));
                inputs.push(("--kubeconfig", a.kubeconfig.as_mut()));
            }
            Command::Snapshot(a) => {
                inputs.push(("--cluster-state", a.cluster_state.as_mut()));
                inputs.push(("--kubeconfig", a.kubeconfig.as_mut()));
            }
            Command::Run(a) => {
                inputs.push(("--cluster-state", a.cluster_state.as_mut()));
                inputs.push(("--accept", a.accept.as_mut()));
                inputs.push(("--kubeconfig", a.kubeconfig.as_mut()));
            }
            Command::Ports(a) => {
                inputs.push(("--cluster-state", a.cluster.cluster_state.as_mut()));
                inputs.push(("--kubeconfig", a.cluster.kubeconfig.as_mut()));
            }
            Command::Lint(a) => {
                inputs.push(("--cluster-state", a.cluster.cluster_state.as_mut()));
                inputs.push(("--kubeconfig", a.cluster.kubeconfig.as_mut()));
            }
            Command::Fleet(a) => inputs.push(("--kubeconfig", a.kubeconfig.as_mut())),
            Command::Completions { .. } | Command::Man { .. } | Command::Dev(_) => {}
        }
        inputs
            .into_iter()
            .filter_map(|(flag, path)| path.map(|p| (flag, p)))
            .collect()
    }

    /// A kubeconfig or context the command line names for a scan is checked first: one
    /// that cannot be used fails the command (exit 2) rather than giving a scan without
    /// cluster state (exit 3) that hides the typo.
    pub(crate) fn check_named_api(&self) -> anyhow::Result<()> {
        let (kubeconfig, context) = match self {
            Command::Scan(a) => (&a.kubeconfig, &a.context),
            Command::Explain(a) => (&a.kubeconfig, &a.context),
            Command::Snapshot(a) => (&a.kubeconfig, &a.context),
            _ => return Ok(()),
        };
        api_target(kubeconfig, context).check_named()?;
        Ok(())
    }
}
