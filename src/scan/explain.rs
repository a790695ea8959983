//! `portdrift explain`: one scan of a bundle or this node (for the findings, the
//! desired state and the sockets), every rule of every backend read whole, and the
//! connection followed through them.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::decode::explain::{iptables, nft};
use crate::heart::detect::DetectConfig;
use crate::heart::explain::explanation::{ExplainInput, Explanation, explain};
use crate::heart::explain::model::{PortQuery, Rulesets};
use crate::heart::input::{Input, SocketProtocol};
use crate::heart::model::{Backend, Family, Listener, ProcessInfo, ProxyMode};
use crate::heart::outcome::{InputState, ScanInput, ScanReport, run_scan_keeping_inputs};
use crate::scan::input::{BundleDir, Fetched, Source, read_bundle_with};
use crate::scan::oneshot::{OneshotConfig, OneshotError, detect_config, read_live};
use crate::sources::live::{LiveConfig, LiveNode};

/// What `explain` is asked.
#[derive(Debug, Clone)]
pub struct ExplainConfig {
    /// Where to read (a bundle or this node) and how to judge it, as for `scan`.
    pub scan: OneshotConfig,
    pub query: PortQuery,
    /// The client connecting (default: a documentation address outside the cluster).
    pub source: Option<IpAddr>,
}

/// Why explain could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error(transparent)]
    Scan(#[from] OneshotError),
    #[error("{0}")]
    Query(String),
}

/// The explanation and what it rests on.
#[derive(Debug)]
pub struct ExplainOutcome {
    pub node: Option<String>,
    pub explanation: Explanation,
    pub report: ScanReport,
}

/// The node's sockets as the scan read them, for who listens where a connection lands.
pub struct Sockets {
    /// None when no socket table could be read.
    pub listeners: Option<Vec<Listener>>,
    pub owners: HashMap<u64, ProcessInfo>,
}

/// Reads, scans and explains.
pub fn run_explain(config: &ExplainConfig) -> Result<ExplainOutcome, ExplainError> {
    let scan = &config.scan;
    let input = match &scan.bundle {
        Some(dir) => {
            read_bundle_with(dir, scan.node.as_deref(), scan.cluster_state.clone()).map_err(|source| {
                OneshotError::Bundle {
                    path: dir.clone(),
                    source,
                }
            })?
        }
        None => read_live(scan)?.input,
    };
    let detect = detect_config(scan);
    let outcome = match &scan.bundle {
        Some(dir) => explain_input(
            input,
            &detect,
            &BundleDir::new(dir, None),
            config.query,
            config.source,
            None,
        ),
        None => explain_input(
            input,
            &detect,
            &LiveNode::new(LiveConfig {
                cluster_state: None,
                ..scan.live.clone()
            }),
            config.query,
            config.source,
            None,
        ),
    };
    outcome.map_err(ExplainError::Query)
}

/// Scans what was read, reads every rule from `src`, and explains `query`: the one
/// path of the command and the agent's `/explain`.
pub fn explain_input<S: Source>(
    input: ScanInput,
    detect: &DetectConfig,
    src: &S,
    query: PortQuery,
    source: Option<IpAddr>,
    nft_limit: Option<usize>,
) -> Result<ExplainOutcome, String> {
    // `nft -j list ruleset` costs nft about a gigabyte at 10,000 Services in nftables
    // mode (its one table took 1,013 MiB: docs/performance.md#a-live-scan): the agent,
    // in its memory limit, does not run it on such a node.
    let nft_rules: usize = input
        .observed
        .dumps
        .iter()
        .filter(|s| s.backend == Backend::Nftables)
        .map(|s| s.nodeports.len())
        .sum();
    let read_nft = match nft_limit {
        Some(limit) if nft_rules > limit => Err(format!(
            "the nftables ruleset was not read: kube-proxy's nftables tables hold {nft_rules} NodePort rules, and nft needs about a gigabyte to print 10,000 Services' worth, more than the agent may use; run `portdrift explain` on the node (kubectl debug) to follow them"
        )),
        _ => Ok(()),
    };
    let sockets_read = input.sources.iter().any(|s| {
        matches!(s.source, Input::Sockets { .. })
            && matches!(s.status, InputState::Ok | InputState::Empty | InputState::Partial)
    });
    let sockets = Sockets {
        listeners: sockets_read.then(|| input.observed.listeners.clone()),
        owners: input.observed.owners.clone(),
    };
    let node = input.node.clone();
    let (report, _, desired) = run_scan_keeping_inputs(input, detect);
    let (rules, not_checked) = read_rulesets(src, read_nft);
    let explanation = explain_with(
        &rules,
        not_checked,
        query,
        source,
        desired.as_ref(),
        &report,
        &sockets,
    )?;
    Ok(ExplainOutcome {
        node,
        explanation,
        report,
    })
}

/// The explanation of `query` over rules already read.
pub fn explain_with(
    rules: &Rulesets,
    mut not_checked: Vec<String>,
    query: PortQuery,
    source: Option<IpAddr>,
    desired: Option<&crate::heart::desired::DesiredState>,
    report: &ScanReport,
    sockets: &Sockets,
) -> Result<Explanation, String> {
    // Without an address or source, the family that has rules: IPv4 first.
    let family = if rules.tables.iter().any(|t| t.family == Family::Ipv4) || rules.tables.is_empty() {
        Family::Ipv4
    } else {
        Family::Ipv6
    };
    let mut probe = query.probe(source, family)?;
    // Without an address, kube-proxy's own list of the node's NodePort addresses (its
    // nftables `nodeport-ips` set) names one: its rules match on it.
    let chosen = match query.address {
        None => nodeport_address(rules, probe.family()),
        Some(_) => None,
    };
    if let Some(ip) = chosen {
        probe.destination = crate::heart::explain::model::Destination::Addr(ip);
    }
    // A datapath outside netfilter takes NodePort connections before, or instead of,
    // the rules followed here: said first.
    let mode = report.coverage.proxy_mode;
    if matches!(mode, ProxyMode::Ipvs | ProxyMode::Replaced) {
        not_checked.insert(
            0,
            format!(
                "this node's Services are proxied in {} mode ({}): IPVS virtual servers or a BPF datapath, which this explanation does not follow, handle NodePort connections, so the netfilter path below may not be where they go",
                mode.as_str(),
                report.coverage.proxy_mode_evidence
            ),
        );
    }
    if sockets.listeners.is_none() {
        let tcp = Input::sockets(SocketProtocol::Tcp, Family::Ipv4);
        not_checked.push(format!(
            "the node's sockets ({tcp}, udp) were not read: whether a process listens on the port is unknown"
        ));
    }
    let mut explanation = explain(&ExplainInput {
        rules,
        probe,
        desired,
        findings: &report.findings,
        listeners: sockets.listeners.as_deref(),
        owners: &sockets.owners,
        not_checked,
    });
    if let Some(ip) = chosen {
        explanation.notes.push(format!(
            "followed to {ip}, the first {} address in kube-proxy's nodeport-ips set (the node's NodePort addresses); give another as {}/ADDRESS:{}",
            probe.family(),
            query.protocol,
            query.port
        ));
    }
    if query.address.is_none() && source.is_none() {
        let other = match probe.family() {
            Family::Ipv4 => Family::Ipv6,
            Family::Ipv6 => Family::Ipv4,
        };
        if rules
            .tables
            .iter()
            .any(|t| t.family == other && t.chains.iter().any(|c| !c.rules.is_empty()))
        {
            explanation.notes.push(format!(
                "this node also has {other} rules: give an {other} address ({}/[ADDRESS]:{} or {}/ADDRESS:{}) or --source to follow an {other} connection",
                query.protocol, query.port, query.protocol, query.port
            ));
        }
    }
    Ok(explanation)
}

/// The first address of the family in kube-proxy's `nodeport-ips` set.
fn nodeport_address(rules: &Rulesets, family: Family) -> Option<IpAddr> {
    use crate::heart::explain::model::KeyPart;
    rules
        .tables
        .iter()
        .filter(|t| t.backend == Backend::Nftables && t.family == family)
        .filter_map(|t| t.set("nodeport-ips"))
        .flat_map(|s| &s.elements)
        .find_map(|e| match e.key.first() {
            Some(KeyPart::Addr(net)) if net.prefix == if family == Family::Ipv4 { 32 } else { 128 } => {
                Some(net.addr)
            }
            _ => None,
        })
}

/// Every backend's rules, whole: the iptables dumps and the nftables ruleset. The
/// second value says what could not be read.
pub fn read_rulesets<S: Source>(src: &S, read_nft: Result<(), String>) -> (Rulesets, Vec<String>) {
    let mut rules = Rulesets::default();
    let mut not_checked = Vec::new();
    let mut iptables_nft = Vec::new();
    for dump in Input::IPTABLES {
        let Input::Iptables { family, .. } = dump else {
            continue;
        };
        // A dump whose name does not tell its backend is told by its header.
        let backend = dump.iptables_backend();
        let label = src.label(dump);
        let fetched = src.fetch_bytes(dump, move |r| iptables::parse_save(r, &label, backend, family));
        match settle(fetched) {
            Settled::Absent => {}
            Settled::Failed(why) => not_checked.push(format!(
                "{} could not be read ({why}): its rules are not in this path",
                src.label(dump)
            )),
            Settled::Read(read, notes) => {
                if read.tables.iter().any(|t| t.backend == Backend::IptablesNft) {
                    iptables_nft.push(family);
                }
                for note in notes {
                    not_checked.push(format!("{}: {note}", src.label(dump)));
                }
                rules.gaps.extend(read.gaps);
                rules.tables.extend(read.tables);
            }
        }
    }
    if let Err(why) = read_nft {
        not_checked.push(why);
        return (rules, not_checked);
    }
    // iptables-nft's own tables show in the nftables ruleset too: they were read above.
    // Seeing none of them in a ruleset says it was a listing of kube-proxy's tables only.
    let seen_iptables_nft = std::cell::Cell::new(false);
    let skip = |family: Family, table: &str| {
        let theirs = iptables_nft.contains(&family)
            && matches!(table, "nat" | "filter" | "mangle" | "raw" | "security");
        if theirs {
            seen_iptables_nft.set(true);
        }
        theirs
    };
    let read_nft = |ruleset: Input| -> Option<Result<Rulesets, String>> {
        let label = src.label(ruleset);
        let fetched = src.fetch_bytes(ruleset, move |r| {
            let mut bytes = Vec::new();
            r.read_to_end(&mut bytes)?;
            Ok(bytes)
        });
        match settle(fetched) {
            Settled::Absent => None,
            Settled::Failed(why) => Some(Err(format!("{label} could not be read ({why})"))),
            Settled::Read(bytes, _) => {
                Some(nft::parse_ruleset(&bytes, &label, &skip).map_err(|e| e.to_string()))
            }
        }
    };
    match read_nft(Input::NftRuleset).or_else(|| read_nft(Input::NftJson)) {
        Some(Ok(read)) => {
            if !iptables_nft.is_empty() && !seen_iptables_nft.get() {
                not_checked.push(format!(
                    "the nftables ruleset read holds none of iptables-nft's tables, so it is a listing of some tables only (kube-proxy's, as `nft list table` prints them): other tables written with nft (firewalld, a CNI's) are not in this path; capture `nft -j list ruleset` as {}",
                    Input::NftRuleset
                ));
            }
            rules.gaps.extend(read.gaps);
            rules.tables.extend(read.tables);
        }
        Some(Err(why)) => not_checked.push(format!(
            "{why}: tables written with nft (kube-proxy's nftables mode, firewalld, a CNI's) are not in this path"
        )),
        None => not_checked.push(format!(
            "no nftables ruleset was read ({} or {}): tables written with nft (kube-proxy's nftables mode, firewalld, a CNI's) are not in this path",
            Input::NftRuleset,
            Input::NftJson
        )),
    }
    (rules, not_checked)
}

enum Settled<T> {
    Absent,
    Failed(String),
    Read(T, Vec<String>),
}

fn settle<T>(fetched: Fetched<T>) -> Settled<T> {
    let Some(state) = fetched.state else {
        return Settled::Absent;
    };
    match (state, fetched.value) {
        // A bundle lacks a file by saying nothing (above); a live node's tool that is
        // not there leaves its backend unread.
        (InputState::Absent, _) => Settled::Failed(fetched.notes.join("; ")),
        (InputState::Ok | InputState::Empty, Some(Ok(v))) => Settled::Read(v, Vec::new()),
        (_, Some(Ok(v))) => Settled::Read(
            v,
            if fetched.notes.is_empty() {
                vec![format!("read only in part ({state:?})")]
            } else {
                fetched.notes
            },
        ),
        (_, Some(Err(e))) => Settled::Failed(e.to_string()),
        (_, None) => Settled::Failed(fetched.notes.join("; ")),
    }
}
