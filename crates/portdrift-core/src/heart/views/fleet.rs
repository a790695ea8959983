//! The fleet's drift at a glance (`portdrift fleet`): the nodes by their
//! `NodePortDrift` condition ([`nodes`]) or by what Prometheus holds ([`prometheus`]),
//! then the asked agents' `/findings` grouped by finding, with the nodes that have each,
//! and the agents that did not answer. Pure: answers in, a view out.

use crate::heart::finding::{Finding, FindingId, Kind, Severity};
use crate::heart::model::Protocol;
use crate::heart::visible::{into_visible_lines, visible as v};
use crate::heart::words::count_of;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use serde::Serialize;

pub mod answer;
pub mod nodes;
pub mod prometheus;

pub use answer::{AgentAnswer, AgentReport, NoAnswer, read_finding};
use nodes::NodesSummary;

/// What makes two nodes' findings one line of the view: the finding's identity in any
/// backend and family (see [`fleet_identity`]), and its severity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct FindingKey {
    pub kind: Kind,
    pub severity: Severity,
    pub protocol: Option<Protocol>,
    // The schema as published: the JSON of a u16 is the same.
    #[schemars(with = "Option<u64>")]
    pub port: Option<u16>,
    pub service: Option<String>,
    pub target: Option<String>,
}

impl FindingKey {
    fn of(id: FindingId, severity: Severity) -> FindingKey {
        FindingKey {
            kind: id.kind,
            severity,
            protocol: id.protocol,
            port: id.port,
            service: id.service,
            target: id.target,
        }
    }

    /// The order the view lists findings in among those on as many nodes: most severe
    /// first, then by the fields' spellings, an absent one first.
    fn listing_order(&self) -> impl Ord + '_ {
        (
            self.severity,
            self.kind.as_str(),
            self.protocol.map(Protocol::as_str),
            self.port,
            self.service.as_deref(),
            self.target.as_deref(),
        )
    }
}

/// One finding and the nodes that have it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct FleetFinding {
    #[serde(flatten)]
    pub key: FindingKey,
    /// Sorted, each once (a finding in two backends of one node counts once).
    pub nodes: Vec<String>,
    /// One node's message for it.
    pub message: String,
}

/// An agent that did not answer with findings.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Unanswered {
    pub node: String,
    pub pod: String,
    #[schemars(with = "String")]
    pub reason: NoAnswer,
}

/// The fleet's drift: the nodes by their state, then the asked agents' findings.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct FleetView {
    /// Where the per-node states come from; null when there are none (the agents
    /// alone were asked).
    pub source: Option<String>,
    /// Every node by its state, when a list of the nodes was read; null otherwise.
    pub nodes: Option<NodesSummary>,
    /// Nodes asked for details, one agent each (or Prometheus's targets).
    pub agents: usize,
    pub answered: usize,
    /// Most widespread first, then most severe, then by port.
    pub findings: Vec<FleetFinding>,
    pub unanswered: Vec<Unanswered>,
    /// What could not be checked, and why.
    pub notes: Vec<String>,
    /// The nodes whose agents answered.
    #[serde(skip)]
    answered_nodes: BTreeSet<String>,
}

impl FleetView {
    /// 1 when a warning or critical finding is on some node, a node's condition says
    /// drift, an agent did not answer, or a node's state is unknown and no ready agent
    /// answered for it with a complete check (the view is incomplete); else 0.
    pub fn exit_code(&self) -> u8 {
        let serious = self
            .findings
            .iter()
            .any(|f| matches!(f.key.severity, Severity::Critical | Severity::Warning));
        let nodes_say = self.nodes.as_ref().is_some_and(|n| {
            !n.drift.is_empty() || n.unknown.iter().any(|u| !self.answered_nodes.contains(&u.node))
        });
        u8::from(serious || nodes_say || !self.unanswered.is_empty())
    }

    /// The same view with the nodes' states read from `source`, and `notes`.
    pub fn with_nodes(
        mut self,
        source: Option<String>,
        nodes: Option<NodesSummary>,
        notes: Vec<String>,
    ) -> FleetView {
        self.source = source;
        self.nodes = nodes;
        self.notes.extend(notes);
        if self.answered == 0 && self.unanswered.iter().any(|u| u.reason.is_forbidden()) {
            self.notes.push(
                "the pod proxy is forbidden (403) for these credentials: no agent was asked; \
                 what the conditions say is all that was checked"
                    .into(),
            );
        }
        self
    }
}

/// Groups the answers into the fleet view.
pub fn fleet_view(answers: &[AgentAnswer]) -> FleetView {
    let mut groups: BTreeMap<(FindingId, Severity), (Vec<String>, String)> = BTreeMap::new();
    let mut unanswered = Vec::new();
    let mut answered_nodes = BTreeSet::new();
    let mut notes = Vec::new();
    for answer in answers {
        let report = match &answer.outcome {
            Ok(report) => report,
            Err(reason) => {
                unanswered.push(unanswered_of(answer, reason.clone()));
                continue;
            }
        };
        let mut unreadable = Vec::new();
        for finding in &report.findings {
            let finding = match finding {
                Ok(finding) => finding,
                Err(why) => {
                    unreadable.push(why);
                    continue;
                }
            };
            let group = (fleet_identity(finding), finding.severity);
            let entry = groups
                .entry(group)
                .or_insert_with(|| (Vec::new(), finding.message.clone()));
            entry.0.push(answer.node.clone());
        }
        // An agent that could not check everything, or is not ready (its verdicts may
        // not be current), or said what this portdrift cannot read, has not shown its
        // node clean.
        let doubt = match (&report.incomplete, &answer.unready) {
            (Some(why), _) => Some(format!("{}: the agent's check is incomplete: {why}", answer.node)),
            (None, Some(why)) => Some(format!(
                "{}: the agent is not ready ({why}): its answer may be out of date",
                answer.node
            )),
            (None, None) => None,
        };
        let clean = doubt.is_none() && unreadable.is_empty();
        notes.extend(doubt);
        if let Some(first) = unreadable.first() {
            notes.push(format!(
                "{}: {} this portdrift cannot read ({first}): a newer portdrift may",
                answer.node,
                count_of(unreadable.len(), "finding")
            ));
        }
        if clean {
            answered_nodes.insert(answer.node.clone());
        }
    }
    let mut findings: Vec<FleetFinding> = groups
        .into_iter()
        .map(|((id, severity), (mut nodes, message))| {
            nodes.sort();
            nodes.dedup();
            let key = FindingKey::of(id, severity);
            FleetFinding { key, nodes, message }
        })
        .collect();
    findings.sort_by(|a, b| {
        (Reverse(a.nodes.len()), a.key.listing_order()).cmp(&(Reverse(b.nodes.len()), b.key.listing_order()))
    });
    unanswered.sort_by(|a, b| a.node.cmp(&b.node));
    FleetView {
        source: None,
        nodes: None,
        agents: answers.len(),
        answered: answers.len() - unanswered.len(),
        findings,
        unanswered,
        notes,
        answered_nodes,
    }
}

fn unanswered_of(answer: &AgentAnswer, reason: NoAnswer) -> Unanswered {
    Unanswered {
        node: answer.node.clone(),
        pod: answer.pod.clone(),
        reason,
    }
}

/// The identity the view groups nodes' findings by: the same drift is one line whether
/// a node's rules for it are in one backend and family or another.
fn fleet_identity(finding: &Finding) -> FindingId {
    FindingId {
        backend: None,
        family: None,
        ..finding.identity()
    }
}

/// `severity kind proto/port service → target: K of N nodes: a, b` per finding, then
/// the agents that did not answer. The agents' answers are other nodes' words: each
/// field is escaped ([`v`]), and the whole once more.
pub fn render_fleet(view: &FleetView) -> String {
    let mut out = String::new();
    render_fleet_into(&mut out, view);
    into_visible_lines(out)
}

fn render_fleet_into(out: &mut String, view: &FleetView) {
    if let Some(nodes) = &view.nodes {
        render_nodes(out, view.source.as_deref().unwrap_or_default(), nodes);
        if view.agents == 0 && view.notes.is_empty() {
            let _ = writeln!(
                out,
                "no agent asked: no node drifted or is unknown (--all asks every agent)"
            );
            return;
        }
    }
    let _ = writeln!(
        out,
        "{} of {} agents answered; {} distinct findings",
        view.answered,
        view.agents,
        view.findings.len()
    );
    for f in &view.findings {
        let k = &f.key;
        let mut what = format!("{} {}", k.severity, k.kind);
        if let (Some(protocol), Some(port)) = (&k.protocol, k.port) {
            let _ = write!(what, " {protocol}/{port}");
        }
        if let Some(service) = &k.service {
            let _ = write!(what, " {}", v(service));
        }
        if let Some(target) = &k.target {
            let _ = write!(what, " → {}", v(target));
        }
        let _ = writeln!(
            out,
            "{what}: {} of {} nodes: {}",
            f.nodes.len(),
            view.agents,
            v(&f.nodes.join(", "))
        );
    }
    if !view.unanswered.is_empty() {
        let _ = writeln!(out, "\nno answer from {} agents:", view.unanswered.len());
        for u in &view.unanswered {
            if u.pod.is_empty() {
                let _ = writeln!(out, "  {}: {}", v(&u.node), v(&u.reason.to_string()));
            } else {
                let _ = writeln!(
                    out,
                    "  {} ({}): {}",
                    v(&u.node),
                    v(&u.pod),
                    v(&u.reason.to_string())
                );
            }
        }
    }
    if !view.notes.is_empty() {
        let _ = writeln!(out, "\nnot checked:");
        for note in &view.notes {
            let _ = writeln!(out, "  {}", v(note));
        }
    }
}

/// `N nodes by SOURCE: D drift, C clean, U unknown`, then the drifted and unknown
/// nodes each with its message.
fn render_nodes(out: &mut String, source: &str, nodes: &NodesSummary) {
    let _ = writeln!(
        out,
        "{} nodes by {source}: {} drift, {} clean, {} unknown",
        nodes.total,
        nodes.drift.len(),
        nodes.clean.len(),
        nodes.unknown.len()
    );
    for (title, list) in [("drift", &nodes.drift), ("unknown", &nodes.unknown)] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{title}:");
        for n in list {
            match &n.since {
                Some(since) => {
                    let _ = writeln!(out, "  {} (since {}): {}", v(&n.node), v(since), v(&n.message));
                }
                None => {
                    let _ = writeln!(out, "  {}: {}", v(&n.node), v(&n.message));
                }
            }
        }
    }
    let _ = writeln!(out);
}

#[cfg(test)]
mod tests;
