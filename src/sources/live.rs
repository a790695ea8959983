//! Reading the running node, as a DaemonSet pod with `hostNetwork` sees it:
//! [`LiveNode`] answers each [`Input`] with the dump tool
//! ([`crate::sources::tools`]), the netlink read, the `/proc` file or kube-proxy's HTTP
//! endpoint ([`crate::sources::kube_proxy_http`]) a capture would have copied into it,
//! so a live scan and a snapshot read the node through the same code as an offline
//! scan reads a bundle directory. Cilium's service maps are read in `bpf_maps`.

mod bpf_maps;
mod following;
mod rule_reads;

use crate::decode::proc_process::ArgvEvidence;
use bpf_maps::bpftool_args;
use following::Following;
use std::io::{self, BufRead, Cursor};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::heart::input::{Input, MapForm};
use crate::heart::model::Family;
use crate::heart::model::Lookup;
use crate::heart::outcome::InputState;
use crate::heart::repair::ruleset::iptables_tools;
use crate::sources::bundle::{fetch_file, fetch_required};
use crate::sources::kube_proxy_http::{
    DEFAULT_KUBE_PROXY_HEALTHZ, DEFAULT_KUBE_PROXY_METRICS, HEALTHZ_TIMEOUT, HttpError, http_get,
};
use crate::sources::netlink::nftables::ConstantMaps;
use crate::sources::rule_changes::ChangeJournal;
use crate::sources::source::{Fetched, Read, RuleAnswer, Source};
use crate::sources::tools::{ToolLimits, ToolOutcome, run_tool, stderr_notes};

/// Where and how to read the live node.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    /// Where procfs is mounted (`/proc`; `/host/proc` in a container that mounts the
    /// host's). Sockets are read from `<proc_root>/net/*`, sysctls from
    /// `<proc_root>/sys/net/ipv4/*`, the hostname from `<proc_root>/sys/kernel/hostname`.
    pub proc_root: PathBuf,
    pub limits: ToolLimits,
    /// kube-proxy's health endpoint; None skips the check.
    pub kube_proxy_healthz: Option<SocketAddr>,
    /// kube-proxy's metrics server, asked for `/proxyMode`; None skips it.
    pub kube_proxy_metrics: Option<SocketAddr>,
    /// How long each of kube-proxy's endpoints may take to answer.
    pub healthz_timeout: Duration,
    /// The cluster state (`cluster.json` form), when given.
    pub cluster_state: Option<PathBuf>,
    /// How kube-proxy's nftables tables are read.
    pub nftables_via: NftablesVia,
    /// How iptables-nft's tables are read.
    pub iptables_via: IptablesVia,
    /// Whether a socket owner's command line is read (redacted) or left out.
    pub process_argv: ArgvEvidence,
    /// Where the BPF filesystem Cilium pins its maps in is mounted (`/sys/fs/bpf`):
    /// its service maps are read from `<bpf_root>/tc/globals/`.
    pub bpf_root: PathBuf,
}

/// How the live node's iptables-nft tables are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IptablesVia {
    /// From the kernel over netlink, rendered as `iptables-nft-save` prints them, with
    /// the tool as the fallback for a family holding a rule the reader cannot print
    /// exactly: on a large node the tool costs far more CPU (docs/performance.md).
    #[default]
    Netlink,
    /// With `iptables-nft-save` / `ip6tables-nft-save` only.
    Save,
}

/// How the netlink read of iptables-nft's tables is named in reports.
pub fn iptables_netlink_label(family: Family) -> &'static str {
    match family {
        Family::Ipv4 => "netlink: nf_tables ip (iptables-nft)",
        Family::Ipv6 => "netlink: nf_tables ip6 (ip6tables-nft)",
    }
}

/// How the live node's kube-proxy nftables tables are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NftablesVia {
    /// From the kernel over netlink, with `nft -j` as the fallback when that fails: on
    /// a large node `nft -j` costs far more time and memory (docs/performance.md).
    #[default]
    Netlink,
    /// With `nft -j list table` only.
    Nft,
}

/// How the netlink read is named in reports.
pub const NFT_NETLINK_LABEL: &str = "netlink: nf_tables ip|ip6 kube-proxy";

impl Default for LiveConfig {
    fn default() -> Self {
        LiveConfig {
            proc_root: PathBuf::from("/proc"),
            limits: ToolLimits::default(),
            kube_proxy_healthz: DEFAULT_KUBE_PROXY_HEALTHZ.parse().ok(),
            kube_proxy_metrics: DEFAULT_KUBE_PROXY_METRICS.parse().ok(),
            healthz_timeout: HEALTHZ_TIMEOUT,
            cluster_state: None,
            nftables_via: NftablesVia::default(),
            iptables_via: IptablesVia::default(),
            process_argv: ArgvEvidence::default(),
            bpf_root: PathBuf::from(DEFAULT_BPF_ROOT),
        }
    }
}

/// Where Cilium's BPF filesystem is mounted unless told otherwise (its `--bpf-root`).
pub const DEFAULT_BPF_ROOT: &str = "/sys/fs/bpf";

/// The host's name as the kernel has it, under `proc_root` (what `scan` reports as the
/// node); None when it cannot be read or is empty.
pub fn host_name(proc_root: &std::path::Path) -> Option<String> {
    let name = std::fs::read_to_string(proc_root.join("sys/kernel/hostname")).ok()?;
    Some(name.trim().to_string()).filter(|n| !n.is_empty())
}

/// The running node as a [`Source`]: each input is answered by the tool, netlink read or
/// file that a capture would have copied into a bundle.
///
/// Its rule reads keep state between reads behind locks: a [`Source`] is read from
/// several threads at once, and only the rule reads, one after another, take them.
#[derive(Debug, Default)]
pub struct LiveNode {
    pub config: LiveConfig,
    /// Set by a reader that reads this node again and again (the agent): the constant
    /// anonymous maps of kube-proxy's nftables tables, kept between reads.
    constant_maps: Mutex<Option<ConstantMaps>>,
    /// Set by the agent, which hears the kernel's change notifications: iptables-nft's
    /// tables are kept between reads and only what changed is read again.
    following: Mutex<Option<Following>>,
}

impl Clone for LiveNode {
    fn clone(&self) -> Self {
        LiveNode {
            config: self.config.clone(),
            constant_maps: Mutex::new(lock(&self.constant_maps).clone()),
            following: Mutex::new(lock(&self.following).clone()),
        }
    }
}

/// A lock of the node's read state. A read that panicked left it as the last read
/// finished it, which the next read checks as it checks any kept state.
fn lock<T>(state: &Mutex<T>) -> MutexGuard<'_, T> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The tool that prints each iptables dump of the bundle, and the whole nftables
/// ruleset. Never `-t`: the legacy tools create the table they are asked to print.
fn tool_for(input: Input) -> Option<(&'static str, &'static [&'static str])> {
    Some(match input {
        Input::Iptables {
            backend: Some(backend),
            family,
        } => (iptables_tools(backend.backend(), family)?.0, &[]),
        Input::NftRuleset => ("nft", &["-j", "list", "ruleset"]),
        _ => return None,
    })
}

impl LiveNode {
    pub fn new(config: LiveConfig) -> LiveNode {
        LiveNode {
            config,
            constant_maps: Mutex::new(None),
            following: Mutex::new(None),
        }
    }

    /// Keeps iptables-nft's and kube-proxy's nftables tables between reads and re-reads
    /// only what the notifications `journal` gathers name (see [`read_rules_following`]
    /// and [`read_tables_following`]).
    pub fn following(mut self, journal: ChangeJournal) -> LiveNode {
        *self.following.get_mut().unwrap_or_else(PoisonError::into_inner) = Some(Following {
            journal,
            kept: [None, None],
            nft: None,
            whole_next: [false; 3],
            last_whole: [None, None, None],
        });
        self
    }

    /// The next read of every table is whole, whatever the notifications say: the
    /// safety net against a notification the kernel never sent.
    pub fn read_whole_next(&mut self) {
        if let Some(following) = self.following.get_mut().unwrap_or_else(PoisonError::into_inner) {
            following.whole_next = [true; 3];
        }
    }

    /// Keeps what one read of kube-proxy's nftables tables learnt that the next cannot
    /// find changed (see [`ConstantMaps`]): for a reader of the same node that reads it
    /// again, where it saves most of each read's kernel time; a one-shot scan gains
    /// nothing and would hold the copy.
    pub fn keeping_constant_maps(mut self) -> LiveNode {
        *self
            .constant_maps
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) = Some(ConstantMaps::default());
        self
    }

    /// What `look` sees of the maps kept, when this node keeps them.
    pub fn with_constant_maps<R>(&self, look: impl FnOnce(&ConstantMaps) -> R) -> Option<R> {
        lock(&self.constant_maps).as_ref().map(look)
    }

    fn proc_path(&self, input: Input) -> Option<PathBuf> {
        Some(self.config.proc_root.join(input.proc_path()?))
    }

    fn run<T, F>(&self, program: &str, args: &[&str], consume: F) -> Fetched<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
    {
        let run = run_tool(program, args, self.config.limits, consume);
        let mut notes = Vec::new();
        match &run.outcome {
            ToolOutcome::Absent => notes.push(format!("{program} is not on PATH")),
            ToolOutcome::Failed(why) => notes.push(format!("{} failed: {why}", run.command)),
            ToolOutcome::TimedOut => notes.push(format!(
                "{} did not finish within {} and was killed",
                run.command,
                crate::heart::observed::friendly(self.config.limits.timeout)
            )),
            ToolOutcome::TooLarge => notes.push(format!(
                "{} printed more than {} bytes; reading stopped there",
                run.command, self.config.limits.max_output
            )),
            ToolOutcome::Empty | ToolOutcome::Ok => {}
        }
        notes.extend(stderr_notes(&run.stderr));
        Fetched {
            state: Some(run.outcome.state()),
            value: run.value,
            notes,
            bytes: Some(run.stdout_bytes),
            elapsed: Some(run.elapsed),
        }
    }

    /// kube-proxy's nftables tables, one `nft -j list table` document each, handed to
    /// the consumer one after the other (the JSON parser reads a stream of documents).
    /// Not `nft list ruleset`: that also prints iptables-nft's tables, which on a large
    /// node cost nft far more time and memory than the named tables.
    fn nft_tables<T, F>(&self, consume: F) -> Fetched<T>
    where
        F: FnOnce(&mut dyn BufRead) -> io::Result<T>,
    {
        let start = Instant::now();
        let mut documents = Vec::new();
        let mut notes = Vec::new();
        let mut worst = InputState::Empty;
        for family in ["ip", "ip6"] {
            let run = run_tool(
                "nft",
                &["-j", "list", "table", family, "kube-proxy"],
                self.config.limits,
                |r| {
                    let mut bytes = Vec::new();
                    r.read_to_end(&mut bytes)?;
                    Ok(bytes)
                },
            );
            match (&run.outcome, run.value) {
                (ToolOutcome::Absent, _) => {
                    return Fetched::with_state(InputState::Absent, "nft is not on PATH".to_string());
                }
                // The table does not exist: kube-proxy does not run in nftables mode here.
                (ToolOutcome::Failed(_), _) if run.stderr.contains("No such file or directory") => {}
                (ToolOutcome::Ok, Some(Ok(bytes))) => {
                    documents.extend_from_slice(&bytes);
                    documents.push(b'\n');
                    if worst == InputState::Empty {
                        worst = InputState::Ok;
                    }
                }
                (ToolOutcome::Empty, _) => {}
                (outcome, _) => {
                    worst = outcome.state();
                    notes.push(format!("{} did not complete: {}", run.command, run.stderr.trim()));
                }
            }
        }
        let mut fetched = Fetched {
            state: Some(worst),
            value: None,
            notes,
            bytes: Some(documents.len() as u64),
            elapsed: Some(start.elapsed()),
        };
        if !documents.is_empty() {
            fetched.value = Some(consume(&mut &documents[..]));
        }
        fetched
    }

    /// One of kube-proxy's own HTTP endpoints: what it answered, as a fetch (an answer
    /// other than 200 is `failed`, with its body still handed over).
    fn kube_proxy_get<T, F>(&self, addr: Option<SocketAddr>, path: &str, consume: F) -> Fetched<T>
    where
        F: FnOnce(&mut dyn BufRead) -> io::Result<T>,
    {
        let Some(addr) = addr else {
            return Fetched::not_present();
        };
        let start = Instant::now();
        let mut fetched = Fetched {
            state: Some(InputState::Ok),
            value: None,
            notes: Vec::new(),
            bytes: None,
            elapsed: None,
        };
        match http_get(addr, path, self.config.healthz_timeout) {
            Ok(resp) => {
                if resp.status != 200 {
                    fetched.state = Some(InputState::Failed);
                    fetched.notes.push(format!(
                        "kube-proxy answered HTTP {} {}",
                        resp.status, resp.reason
                    ));
                }
                fetched.bytes = Some(resp.body.len() as u64);
                fetched.value = Some(consume(&mut Cursor::new(resp.body)));
            }
            Err(e) => {
                fetched.state = Some(match e {
                    HttpError::TimedOut { .. } => InputState::TimedOut,
                    _ => InputState::Error,
                });
                fetched.notes.push(e.to_string());
            }
        }
        fetched.elapsed = Some(start.elapsed());
        fetched
    }

    /// `input`'s bytes, from the tool or file a capture would copy.
    fn read_bytes<T, F>(&self, input: Input, consume: F) -> Fetched<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
    {
        if let Some((program, args)) = tool_for(input) {
            return self.run(program, args, consume);
        }
        match input {
            Input::CiliumMap { kind, form } => self.cilium_map(kind, form == MapForm::Info, consume),
            Input::NftJson => self.nft_tables(consume),
            Input::KubeProxyHealthz => {
                self.kube_proxy_get(self.config.kube_proxy_healthz, "/healthz", consume)
            }
            Input::KubeProxyMode => {
                self.kube_proxy_get(self.config.kube_proxy_metrics, "/proxyMode", consume)
            }
            Input::ClusterState => match &self.config.cluster_state {
                Some(path) => fetch_required(path, consume),
                None => Fetched::not_present(),
            },
            Input::Node => fetch_file(&self.config.proc_root.join("sys/kernel/hostname"), consume),
            _ => match self.proc_path(input) {
                Some(path) => {
                    let fetched = fetch_file(&path, consume);
                    if fetched.state.is_none() {
                        // /proc/net/tcp6 on a kernel without IPv6, say.
                        return Fetched::with_state(
                            InputState::Absent,
                            format!("{} does not exist", path.display()),
                        );
                    }
                    fetched
                }
                // iptables-save.txt, nft.txt: forms only a bundle has.
                None => Fetched::not_present(),
            },
        }
    }
}

impl Source for LiveNode {
    /// Reads kube-proxy's nftables tables and iptables-nft's over netlink for a reader
    /// that takes rules (on a large node the tools cost far more, docs/performance.md),
    /// and the tool's text when that fails; every other input from its tool or file.
    fn fetch<T, R, F>(&self, input: Input, consume: F) -> Fetched<Read<T, R>>
    where
        T: Send + 'static,
        R: RuleAnswer,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
    {
        let mut fallback = None;
        if let Some(answer) = R::FROM_RULES
            && let Some(read) = self.read_rules(input)
        {
            match read {
                Ok(rules) => return rules.map(|rules| Read::Rules(answer(rules))),
                Err(why) => {
                    let tool = match input {
                        Input::NftJson => "nft -j".to_string(),
                        _ => self.label(input),
                    };
                    fallback = Some(format!(
                        "reading over netlink failed ({why}); read with {tool} instead"
                    ));
                }
            }
        }
        let mut fetched = self.read_bytes(input, consume);
        if let Some(note) = fallback {
            fetched.notes.insert(0, note);
        }
        fetched.map(Read::Bytes)
    }

    fn lookup(&self) -> Lookup {
        Lookup::Chains
    }

    /// The tools run without `-t`, and netlink reads every table.
    fn dumps_whole(&self) -> bool {
        true
    }

    fn rereads_may_differ(&self) -> bool {
        true
    }

    fn label(&self, input: Input) -> String {
        if let Input::CiliumMap { kind, form } = input {
            return format!(
                "bpftool {}",
                bpftool_args(&self.pin_path(kind), form == MapForm::Info).join(" ")
            );
        }
        if let Some((program, args)) = tool_for(input) {
            return [&[program][..], args].concat().join(" ");
        }
        let name = input.name();
        match input {
            Input::NftJson => "nft -j list table ip|ip6 kube-proxy".to_string(),
            Input::KubeProxyHealthz => match self.config.kube_proxy_healthz {
                Some(addr) => format!("GET http://{addr}/healthz"),
                None => name.to_string(),
            },
            Input::KubeProxyMode => match self.config.kube_proxy_metrics {
                Some(addr) => format!("GET http://{addr}/proxyMode"),
                None => name.to_string(),
            },
            Input::ClusterState => match &self.config.cluster_state {
                Some(path) => path.display().to_string(),
                None => name.to_string(),
            },
            _ => match self.proc_path(input) {
                Some(path) => path.display().to_string(),
                None => name.to_string(),
            },
        }
    }

    fn owners(&self, inodes: &std::collections::HashSet<u64>) -> Option<crate::sources::owners::Owners> {
        Some(crate::sources::owners::find_owners(
            &self.config.proc_root,
            inodes,
            self.config.process_argv,
        ))
    }
}
