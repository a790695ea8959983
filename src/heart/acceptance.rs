//! Accepted findings: an exception a team chose to live with (a deliberate host daemon
//! on a NodePort-range port, a Service kept broken on purpose) is stated once, with its
//! reason, and stops paging, failing `scan` and crowding the report, while staying
//! visible as `accepted`. Nothing else on the node is hidden, as a silence would.

use serde::Deserialize;

use crate::heart::finding::{Accepted, Finding, Kind, Severity};
use crate::heart::model::Protocol;

/// One exception: every field given must match the finding; `reason` is required.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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
}

/// A port an acceptance names, with or without its protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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
        let list: Acceptances = serde_json::from_slice(text)?;
        for (index, a) in list.accept.iter().enumerate() {
            let index = index + 1;
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

    /// Marks each finding the first live entry matches as accepted; returns a sentence
    /// per entry that has expired, so the finding it covered is seen to count again.
    pub fn apply(&self, findings: &mut [Finding], now: jiff::Timestamp) -> Vec<String> {
        let mut expired = Vec::new();
        for (i, a) in self.accept.iter().enumerate() {
            if a.expires.is_some_and(|e| e <= now) {
                expired.push(format!(
                    "acceptance {} ({}) expired at {}: what it covered counts again",
                    i + 1,
                    a.reason,
                    a.expires.map(|e| e.to_string()).unwrap_or_default()
                ));
            }
        }
        for f in findings.iter_mut() {
            if let Some(a) = self
                .accept
                .iter()
                .find(|a| a.expires.is_none_or(|e| e > now) && a.matches(f))
            {
                f.accepted = Some(Accepted {
                    reason: a.reason.clone(),
                    expires: a.expires.map(|e| e.to_string()),
                });
            }
        }
        expired
    }
}

impl Acceptance {
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

/// Whether a finding counts toward the exit status, the Node condition, Events and the
/// alerting series: not when it is info or accepted.
pub fn counts(f: &Finding) -> bool {
    f.severity != Severity::Info && f.accepted.is_none()
}

#[cfg(test)]
mod tests;
