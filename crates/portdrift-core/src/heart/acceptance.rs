//! Accepted findings: an exception a team chose to live with (a deliberate host daemon
//! on a NodePort-range port, a Service kept broken on purpose) is stated once, with its
//! reason, and stops paging, failing `scan` and crowding the report, while staying
//! visible as `accepted`. Nothing else on the node is hidden, as a silence would.

mod annotation;
mod selector;

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

pub use annotation::{ACCEPT_ANNOTATIONS, ANNOTATION_ACCEPT, ANNOTATION_REASON, service_acceptances};
pub use selector::NodeSelector;

use crate::heart::finding::{Accepted, Finding, Kind, Severity};
use crate::heart::model::Protocol;

/// How long an acceptance may match nothing before the agent reports it as idle.
pub const IDLE_AFTER: jiff::SignedDuration = jiff::SignedDuration::from_hours(7 * 24);

/// Where an acceptance was stated, as its notes and accepted findings name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The acceptances file, entry number (from 1).
    File(usize),
    /// A Service's `portdrift.io/accept` annotation (`namespace/name`).
    Service(String),
}

impl Default for Origin {
    fn default() -> Self {
        Origin::File(0)
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(entry) => write!(f, "acceptances entry {entry}"),
            Origin::Service(service) => write!(f, "Service {service} ({ANNOTATION_ACCEPT})"),
        }
    }
}

/// One exception: every field given must match the finding; `reason` is required.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acceptance {
    /// The finding kind (`squatter`, `missing-endpoint`, …).
    pub kind: Option<Kind>,
    /// `tcp/30080`, or `30080` for any protocol.
    pub port: Option<PortMatch>,
    /// `namespace/name`.
    pub service: Option<String>,
    /// The DNAT target, `ip:port`.
    pub target: Option<String>,
    /// A squatter's process name (comm).
    pub process: Option<String>,
    /// Why this is accepted, shown wherever the finding is.
    pub reason: String,
    /// When the acceptance ends (RFC 3339); the finding counts again from then.
    pub expires: Option<jiff::Timestamp>,
    /// Only on nodes whose labels match (`node-role.kubernetes.io/edge`, `zone=a`).
    pub node_selector: Option<NodeSelector>,
    /// Where it was stated (set as it is read).
    #[serde(skip)]
    pub origin: Origin,
}

/// A port an acceptance names, with or without its protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(try_from = "String")]
pub struct PortMatch {
    pub protocol: Option<Protocol>,
    pub port: u16,
}

impl TryFrom<String> for PortMatch {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let (protocol, port) = match s.split_once('/') {
            Some((p, n)) => (
                Some(match p {
                    "tcp" => Protocol::Tcp,
                    "udp" => Protocol::Udp,
                    "sctp" => Protocol::Sctp,
                    _ => return Err(format!("{s:?}: the protocol is tcp, udp or sctp")),
                }),
                n,
            ),
            None => (None, s.as_str()),
        };
        let port = port
            .parse()
            .map_err(|_| format!("{s:?}: not a port (tcp/30080, or 30080)"))?;
        Ok(PortMatch { protocol, port })
    }
}

/// The acceptances of a file: `{"accept": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acceptances {
    pub accept: Vec<Acceptance>,
}

/// Why an acceptances file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AcceptanceError {
    #[error(
        "not an acceptances file ({0}): expected {{\"accept\": [{{\"kind\": …, \"port\": \"tcp/30080\", \"reason\": \"…\"}}]}}"
    )]
    Syntax(#[from] serde_json::Error),
    #[error(
        "entry {index} matches every finding: name at least one of kind, port, service, target or process"
    )]
    MatchesEverything { index: usize },
    #[error("entry {index} has an empty reason: say why the finding is accepted")]
    NoReason { index: usize },
}

impl Acceptances {
    /// Reads an acceptances file (JSON); every entry must name something and say why.
    pub fn parse(text: &[u8]) -> Result<Acceptances, AcceptanceError> {
        let mut list: Acceptances = serde_json::from_slice(text)?;
        for (index, a) in list.accept.iter_mut().enumerate() {
            let index = index + 1;
            a.origin = Origin::File(index);
            if a.kind.is_none()
                && a.port.is_none()
                && a.service.is_none()
                && a.target.is_none()
                && a.process.is_none()
            {
                return Err(AcceptanceError::MatchesEverything { index });
            }
            if a.reason.trim().is_empty() {
                return Err(AcceptanceError::NoReason { index });
            }
        }
        Ok(list)
    }

    /// Marks each finding the first live entry matches as accepted, on a node with
    /// `node_labels` (None: not known, and an entry with a node selector applies nowhere).
    pub fn apply(
        &self,
        findings: &mut [Finding],
        now: jiff::Timestamp,
        node_labels: Option<&BTreeMap<String, String>>,
    ) -> Applied {
        let mut applied = Applied {
            matched: vec![false; self.accept.len()],
            ..Applied::default()
        };
        let mut live = Vec::with_capacity(self.accept.len());
        for a in &self.accept {
            let expired = a.expired_by(now);
            if let Some(expires) = a.expires.filter(|_| expired) {
                applied.expired.push(format!(
                    "{} ({}) expired at {expires}: what it covered counts again",
                    a.origin, a.reason
                ));
            }
            let on_this_node = match (&a.node_selector, node_labels) {
                (None, _) => true,
                (Some(selector), Some(labels)) => selector.matches(labels),
                (Some(selector), None) => {
                    applied.notes.push(format!(
                        "{} selects nodes by label ({selector}), and this node's labels are not known: not applied",
                        a.origin
                    ));
                    false
                }
            };
            live.push(!expired && on_this_node);
        }
        for f in findings.iter_mut() {
            let first = self
                .accept
                .iter()
                .zip(&live)
                .position(|(a, &live)| live && a.matches(f));
            if let Some(i) = first {
                let a = &self.accept[i];
                applied.matched[i] = true;
                f.accepted = Some(Accepted {
                    reason: a.reason.clone(),
                    expires: a.expires.map(|e| e.to_string()),
                    by: a.origin.to_string(),
                });
            }
        }
        applied
    }
}

/// The acceptances a scan applies besides its Services' own (which come with the
/// desired state), and the time their expiry is judged at.
#[derive(Debug, Clone)]
pub struct AcceptanceInput {
    /// The acceptances file's (empty without one).
    pub file: Acceptances,
    pub now: jiff::Timestamp,
}

/// What applying acceptances did besides marking findings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Per entry, in order: whether it accepted at least one finding.
    pub matched: Vec<bool>,
    /// A sentence per expired entry: what it covered counts again.
    pub expired: Vec<String>,
    /// Entries that could not be judged here, and why.
    pub notes: Vec<String>,
}

impl Acceptance {
    /// Whether it has expired by `now`: from then on it accepts nothing.
    pub fn expired_by(&self, now: jiff::Timestamp) -> bool {
        self.expires.is_some_and(|e| e <= now)
    }

    fn matches(&self, f: &Finding) -> bool {
        self.kind.is_none_or(|k| k == f.kind)
            && self.port.is_none_or(|p| {
                f.port == Some(p.port) && p.protocol.is_none_or(|proto| f.protocol == Some(proto))
            })
            && self
                .service
                .as_ref()
                .is_none_or(|s| f.service.as_ref() == Some(s))
            && self.target.as_ref().is_none_or(|t| f.target.as_ref() == Some(t))
            && self
                .process
                .as_ref()
                .is_none_or(|n| f.process.as_ref().is_some_and(|p| &p.name == n))
    }
}

/// The info finding for an acceptance that has matched nothing since `since`: the
/// exception it states is likely dead, and dead exceptions pile up unseen.
pub fn idle_finding(a: &Acceptance, since: jiff::Timestamp) -> Finding {
    let mut f = Finding::new(
        Kind::IdleAcceptance,
        Severity::Info,
        format!(
            "{} (\"{}\") has accepted no finding since {since}: remove it if what it covered is gone",
            a.origin, a.reason
        ),
    );
    f.protocol = a.port.and_then(|p| p.protocol);
    f.port = a.port.map(|p| p.port);
    f.service = a.service.clone();
    f.target = a.target.clone();
    f.evidence.push(format!(
        "unmatched for at least {} days",
        IDLE_AFTER.as_hours() / 24
    ));
    f
}

/// Whether a finding counts toward the exit status, the Node condition, Events and the
/// alerting series: not when it is info or accepted.
pub fn counts(f: &Finding) -> bool {
    f.severity != Severity::Info && f.accepted.is_none()
}

#[cfg(test)]
mod tests;
