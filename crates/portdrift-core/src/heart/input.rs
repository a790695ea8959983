//! The inputs of a scan, each by one name: every file a bundle may hold, and what no
//! bundle holds (the API server's list, the sockets' owners, the acceptances file). The
//! live node reads the same inputs from its tools, netlink, `/proc` and kube-proxy, and
//! the report names each by the file a capture would have written.
//!
//! [`Input::name`] is the one table of those names; everything else asks it.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::heart::cilium::MapKind;
use crate::heart::model::Family::{Ipv4, Ipv6};
use crate::heart::model::{Backend, Family, Protocol};

/// One input of a scan. Its [`name`](Input::name) is what the report's `sources` and the
/// metrics' `source` label call it, and, for a file, where a bundle holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Input {
    /// An iptables dump (`iptables-save`) of one family, by the backend its name says;
    /// None for `iptables-save.txt`, whose header alone tells.
    Iptables {
        backend: Option<IptablesBackend>,
        family: Family,
    },
    /// kube-proxy's nftables tables, `nft -j list table ip|ip6 kube-proxy`.
    NftJson,
    /// kube-proxy's nftables tables as `nft list ruleset` prints them: read when there
    /// is no [`Input::NftJson`].
    NftText,
    /// Every nftables table (`nft -j list ruleset`), for `portdrift explain`: other
    /// components' tables (firewalld, a CNI's) act on NodePort connections too. A bundle
    /// without it offers its [`Input::NftJson`].
    NftRuleset,
    /// One of the kernel's socket tables.
    Sockets {
        protocol: SocketProtocol,
        family: Family,
    },
    /// `net.ipv4.ip_local_port_range`.
    LocalPortRange,
    /// `net.ipv4.ip_local_reserved_ports`.
    ReservedPorts,
    /// The body of kube-proxy's `/healthz` answer.
    KubeProxyHealthz,
    /// The body of kube-proxy's `/proxyMode` answer (`iptables`, `ipvs`, `nftables`).
    KubeProxyMode,
    /// The node's interfaces (IPVS mode's `kube-ipvs0` among them).
    NetDev,
    /// The kernel's IPVS virtual servers (present while the `ip_vs` module is loaded).
    IpVs,
    /// `ipvsadm -Ln` as a bundle may hold it (a paste): read when [`Input::IpVs`] is not.
    Ipvsadm,
    /// One of Cilium's service maps: its entries as `bpftool -j map dump pinned` prints
    /// them, or its type and sizes as `bpftool -j map show pinned` does.
    CiliumMap { kind: MapKind, form: MapForm },
    /// The cluster's Services and EndpointSlices, as a file (`--cluster-state` names
    /// another than the bundle's).
    ClusterState,
    /// The node's name.
    Node,
    /// How a snapshot's capture of each file went.
    Manifest,
    /// The cluster state as the API server lists it (a live scan, the agent).
    Api,
    /// The processes that own the listening sockets (only the live node can tell).
    SocketOwners,
    /// The acceptances file (`--accept`).
    Acceptances,
}

/// The iptables backend a dump's name says wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IptablesBackend {
    Nft,
    Legacy,
}

impl IptablesBackend {
    pub fn backend(self) -> Backend {
        match self {
            IptablesBackend::Nft => Backend::IptablesNft,
            IptablesBackend::Legacy => Backend::IptablesLegacy,
        }
    }
}

/// The protocols whose sockets the kernel lists in a table of its own that is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SocketProtocol {
    Tcp,
    Udp,
}

impl SocketProtocol {
    pub fn protocol(self) -> Protocol {
        match self {
            SocketProtocol::Tcp => Protocol::Tcp,
            SocketProtocol::Udp => Protocol::Udp,
        }
    }
}

/// Which of a Cilium map's two files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MapForm {
    /// Its entries (`bpftool -j map dump pinned`).
    Entries,
    /// Its type and sizes (`bpftool -j map show pinned`).
    Info,
}

impl Input {
    /// The iptables dumps, in the order they are read: the backends their names tell,
    /// then the dumps only whose header tells.
    pub const IPTABLES: [Input; 6] = [
        Input::iptables(Some(IptablesBackend::Nft), Ipv4),
        Input::iptables(Some(IptablesBackend::Legacy), Ipv4),
        Input::iptables(Some(IptablesBackend::Nft), Ipv6),
        Input::iptables(Some(IptablesBackend::Legacy), Ipv6),
        Input::iptables(None, Ipv4),
        Input::iptables(None, Ipv6),
    ];

    /// The kernel's four socket tables: the listeners are complete only when every one
    /// was read.
    pub const SOCKETS: [Input; 4] = [
        Input::sockets(SocketProtocol::Tcp, Ipv4),
        Input::sockets(SocketProtocol::Tcp, Ipv6),
        Input::sockets(SocketProtocol::Udp, Ipv4),
        Input::sockets(SocketProtocol::Udp, Ipv6),
    ];

    /// The node's facts besides rules and sockets, in the order a bundle lists them.
    pub const NODE_FACTS: [Input; 7] = [
        Input::LocalPortRange,
        Input::ReservedPorts,
        Input::KubeProxyHealthz,
        Input::KubeProxyMode,
        Input::NetDev,
        Input::IpVs,
        Input::Ipvsadm,
    ];

    /// Cilium's service maps by family, services first in each.
    pub const CILIUM_MAPS: [[MapKind; 3]; 2] = [
        [MapKind::Services4, MapKind::Backends4, MapKind::RevNat4],
        [MapKind::Services6, MapKind::Backends6, MapKind::RevNat6],
    ];

    pub const fn iptables(backend: Option<IptablesBackend>, family: Family) -> Input {
        Input::Iptables { backend, family }
    }

    pub const fn sockets(protocol: SocketProtocol, family: Family) -> Input {
        Input::Sockets { protocol, family }
    }

    /// The name the report, the metrics and a bundle give it: the one table of them.
    pub fn name(self) -> &'static str {
        use IptablesBackend::{Legacy, Nft};
        use MapForm::{Entries, Info};
        use MapKind::{Backends4, Backends6, RevNat4, RevNat6, Services4, Services6};
        match self {
            Input::Iptables { backend, family } => match (backend, family) {
                (Some(Nft), Ipv4) => "iptables-nft-save.txt",
                (Some(Legacy), Ipv4) => "iptables-legacy-save.txt",
                (Some(Nft), Ipv6) => "ip6tables-nft-save.txt",
                (Some(Legacy), Ipv6) => "ip6tables-legacy-save.txt",
                (None, Ipv4) => "iptables-save.txt",
                (None, Ipv6) => "ip6tables-save.txt",
            },
            Input::NftJson => "nft.json",
            Input::NftText => "nft.txt",
            Input::NftRuleset => "nft-ruleset.json",
            Input::Sockets { protocol, family } => match (protocol, family) {
                (SocketProtocol::Tcp, Ipv4) => "proc/net/tcp",
                (SocketProtocol::Tcp, Ipv6) => "proc/net/tcp6",
                (SocketProtocol::Udp, Ipv4) => "proc/net/udp",
                (SocketProtocol::Udp, Ipv6) => "proc/net/udp6",
            },
            Input::LocalPortRange => "proc/sys/net/ipv4/ip_local_port_range",
            Input::ReservedPorts => "proc/sys/net/ipv4/ip_local_reserved_ports",
            Input::KubeProxyHealthz => "kube-proxy-healthz.json",
            Input::KubeProxyMode => "kube-proxy-mode.txt",
            Input::NetDev => "proc/net/dev",
            Input::IpVs => "proc/net/ip_vs",
            Input::Ipvsadm => "ipvsadm.txt",
            Input::CiliumMap { kind, form } => match (kind, form) {
                (Services4, Entries) => "bpf/cilium_lb4_services_v2.json",
                (Services4, Info) => "bpf/cilium_lb4_services_v2.info.json",
                (Backends4, Entries) => "bpf/cilium_lb4_backends_v3.json",
                (Backends4, Info) => "bpf/cilium_lb4_backends_v3.info.json",
                (RevNat4, Entries) => "bpf/cilium_lb4_reverse_nat.json",
                (RevNat4, Info) => "bpf/cilium_lb4_reverse_nat.info.json",
                (Services6, Entries) => "bpf/cilium_lb6_services_v2.json",
                (Services6, Info) => "bpf/cilium_lb6_services_v2.info.json",
                (Backends6, Entries) => "bpf/cilium_lb6_backends_v3.json",
                (Backends6, Info) => "bpf/cilium_lb6_backends_v3.info.json",
                (RevNat6, Entries) => "bpf/cilium_lb6_reverse_nat.json",
                (RevNat6, Info) => "bpf/cilium_lb6_reverse_nat.info.json",
            },
            Input::ClusterState => "cluster.json",
            Input::Node => "node",
            Input::Manifest => "snapshot.json",
            Input::Api => "cluster (API server)",
            Input::SocketOwners => "socket owners",
            Input::Acceptances => "acceptances",
        }
    }

    /// Its file in a bundle; None for what no bundle holds.
    pub fn file_name(self) -> Option<&'static str> {
        match self {
            Input::Api | Input::SocketOwners | Input::Acceptances => None,
            _ => Some(self.name()),
        }
    }

    /// The input a bundle's file holds; None for a file no scan reads (a bundle
    /// directory may hold anything: notes, a README, an older tool's output).
    pub fn from_file_name(name: &str) -> Option<Input> {
        Input::all().find(|input| input.file_name() == Some(name))
    }

    /// Every input: a bundle's files in the order a bundle lists them, then the rest.
    pub fn all() -> impl Iterator<Item = Input> {
        Input::IPTABLES
            .into_iter()
            .chain([Input::NftJson, Input::NftText, Input::NftRuleset])
            .chain(Input::SOCKETS)
            .chain(Input::NODE_FACTS)
            .chain(Input::cilium_maps())
            .chain([
                Input::ClusterState,
                Input::Node,
                Input::Manifest,
                Input::Api,
                Input::SocketOwners,
                Input::Acceptances,
            ])
    }

    /// Every file of Cilium's maps, each map's type and sizes before its entries (the
    /// order they are read in).
    pub fn cilium_maps() -> impl Iterator<Item = Input> {
        Input::CILIUM_MAPS
            .into_iter()
            .flatten()
            .flat_map(|kind| [MapForm::Info, MapForm::Entries].map(|form| Input::CiliumMap { kind, form }))
    }

    /// Its path under procfs, for what a bundle copies from there (under `proc/`).
    pub fn proc_path(self) -> Option<&'static str> {
        self.file_name()?.strip_prefix("proc/")
    }

    /// The backend its name says wrote an iptables dump.
    pub fn iptables_backend(self) -> Option<Backend> {
        match self {
            Input::Iptables { backend, .. } => backend.map(IptablesBackend::backend),
            _ => None,
        }
    }

    /// Whether it is a cluster state, from a file or the API server.
    pub fn is_cluster_state(self) -> bool {
        matches!(self, Input::ClusterState | Input::Api)
    }
}

impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Written as its name, as the JSON contract has it.
impl Serialize for Input {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests;
