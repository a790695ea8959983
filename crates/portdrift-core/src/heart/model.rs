//! The shared vocabulary of desired and observed state.
//!
//! Every backend (iptables-nft, iptables-legacy, nftables) is parsed into the same
//! [`NodePortRule`] model, so the detector never needs to know where a rule came from
//! beyond the [`Backend`] it carries for reporting and repair.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The transport protocols a Service port may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// The lowercase name kube-proxy uses in chain hashes and rules.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }

    /// Parses `tcp`/`TCP`/`6`-style protocol names as iptables and the API write them.
    pub fn parse(s: &str) -> Option<Protocol> {
        if s.eq_ignore_ascii_case("tcp") || s == "6" {
            Some(Protocol::Tcp)
        } else if s.eq_ignore_ascii_case("udp") || s == "17" {
            Some(Protocol::Udp)
        } else if s.eq_ignore_ascii_case("sctp") || s == "132" {
            Some(Protocol::Sctp)
        } else {
            None
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An IP family. kube-proxy runs one proxier per family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Ipv4,
    Ipv6,
}

impl Family {
    pub fn of(ip: &IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::Ipv4,
            IpAddr::V6(_) => Family::Ipv6,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a rule lives in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum Backend {
    /// iptables rules stored in nf_tables (`iptables-nft`).
    #[serde(rename = "iptables-nft")]
    IptablesNft,
    /// iptables rules in the legacy x_tables backend (`iptables-legacy`).
    #[serde(rename = "iptables-legacy")]
    IptablesLegacy,
    /// kube-proxy's nftables mode (`table ip kube-proxy`).
    #[serde(rename = "nftables")]
    Nftables,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::IptablesNft => "iptables-nft",
            Backend::IptablesLegacy => "iptables-legacy",
            Backend::Nftables => "nftables",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Service port as kube-proxy names it: `namespace/name` plus the port's name
/// (empty for an unnamed port).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServicePortRef {
    pub namespace: String,
    pub name: String,
    pub port_name: String,
}

impl ServicePortRef {
    /// `namespace/name`, the form findings report.
    pub fn service(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// kube-proxy's `svcPortName`: `ns/name:port`, or `ns/name` for an unnamed port.
    pub fn kube_proxy_name(&self) -> String {
        if self.port_name.is_empty() {
            format!("{}/{}", self.namespace, self.name)
        } else {
            format!("{}/{}:{}", self.namespace, self.name, self.port_name)
        }
    }

    /// Parses the `ns/name:port` or `ns/name` form found in kube-proxy's comments.
    pub fn parse(s: &str) -> Option<ServicePortRef> {
        let (namespace, rest) = s.split_once('/')?;
        let (name, port_name) = match rest.split_once(':') {
            Some((n, p)) => (n, p),
            None => (rest, ""),
        };
        let valid = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        };
        if !valid(namespace) || !valid(name) {
            return None;
        }
        if !port_name.is_empty() && !valid(port_name) {
            return None;
        }
        Some(ServicePortRef {
            namespace: namespace.to_string(),
            name: name.to_string(),
            port_name: port_name.to_string(),
        })
    }
}

impl fmt::Display for ServicePortRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.kube_proxy_name())
    }
}

/// The identity needed to find (and, for repair, delete) exactly one rule again.
///
/// Strings are shared (`Arc<str>`): a large dump holds a great many rules, and a
/// rule's identity is cloned into every finding and plan that names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RuleIdentity {
    /// An iptables rule: the same line with `-A` turned into `-D` deletes it in `table`.
    Iptables {
        table: Arc<str>,
        chain: Arc<str>,
        /// The rule line exactly as the dump printed it (`-A <chain> <spec>`).
        rule: Arc<str>,
    },
    /// An nftables rule by handle, or a map element by key.
    Nftables {
        table: Arc<str>,
        /// The chain holding the rule, or the map holding the element.
        container: Arc<str>,
        /// The rule handle; None for a map element.
        handle: Option<u64>,
        /// The map element's key (`tcp . 30080`) when this is an element.
        element: Option<Arc<str>>,
    },
}

impl RuleIdentity {
    /// For an iptables rule, its arguments after `-A <chain>`: what `-C`/`-D` take.
    pub fn iptables_spec(&self) -> Option<&str> {
        match self {
            RuleIdentity::Iptables { chain, rule, .. } => {
                let rest = rule.strip_prefix("-A")?.trim_start();
                Some(rest.strip_prefix(&**chain)?.trim_start())
            }
            RuleIdentity::Nftables { .. } => None,
        }
    }
}

/// A rule as its backend prints it, with where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleText {
    /// The rule as printed (`-A KUBE-NODEPORTS ...`, or nft's text form).
    pub text: Arc<str>,
    /// 1-based line in the dump it came from; 0 when the source has no lines.
    pub line: u32,
    /// 1-based number of an iptables rule in its chain, as `iptables -L --line-numbers`
    /// counts; 0 when not known (nftables, a listing that is not a save).
    pub position: u32,
    /// The nf_tables handle of an iptables-nft rule read over netlink (as `nft -a`
    /// prints it); an nftables rule's handle is in its [`RuleIdentity`].
    pub handle: Option<std::num::NonZeroU64>,
}

impl RuleText {
    /// A rule found at `line`, with no number in its chain or handle known.
    pub fn at_line(text: impl Into<Arc<str>>, line: u32) -> RuleText {
        RuleText {
            text: text.into(),
            line,
            position: 0,
            handle: None,
        }
    }
}

/// A DNAT found on a NodePort's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnatTarget {
    pub addr: SocketAddr,
    /// The chain the DNAT sits in (`KUBE-SEP-...`, `endpoint-...`, or `KUBE-NODEPORTS`).
    pub chain: Arc<str>,
    pub rule: RuleText,
    pub identity: RuleIdentity,
}

/// How a NodePort rule matches its destination address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DestMatch {
    /// Any local address (the usual `-m addrtype --dst-type LOCAL` path).
    Any,
    /// kube-proxy's localhost-NodePort twin (`-d 127.0.0.0/8 ... nfacct`).
    Localhost,
    /// A specific address or prefix (`-d 10.0.0.5/32`), as printed.
    Addr(String),
}

/// What a NodePort dispatch rule does with matching traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Forwards to endpoints (through chains or a direct DNAT).
    Forward,
    /// kube-proxy's filter-table REJECT for a Service without endpoints.
    Reject,
    /// kube-proxy's filter-table DROP for a Local-policy Service without local endpoints.
    Drop,
    /// kube-proxy's filter-table ACCEPT for a health-check node port.
    HealthCheckAccept,
}

/// One NodePort dispatch rule, in any backend: the unit the detector reasons about.
#[derive(Debug, Clone)]
pub struct NodePortRule {
    pub backend: Backend,
    pub family: Family,
    pub protocol: Protocol,
    pub port: u16,
    pub dest: DestMatch,
    pub verdict: Verdict,
    /// The chains traversed from the dispatch rule to the DNATs, first hop first
    /// (e.g. `KUBE-EXT-X`, `KUBE-SVC-X`). Shared by rules that enter the same chain
    /// (kube-proxy's localhost twin and the main rule).
    pub path: Arc<[Arc<str>]>,
    /// Every DNAT reachable from this rule (shared like `path`).
    pub targets: Arc<[DnatTarget]>,
    /// The DNAT addresses reachable without entering the Service's cluster-wide chain
    /// (`KUBE-SVC-*`, nftables `service-*`). With externalTrafficPolicy Local kube-proxy
    /// sends only pod and host traffic there; a client outside the node reaches these
    /// alone (`KUBE-SVL-*` / `local-*`, or the old `KUBE-XLB-*`'s own endpoint jumps).
    pub external_targets: Arc<[SocketAddr]>,
    /// The Service port named by kube-proxy's comment or the nftables chain name. For
    /// an iptables rule that jumps to a hashed kube-proxy chain the hash names the
    /// Service, and the comment is left undecoded (see `undecoded_comment`).
    pub comment_service: Option<ServicePortRef>,
    /// Where in `rule.text` the comment's Service port is written, when the parser left
    /// it undecoded: decoding it for every rule would cost a healthy node allocations
    /// no report reads ([`NodePortRule::undecoded_comment_service`] decodes it).
    pub undecoded_comment: Option<Range<u32>>,
    /// The service hash embedded in the first-hop chain name (`KUBE-EXT-<hash>`), if any.
    pub chain_hash: Option<Arc<str>>,
    /// A chain on the path that the dump jumps to but never defines.
    pub dangling: Option<String>,
    pub rule: RuleText,
    pub identity: RuleIdentity,
}

impl NodePortRule {
    /// The Service port named by the comment the parser left undecoded, if any.
    pub fn undecoded_comment_service(&self) -> Option<ServicePortRef> {
        let at = self.undecoded_comment.as_ref()?;
        let word = self.rule.text.get(at.start as usize..at.end as usize)?;
        ServicePortRef::parse(word)
    }
}

/// A hostPort mapping written by the CNI portmap plugin (`CNI-HOSTPORT-DNAT`): traffic
/// to this node's `port` goes to a pod, competing with any Service on the same nodePort.
#[derive(Debug, Clone)]
pub struct HostPortRule {
    pub protocol: Protocol,
    pub port: u16,
    /// Where the mapping sends traffic (the pod's `ip:port`).
    pub targets: Vec<SocketAddr>,
    /// The `CNI-HOSTPORT-DNAT` rule that matches the port.
    pub rule: RuleText,
}

impl HostPortRule {
    /// The chain the rule is in (`CNI-HOSTPORT-DNAT`), as its line names it.
    pub fn chain(&self) -> &str {
        self.rule
            .text
            .strip_prefix("-A ")
            .and_then(|rest| rest.split_ascii_whitespace().next())
            .unwrap_or("")
    }
}

/// A line a parser could not understand. It is reported, never dropped silently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unparsed {
    pub line: u32,
    /// The line, cut to a readable length.
    pub text: String,
    pub reason: String,
}

/// A kube-proxy per-service chain that nothing jumps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanChain {
    pub backend: Backend,
    pub family: Family,
    pub table: String,
    pub chain: String,
    pub line: u32,
    /// The DNAT an endpoint chain still holds: with the chain name's hash it tells
    /// which Service port the chain belonged to.
    pub dnat: Option<SocketAddr>,
}

/// How a source's rules are looked up by whoever reads a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lookup {
    /// By line of the file the rules were read from.
    #[default]
    Lines,
    /// On the live node, by table, chain, number and handle.
    Chains,
}

/// Everything read from one dump of one backend and family: a tool's text, a bundle's file
/// or a read over netlink (not "source": that word is the `sources` layer and its `Source`).
#[derive(Debug, Clone)]
pub struct RuleDump {
    /// The file or command it came from, for messages.
    pub origin: String,
    /// How findings cite its rules: by line, or by chain on the live node.
    pub lookup: Lookup,
    pub backend: Backend,
    pub family: Family,
    pub nodeports: Vec<NodePortRule>,
    /// CNI hostPort mappings (iptables only).
    pub hostports: Vec<HostPortRule>,
    pub orphans: Vec<OrphanChain>,
    pub unparsed: Vec<Unparsed>,
    /// True when the source holds kube-proxy's structure (KUBE-SERVICES/KUBE-NODEPORTS
    /// or the kube-proxy nftables table).
    pub has_kube_proxy: bool,
    /// kube-proxy's canary chain is present.
    pub has_canary: bool,
    /// Rules in kube-proxy's chains (KUBE-*), a measure of how much kube-proxy wrote.
    pub kube_rule_count: usize,
    /// The dump ended cleanly; a truncated dump is still reported but never trusted
    /// for "missing" decisions or repair.
    pub complete: bool,
    /// What the dump itself said about its state (the tool's warnings, a missing
    /// COMMIT), for the report.
    pub notes: Vec<String>,
    /// What this source shows of the node's Service proxy, for deciding its mode.
    pub signals: ProxySignals,
    /// What the source cannot show although what it holds was read (a table the dump
    /// leaves out), as sentences: each makes the node's check incomplete.
    pub gaps: Vec<String>,
    /// Rules in kube-proxy's chains that kube-proxy never writes.
    pub malformed: Vec<MalformedRule>,
    /// The source shows the table where NodePort forwarding lives (iptables' nat, or
    /// the node has none): only then can a forwarding rule be concluded missing.
    pub forwarding_shown: bool,
    /// The rules kube-proxy writes to lead packets to its NodePort rules that the
    /// source lacks: without them those rules are never reached.
    pub missing_entry: Vec<EntryJump>,
    /// Why the file is not a capture of rules at all (a tool's error message, a save
    /// mixed with `iptables -L` listings), in one sentence: such a source is refused
    /// whole rather than read as lines not understood.
    pub bad_capture: Option<String>,
}

/// A rule on the way in to kube-proxy's NodePort rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryJump {
    /// The rule, as the report names it (`nat KUBE-SERVICES -j KUBE-NODEPORTS`).
    pub rule: &'static str,
    /// Every packet passes it (rather than only those from outside the node).
    pub every_packet: bool,
}

/// The Service proxy that programs a node's NodePorts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProxyMode {
    /// kube-proxy's iptables mode (either iptables backend).
    Iptables,
    /// kube-proxy's nftables mode (`table ip kube-proxy`).
    Nftables,
    /// kube-proxy's IPVS mode: virtual servers and ipsets, which portdrift does not read.
    Ipvs,
    /// A kube-proxy replacement (Cilium, Calico's eBPF mode, kube-router) handles Services.
    Replaced,
    /// No Service proxy rules at all.
    None,
}

impl ProxyMode {
    pub const ALL: [ProxyMode; 5] = [
        ProxyMode::Iptables,
        ProxyMode::Nftables,
        ProxyMode::Ipvs,
        ProxyMode::Replaced,
        ProxyMode::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProxyMode::Iptables => "iptables",
            ProxyMode::Nftables => "nftables",
            ProxyMode::Ipvs => "ipvs",
            ProxyMode::Replaced => "replaced",
            ProxyMode::None => "none",
        }
    }

    /// The modes whose rules portdrift reads and judges.
    pub fn is_read(self) -> bool {
        matches!(self, ProxyMode::Iptables | ProxyMode::Nftables)
    }
}

impl fmt::Display for ProxyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one rule source shows of the Service proxies that wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxySignals {
    /// kube-proxy's iptables-mode NodePort chains: a nat `KUBE-NODEPORTS` chain, or its
    /// hashed per-service chains (`KUBE-SVC-*`, `KUBE-EXT-*`, `KUBE-SEP-*`, ...).
    pub iptables_mode: bool,
    /// The mode whose dispatch nat `KUBE-SERVICES` holds now: both the iptables and the
    /// IPVS proxier rewrite that chain on every sync, so it names the one that wrote last.
    pub services_dispatch: Option<ProxyMode>,
    /// Traces of IPVS mode (`chain KUBE-NODE-PORT`, `ipset KUBE-NODE-PORT-TCP`).
    pub ipvs: Vec<String>,
    /// A kube-proxy replacement's own chains: its name and one chain seen.
    pub replacement: Option<(&'static str, String)>,
    /// One of kube-proxy's chains (not kubelet's), whatever mode wrote it.
    pub kube_proxy_chain: Option<String>,
    /// The dump shows the filter table, where kube-proxy's iptables and IPVS modes both
    /// always create chains of their own (`KUBE-FORWARD` among them): a whole dump that
    /// shows it without them shows kube-proxy absent, even without the nat table.
    pub filter_shown: bool,
}

/// A rule in kube-proxy's chains that kube-proxy never writes: what a mismatched
/// iptables binary, or a hand edit, leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedRule {
    /// `nat`, `filter`, or the nftables table.
    pub table: String,
    pub chain: String,
    pub rule: RuleText,
    /// What is wrong with it, as a phrase (`DNATs to 0.0.0.0:0`).
    pub problem: String,
}

impl RuleDump {
    /// An empty source: nothing read yet.
    /// Whether the source shows any of kube-proxy's chains, in whatever mode: the one
    /// reading both the source's note and the proxy-mode line rest on, so that neither
    /// says "no kube-proxy chains" while the other cites one.
    pub fn shows_kube_proxy(&self) -> bool {
        self.has_kube_proxy
            || self.signals.iptables_mode
            || self.signals.kube_proxy_chain.is_some()
            || !self.signals.ipvs.is_empty()
    }

    pub fn empty(origin: impl Into<String>, backend: Backend, family: Family) -> RuleDump {
        RuleDump {
            origin: origin.into(),
            lookup: Lookup::Lines,
            backend,
            family,
            nodeports: Vec::new(),
            hostports: Vec::new(),
            orphans: Vec::new(),
            unparsed: Vec::new(),
            has_kube_proxy: false,
            has_canary: false,
            kube_rule_count: 0,
            complete: true,
            notes: Vec::new(),
            signals: ProxySignals::default(),
            gaps: Vec::new(),
            malformed: Vec::new(),
            forwarding_shown: true,
            missing_entry: Vec::new(),
            bad_capture: None,
        }
    }
}

/// A socket bound on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub protocol: Protocol,
    pub family: Family,
    pub addr: IpAddr,
    pub port: u16,
    pub inode: u64,
    pub uid: u32,
    /// The `/proc/net` file and line it came from.
    pub origin: String,
    pub line: u32,
}

/// A process that owns a socket (filled in by the live reader when it can; see
/// `sources::owners`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessInfo {
    pub pid: u32,
    /// The kernel's short name for the process (`/proc/<pid>/comm`, at most 15 bytes).
    pub name: String,
    /// The container's ID as `kubectl` prints `containerStatuses[].containerID`:
    /// `containerd://<id>`, `cri-o://<id>` or `docker://<id>`. None for a host process.
    pub container: Option<String>,
    /// The pod's UID (with dashes). None for a process outside any pod.
    pub pod: Option<String>,
    /// The executable's path (`/proc/<pid>/exe`); None when it cannot be read.
    pub exe: Option<String>,
    /// The real user id (`/proc/<pid>/status`).
    pub uid: Option<u32>,
    /// The command line, only when asked for (`--process-argv`): arguments separated by
    /// spaces, secret-looking values redacted, cut to 256 characters. None by default,
    /// and when empty (kernel threads, zombies).
    pub cmdline: Option<String>,
}

#[cfg(test)]
mod tests;
