//! The walk's branches turned into what a person reads: where new connections end
//! up and in what shares, each path with its evidence, what shadows what, and the
//! endpoints the API says this port should reach beside the effective ones.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

use serde::Serialize;

use crate::heart::desired::DesiredState;
use crate::heart::explain::eval::{Branch, End, Remarks, TieOrder, follow, follow_in_order, place_of};
use crate::heart::explain::model::{Destination, Probe, Rulesets};
use crate::heart::finding::Finding;
use crate::heart::model::{Backend, Family, Listener, ProcessInfo, Protocol};

/// Shares closer than this are one share: kube-proxy prints probabilities with ten
/// decimals, so a cascade's products are off by far less.
const SAME_SHARE: f64 = 1e-6;

/// Where new connections end up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Translated to endpoints (`endpoints` says which, in what shares).
    Dnat,
    /// Dropped by a rule or a chain's policy.
    Drop,
    /// Rejected by a rule.
    Reject,
    /// Delivered to a socket of this node.
    Local,
    /// No rule takes it and nothing listens: the kernel refuses it.
    None,
    /// A rule on the path could not be decided (see `not_checked`).
    Undetermined,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Dnat => "dnat",
            Outcome::Drop => "drop",
            Outcome::Reject => "reject",
            Outcome::Local => "local",
            Outcome::None => "none",
            Outcome::Undetermined => "undetermined",
        }
    }
}

/// One endpoint and the share of new connections it receives.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct EndpointShare {
    /// `ip:port` (`[ip]:port` for IPv6).
    pub target: String,
    /// Between 0 and 1.
    pub fraction: f64,
}

/// One rule on a path, as evidence.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PathStep {
    /// The netfilter hook (`prerouting`, `input`, `forward`).
    pub hook: String,
    pub backend: Backend,
    /// `nat`, `filter` (iptables); `ip kube-proxy` (nftables).
    pub table: String,
    pub chain: String,
    /// Where the rule is: `iptables-nft-save.txt:57`, `nft.json ip kube-proxy services
    /// handle 12`, or a chain's policy.
    pub at: String,
    /// The dump's line, for an iptables rule.
    pub line: Option<u32>,
    /// The rule's handle, for an nftables rule.
    pub handle: Option<u64>,
    /// The rule as the dump printed it; null for a chain's policy.
    pub rule: Option<String>,
    pub result: StepResult,
    /// What the rule did, or why it was skipped.
    pub does: String,
    /// For a rule that takes a share of the connections reaching it (`statistic`,
    /// `numgen`): that share.
    pub share: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StepResult {
    Matched,
    Skipped,
    Policy,
    NotRun,
}

/// One way connections go.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Path {
    /// The share of new connections that take this path.
    pub fraction: f64,
    pub outcome: Outcome,
    /// The endpoint (`dnat`), or this node's `ip:port` / `port` (`local`).
    pub target: Option<String>,
    pub steps: Vec<PathStep>,
    /// Why the path could not be followed further (`undetermined`).
    pub undecided: Option<String>,
}

/// A rule that never sees the connections it was written for.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Shadowed {
    pub at: String,
    pub rule: String,
    /// The rule that takes the connections first.
    pub by: String,
    pub why: String,
}

/// Delivery to this node: who listens.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct LocalDelivery {
    pub port: u16,
    /// Whether a socket listens on the port; null when the node's sockets were not read.
    pub listening: Option<bool>,
    /// The process that owns it, when it could be found.
    pub process: Option<ProcessInfo>,
}

/// What the API says this port should do on this node.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Expected {
    /// The Service port that owns the nodePort (`ns/name:port`); null when none does.
    pub service: Option<String>,
    /// `Cluster` or `Local` (externalTrafficPolicy).
    pub traffic_policy: Option<String>,
    pub outcome: Outcome,
    /// The endpoints kube-proxy would spread new connections over, evenly.
    pub endpoints: Vec<EndpointShare>,
    /// The API's endpoints for this port are not exactly known (see the scan's coverage).
    pub uncertain: bool,
}

/// One way the effective result differs from the API's.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Difference {
    /// The endpoint concerned, when one is.
    pub target: Option<String>,
    /// Its effective share of new connections.
    pub effective: Option<f64>,
    /// Its share by the API.
    pub expected: Option<f64>,
    /// One sentence.
    pub explanation: String,
    /// The ids of the scan's findings that explain it.
    pub findings: Vec<String>,
}

/// `portdrift explain`'s document body.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Explanation {
    /// `tcp/30080`.
    pub port: String,
    pub protocol: Protocol,
    pub node_port: u16,
    pub family: Family,
    /// The address connected to: an address, or `this node` (any of its addresses).
    pub destination: String,
    /// The client's address.
    pub source: String,
    /// Where new connections from the source end up (the largest share when paths differ).
    pub outcome: Outcome,
    /// The endpoints new connections are translated to, with their shares.
    pub endpoints: Vec<EndpointShare>,
    /// Every outcome with its share, when there is more than one.
    pub outcomes: Vec<OutcomeShare>,
    /// A session-affinity timeout on the path: a returning client keeps its endpoint
    /// for this many seconds; the shares are for new clients.
    pub affinity_seconds: Option<u32>,
    pub local: Option<LocalDelivery>,
    pub paths: Vec<Path>,
    /// Rules passed over because they are about other ports, protocols or addresses
    /// (counted on every path, not listed in the steps).
    pub passed_over: usize,
    pub shadowed: Vec<Shadowed>,
    pub expected: Option<Expected>,
    pub differences: Vec<Difference>,
    pub notes: Vec<String>,
    /// Every rule on every path was read and decided: the outcome and shares are
    /// certain for this connection.
    pub complete: bool,
    /// What could not be checked, and why: said before any conclusion.
    pub not_checked: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct OutcomeShare {
    pub outcome: Outcome,
    pub fraction: f64,
}

/// Everything explain reads.
pub struct ExplainInput<'a> {
    pub rules: &'a Rulesets,
    pub probe: Probe,
    pub desired: Option<&'a DesiredState>,
    pub findings: &'a [Finding],
    /// None when the node's sockets were not read.
    pub listeners: Option<&'a [Listener]>,
    pub owners: &'a HashMap<u64, ProcessInfo>,
    /// What the scan could not read or check, as sentences (shown first).
    pub not_checked: Vec<String>,
}

/// Follows the probe and explains it.
pub fn explain(input: &ExplainInput<'_>) -> Explanation {
    let probe = input.probe;
    let (branches, remarks) = follow(input.rules, &probe);
    let endpoints = effective_endpoints(&branches);
    let not_checked = not_checked(input, &branches, &remarks, &endpoints);
    let paths: Vec<Path> = branches.iter().map(|b| path_of(input, b)).collect();
    let by_outcome = outcome_shares(&paths);
    let local = local_delivery(input, &branches);
    let outcome = refused_if_unheard(largest(&by_outcome), &local);
    let notes = notes_of(input, &branches, &remarks, outcome);
    let expected = expected(input);
    let differences = differences(input, &endpoints, outcome, expected.as_ref(), &branches);
    Explanation {
        port: format!("{}/{}", probe.protocol, probe.port),
        protocol: probe.protocol,
        node_port: probe.port,
        family: probe.family(),
        destination: probe.destination.to_string(),
        source: probe.source.to_string(),
        outcome,
        endpoints,
        outcomes: every_outcome(&by_outcome),
        affinity_seconds: branches.iter().find_map(|b| b.affinity),
        local,
        paths: paths.into_iter().map(|p| refused_path(p, outcome)).collect(),
        passed_over: remarks.quietly_skipped,
        shadowed: shadowed(input, &branches),
        expected,
        differences,
        notes,
        complete: not_checked.is_empty(),
        not_checked,
    }
}

/// What the explanation rests on but could not check: the scan's gaps, the dumps',
/// a family with no rules, rules no branch could follow, and an unknown order of
/// backends that would change the answer.
fn not_checked(
    input: &ExplainInput<'_>,
    branches: &[Branch],
    remarks: &Remarks,
    endpoints: &[EndpointShare],
) -> Vec<String> {
    let mut not_checked = input.not_checked.clone();
    not_checked.extend(input.rules.gaps.iter().cloned());
    let family = input.probe.family();
    if !input.rules.tables.iter().any(|t| t.family == family) {
        not_checked.push(format!(
            "no {family} rules were read: the path of a connection over {family} is unknown"
        ));
    }
    for b in branches {
        if let End::Undecided { at, why } = &b.end {
            let place = at.map(|at| place_of(input.rules, at)).unwrap_or_default();
            not_checked.push(format!(
                "{:.0}% of new connections reach a rule that cannot be followed ({place}): {why}",
                b.share * 100.0
            ));
        }
    }
    if !remarks.nat_order_unknown.is_empty() {
        not_checked.extend(other_order(input, endpoints));
    }
    not_checked.dedup();
    not_checked
}

/// The order between backends is not in the dumps: if the other order sends
/// connections elsewhere, the answer rests on what could not be checked.
fn other_order(input: &ExplainInput<'_>, endpoints: &[EndpointShare]) -> Option<String> {
    let (other, _) = follow_in_order(input.rules, &input.probe, TieOrder::OldestFirst);
    let other_endpoints = effective_endpoints(&other);
    if other_endpoints == endpoints {
        return None;
    }
    let list = if other_endpoints.is_empty() {
        "no endpoint".to_string()
    } else {
        other_endpoints
            .iter()
            .map(|e| format!("{} ({})", e.target, percent(e.fraction)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Some(format!(
        "which backend's nat chain the kernel runs first is not in any dump (it runs the one registered last first); this explanation takes the newer backend's, and had the older one's tables been created last, new connections would go to {list}"
    ))
}

/// The share of new connections each outcome gets.
fn outcome_shares(paths: &[Path]) -> BTreeMap<Outcome, f64> {
    let mut by_outcome: BTreeMap<Outcome, f64> = BTreeMap::new();
    for p in paths {
        *by_outcome.entry(p.outcome).or_default() += p.fraction;
    }
    by_outcome
}

/// The outcome with the largest share (the first of equals); none without paths.
fn largest(by_outcome: &BTreeMap<Outcome, f64>) -> Outcome {
    by_outcome
        .iter()
        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(a.0)))
        .map_or(Outcome::None, |(o, _)| *o)
}

/// Delivered to the node with nothing listening: the kernel answers with a reset
/// (TCP) or port unreachable (UDP), as if no rule existed.
fn refused_if_unheard(outcome: Outcome, local: &Option<LocalDelivery>) -> Outcome {
    match (outcome, local) {
        (
            Outcome::Local,
            Some(LocalDelivery {
                listening: Some(false),
                ..
            }),
        ) => Outcome::None,
        (o, _) => o,
    }
}

/// A path delivered to this node ends in nothing when the port is refused.
fn refused_path(mut path: Path, outcome: Outcome) -> Path {
    if path.outcome == Outcome::Local && outcome == Outcome::None {
        path.outcome = Outcome::None;
    }
    path
}

/// Every outcome with its share, when there is more than one.
fn every_outcome(by_outcome: &BTreeMap<Outcome, f64>) -> Vec<OutcomeShare> {
    if by_outcome.len() < 2 {
        return Vec::new();
    }
    by_outcome
        .iter()
        .map(|(o, f)| OutcomeShare {
            outcome: *o,
            fraction: round(*f),
        })
        .collect()
}

impl Explanation {
    /// 0: as the API says; 1: differs from it; 3: a rule on the path (or an input it
    /// rests on) could not be checked, and nothing differs.
    pub fn exit_code(&self) -> u8 {
        if !self.differences.is_empty() {
            1
        } else if !self.complete || self.outcome == Outcome::Undetermined {
            3
        } else {
            0
        }
    }
}

/// Where the branches' connections are translated to, with their shares.
fn effective_endpoints(branches: &[Branch]) -> Vec<EndpointShare> {
    shares(branches.iter().filter_map(|b| {
        match b.end {
            End::Forwarded(to) => Some((to, b.share)),
            End::Delivered { .. } => b
                .packet
                .translated
                .filter(|t| !t.redirect)
                .map(|t| (t.to, b.share)),
            _ => None,
        }
    }))
}

fn probe_port(probe: &Probe) -> String {
    match probe.destination {
        Destination::Addr(ip) => format!("{}/{}", probe.protocol, SocketAddr::new(ip, probe.port)),
        Destination::AnyNodeAddress(_) => format!("{}/{}", probe.protocol, probe.port),
    }
}

fn round(f: f64) -> f64 {
    (f * 1e6).round() / 1e6
}

/// Shares per target, largest first, then by address.
fn shares(items: impl Iterator<Item = (SocketAddr, f64)>) -> Vec<EndpointShare> {
    let mut by: BTreeMap<SocketAddr, f64> = BTreeMap::new();
    for (to, share) in items {
        *by.entry(to).or_default() += share;
    }
    let mut out: Vec<(SocketAddr, f64)> = by.into_iter().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.into_iter()
        .map(|(to, f)| EndpointShare {
            target: to.to_string(),
            fraction: round(f),
        })
        .collect()
}

/// Who listens where connections are delivered to this node.
fn local_delivery(input: &ExplainInput<'_>, branches: &[Branch]) -> Option<LocalDelivery> {
    let port = branches.iter().find_map(|b| match b.end {
        End::Delivered { port } if b.packet.translated.is_none_or(|t| t.redirect) => Some(port),
        _ => None,
    })?;
    let protocol = input.probe.protocol;
    let family = input.probe.family();
    let Some(listeners) = input.listeners else {
        return Some(LocalDelivery {
            port,
            listening: None,
            process: None,
        });
    };
    let wanted = match input.probe.destination {
        Destination::Addr(ip) => Some(ip),
        Destination::AnyNodeAddress(_) => None,
    };
    let socket = listeners.iter().find(|l| {
        l.protocol == protocol
            && l.port == port
            && (l.family == family || (l.family == Family::Ipv6 && l.addr.is_unspecified()))
            && (l.addr.is_unspecified() || wanted.is_none_or(|w| w == l.addr) && !l.addr.is_loopback())
    });
    Some(LocalDelivery {
        port,
        listening: Some(socket.is_some()),
        process: socket.and_then(|s| input.owners.get(&s.inode).cloned()),
    })
}

mod compare;
mod notes;
mod paths;
mod shadow;

use compare::{differences, expected};
use notes::notes_of;
use paths::path_of;
use shadow::shadowed;

/// A share as people read it: `25%`, `33.3%`.
pub fn percent(f: f64) -> String {
    let p = f * 100.0;
    if (p - p.round()).abs() < 0.05 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}
