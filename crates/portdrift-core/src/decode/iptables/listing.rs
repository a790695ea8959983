//! `iptables -S` listings and fragments: which table a run of lines is from, and the chains that name other owners.

use super::TableKind;

/// A run of `iptables -S` output: its `-P` lines name the built-in chains, which tell
/// the table (`-t nat -S` prints PREROUTING, INPUT, OUTPUT and POSTROUTING).
#[derive(Debug, Default)]
pub(super) struct Listing {
    pub(super) builtins: Vec<String>,
    /// Decided once the run's first non-policy line comes.
    pub(super) table: Option<Option<TableKind>>,
}

impl Listing {
    pub(super) fn table(&self) -> Option<TableKind> {
        let has = |c: &str| self.builtins.iter().any(|b| b == c);
        match (has("PREROUTING"), has("FORWARD"), has("POSTROUTING")) {
            // mangle has every built-in chain; raw only PREROUTING and OUTPUT.
            (true, true, _) => Some(TableKind::Other),
            (true, false, true) => Some(TableKind::Nat),
            (true, false, false) => Some(TableKind::Other),
            (false, true, _) => Some(TableKind::Filter),
            _ => None,
        }
    }
}

/// The chains of a kube-proxy replacement, by their prefix: Services are handled by
/// that project's own datapath where these exist and kube-proxy's dispatch does not.
pub(super) const REPLACEMENT_CHAINS: [(&str, &str); 4] = [
    ("CILIUM_", "Cilium"),
    ("KUBE-ROUTER-", "kube-router"),
    // Calico's eBPF data plane keeps these iptables chains for what BPF leaves to them.
    ("cali-pre-ingress", "Calico (eBPF)"),
    ("cali-bpf", "Calico (eBPF)"),
];

/// kubelet's chains: they say nothing of kube-proxy (pkg/kubelet/kubelet_network_linux.go;
/// KUBE-MARK-DROP was kubelet's before KEP-3178).
pub(super) const KUBELET_CHAINS: [&str; 4] = [
    "KUBE-FIREWALL",
    "KUBE-KUBELET-CANARY",
    "KUBE-IPTABLES-HINT",
    "KUBE-MARK-DROP",
];

/// nat chains only kube-proxy's IPVS mode writes.
pub(super) const IPVS_CHAINS: [&str; 3] = ["KUBE-NODE-PORT", "KUBE-LOAD-BALANCER", "KUBE-LOOP-BACK"];

/// The table a line outside any known table belongs to, guessed from its chain and
/// target: kube-proxy's chain names say it for all but `KUBE-SERVICES` and
/// `KUBE-NODEPORTS`, which exist in both nat and filter and are told apart by what
/// they do.
pub(super) fn guess_table(chain: &str, target: &str) -> TableKind {
    const FILTER_ONLY: [&str; 6] = [
        "INPUT",
        "FORWARD",
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-FORWARD",
        "KUBE-FIREWALL",
        "KUBE-PROXY-FIREWALL",
    ];
    if FILTER_ONLY.contains(&chain) {
        return TableKind::Filter;
    }
    if matches!(chain, "KUBE-SERVICES" | "KUBE-NODEPORTS" | "OUTPUT")
        && matches!(target, "REJECT" | "DROP" | "ACCEPT")
    {
        return TableKind::Filter;
    }
    TableKind::Nat
}
