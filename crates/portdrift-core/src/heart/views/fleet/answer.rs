//! What one agent answered the fleet view: its findings and whether its check was
//! complete, or why there is no answer.

use std::fmt;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::model::{Backend, Family, Protocol};

/// What one agent answered.
#[derive(Debug, Clone)]
pub struct AgentAnswer {
    /// The node the agent's pod runs on (its `spec.nodeName`; the pod name without one).
    pub node: String,
    pub pod: String,
    /// The agent's `/findings` document, or why there is none.
    pub outcome: Result<AgentReport, NoAnswer>,
    /// Why the agent's pod was not ready when asked: its answer is shown, but may be
    /// out of date (a scan that stopped succeeding), so it resolves nothing.
    pub unready: Option<String>,
}

/// An agent's `/findings` document (the scan report it writes), as far as the view
/// reads it: `decode::fleet` reads it from the agent's JSON, the Prometheus view from
/// the agents' series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentReport {
    /// Each finding, or what this portdrift cannot read in it (see [`read_finding`]).
    pub findings: Vec<Result<Finding, String>>,
    /// Why the report's coverage says the check was incomplete (its first
    /// `not_checked`); None when it says complete, or nothing.
    pub incomplete: Option<String>,
}

/// Why an agent did not answer with findings. Shown as a sentence (in JSON too: the
/// `reason` of `unanswered`); the kinds are for the view's own decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoAnswer {
    /// Nobody was asked: listing the agents' pods failed, for this reason.
    NotAsked(String),
    /// The node has no pod of the agents.
    NoAgentPod { namespace: String, selector: String },
    /// The agent's pod has no IP to reach it at.
    NotRunning { phase: String },
    /// The agent did not answer in time.
    Timeout(Duration),
    /// The agent keeps `/findings` on its node's loopback, out of the pod proxy's reach.
    LoopbackOnly,
    /// The API server's pod proxy answered with an error status.
    Proxy { code: u16, message: String },
    /// The request failed otherwise, in the client's words.
    Request(String),
    /// The answer is not JSON, in the decoder's words.
    NotJson(String),
    /// JSON, but without a `findings` list.
    NoFindingsList,
    /// Prometheus cannot scrape the agent (`up` 0).
    NotScraped,
    /// Prometheus scrapes the agent, which has not reported a scan.
    NoScanYet,
}

impl NoAnswer {
    /// The pod proxy refused the caller's credentials.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, NoAnswer::Proxy { code: 403, .. })
    }
}

impl fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoAnswer::NotAsked(why) => write!(f, "not asked: {why}"),
            NoAnswer::NoAgentPod { namespace, selector } => {
                write!(f, "no agent pod on this node (namespace {namespace}, {selector})")
            }
            NoAnswer::NotRunning { phase } => write!(f, "not running (phase {phase}, no pod IP)"),
            NoAnswer::Timeout(limit) => write!(f, "no answer within {limit:?}"),
            NoAnswer::LoopbackOnly => f.write_str(
                "serves /findings on its node's loopback only (--findings-listen, the default; see SECURITY.md), which the pod proxy does not reach: read the details with portdrift fleet --prometheus URL",
            ),
            NoAnswer::Proxy { code, message } => write!(f, "{code} from the pod proxy: {message}"),
            NoAnswer::Request(why) => f.write_str(why),
            NoAnswer::NotJson(why) => write!(f, "answered, but not with findings JSON: {why}"),
            NoAnswer::NoFindingsList => f.write_str("answered without a findings list"),
            NoAnswer::NotScraped => f.write_str("Prometheus cannot scrape it (up 0)"),
            NoAnswer::NoScanYet => {
                f.write_str("scraped, but no scan reported yet (no portdrift_coverage_complete)")
            }
        }
    }
}

impl Serialize for NoAnswer {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A finding of an agent's answer, or what this portdrift cannot read in it: a field
/// it needs that is missing, a spelling it does not know (`kind "port-hijack"`), else
/// what the decoder said.
pub fn read_finding(finding: &Value) -> Result<Finding, String> {
    <Finding as Deserialize>::deserialize(finding).map_err(|error| {
        let spelled = |field: &str| finding.get(field).and_then(Value::as_str);
        let missing = |field: &str| spelled(field).is_none().then(|| format!("no {field}"));
        unknown::<Kind>(finding, "kind")
            .or_else(|| missing("kind"))
            .or_else(|| unknown::<Severity>(finding, "severity"))
            .or_else(|| missing("severity"))
            .or_else(|| unknown::<Protocol>(finding, "protocol"))
            .or_else(|| unknown::<Family>(finding, "family"))
            .or_else(|| unknown::<Backend>(finding, "backend"))
            .unwrap_or_else(|| error.to_string())
    })
}

/// `field "text"` when the finding spells `field` in a way that is not a `T`.
fn unknown<T: DeserializeOwned>(finding: &Value, field: &str) -> Option<String> {
    let text = finding.get(field)?.as_str()?;
    let known = serde_json::from_value::<T>(Value::String(text.to_string())).is_ok();
    (!known).then(|| format!("{field} {text:?}"))
}
