//! What becomes a Kubernetes Event, decided without I/O: which findings qualify, the
//! reason each kind is reported under, which object an Event regards and what it says
//! ([`super::budget`] decides when it is written).

use crate::heart::visible::visible;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use crate::agent::repair::{ActionOutcome, RepairResult};
use crate::heart::finding::{Finding, Kind, Severity};

/// The API server's limit on an Event's `note` (`message`), in bytes.
pub const NOTE_LIMIT: usize = 1024;

/// The API server's limit on `reportingInstance`, `action` and `reason`, in bytes.
pub const FIELD_LIMIT: usize = 128;

/// `reportingController` (and `source.component` for core Events).
pub const CONTROLLER: &str = "portdrift";

/// `action`: what portdrift did when it noticed the drift.
pub const ACTION: &str = "Scan";

/// The Event reason for a finding kind, UpperCamelCase as Kubernetes reasons are.
pub fn reason(kind: Kind) -> &'static str {
    match kind {
        Kind::StaleNodeport => "StaleNodePortRule",
        Kind::StaleEndpoint => "StaleEndpointRule",
        Kind::MissingEndpoint => "MissingEndpointRule",
        Kind::MissingRule => "MissingNodePortRule",
        Kind::DuplicateRule => "DuplicateNodePortRule",
        Kind::BackendSplit => "IptablesBackendSplit",
        Kind::Squatter => "NodePortSquatter",
        Kind::NodeportCollision => "NodePortCollision",
        Kind::OrphanChain => "OrphanChain",
        Kind::UnparsedRule => "UnparsedRule",
        Kind::HostportConflict => "HostPortConflict",
        Kind::PortRangeOverlap => "PortRangeOverlap",
        Kind::MalformedRule => "MalformedRule",
        Kind::UnattributedRule => "UnattributedRule",
        Kind::IdleAcceptance => "IdleAcceptance",
        Kind::MissingBackend => "CiliumBackendNotFound",
        Kind::LeakedBackend => "CiliumLeakedBackend",
        Kind::RevNatMismatch => "CiliumRevNatMismatch",
        Kind::SlotCountMismatch => "CiliumSlotCountMismatch",
        Kind::MapNearlyFull => "CiliumMapNearlyFull",
    }
}

/// The Event `type` for a severity; `None`: no Event at all. Info findings (harmless
/// leftovers, differences still in their grace window) would bury the ones to act on.
pub fn event_type(severity: Severity) -> Option<&'static str> {
    match severity {
        Severity::Critical | Severity::Warning => Some("Warning"),
        Severity::Info => None,
    }
}

/// Whether a finding is worth an Event now. Pending findings are `info` already; a
/// finding drawn from a cluster state the watch cannot keep current may be an artefact
/// of that state, and an Event cannot be taken back: it waits until the view is fresh.
pub fn qualifies(f: &Finding) -> bool {
    event_type(f.severity).is_some() && f.pending_seconds.is_none() && !f.on_stale_cluster_state
}

/// The object an Event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Regarding {
    /// The Service the finding names.
    Service { namespace: String, name: String },
    /// This node: for findings that concern no Service (squatters on unallocated
    /// ports, backend split, orphan chains, ...).
    Node,
}

/// The Service a finding names (`namespace/name`), else this node.
pub fn regarding(f: &Finding) -> Regarding {
    let service = f.service.as_deref().and_then(|s| s.split_once('/'));
    match service {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => Regarding::Service {
            namespace: namespace.to_string(),
            name: name.to_string(),
        },
        _ => Regarding::Node,
    }
}

/// An Event to write, before the API's identities (UIDs) are looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDraft {
    pub reason: &'static str,
    pub type_: &'static str,
    pub note: String,
    pub regarding: Regarding,
}

impl EventDraft {
    /// The draft for a finding, `None` when it makes no Event (see [`event_type`]).
    pub fn of(f: &Finding) -> Option<EventDraft> {
        if f.accepted.is_some() {
            return None;
        }
        Some(EventDraft {
            reason: reason(f.kind),
            type_: event_type(f.severity)?,
            // Event notes are read with kubectl on terminals: nothing from the node
            // (a rule comment, a process name) may carry a control byte there.
            // The finding's id ends the note, as in its JSON and log line, so the Event
            // can be matched with them; the message is cut to make room for it.
            note: {
                let id = format!(" [finding {}]", f.id());
                truncate(&visible(&f.message), NOTE_LIMIT - id.len()) + &id
            },
            regarding: regarding(f),
        })
    }
}

/// The Event for one repair action that ran: on this Node, whose rules it changed.
/// A dry run, or an action skipped, changed nothing and makes none.
pub fn repair_draft(outcome: &ActionOutcome) -> Option<EventDraft> {
    let (reason, type_, verb) = match &outcome.result {
        RepairResult::Applied => ("NodePortRuleRemoved", "Normal", "removed".to_string()),
        RepairResult::Failed(why) => (
            "NodePortRepairFailed",
            "Warning",
            format!("could not remove ({why})"),
        ),
        RepairResult::DryRun | RepairResult::Skipped(_) => return None,
    };
    let action = &outcome.action;
    let note = format!(
        "portdrift {verb}: {}; for: {}",
        action.describe(),
        action.reasons.join("; ")
    );
    Some(EventDraft {
        reason,
        type_,
        note: truncate(&visible(&note), NOTE_LIMIT),
        regarding: Regarding::Node,
    })
}

/// The reference to this Node that Events regard. Its `uid` is the node's name, as the
/// kubelet and node-problem-detector write it: `kubectl describe node` looks for
/// Events with exactly that reference.
pub fn node_reference(node: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.into()),
        uid: Some(node.into()),
        ..ObjectReference::default()
    }
}

/// The `events.k8s.io/v1` Event for `draft` about `regarding` (a Service or the Node),
/// `related` to this Node for a Service. `stamp` is its `eventTime` and, as client-go
/// does, names it (`<object>.<nanoseconds in hex>`).
pub fn k8s_event(
    draft: &EventDraft,
    regarding: ObjectReference,
    related: Option<ObjectReference>,
    node: &str,
    stamp: Timestamp,
) -> Event {
    let object = regarding.name.as_deref().unwrap_or(CONTROLLER);
    let suffix = format!(".{:x}", stamp.as_nanosecond());
    // A name is at most 253 characters.
    let base = truncate_bytes(object, 253 - suffix.len());
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{base}{suffix}")),
            namespace: Some(regarding.namespace.clone().unwrap_or_else(|| "default".into())),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(stamp)),
        type_: Some(draft.type_.into()),
        reason: Some(draft.reason.into()),
        note: Some(draft.note.clone()),
        action: Some(ACTION.into()),
        reporting_controller: Some(CONTROLLER.into()),
        reporting_instance: Some(truncate_bytes(node, FIELD_LIMIT).into()),
        regarding: Some(regarding),
        related,
        ..Event::default()
    }
}

/// The longest prefix of `text` within `limit` bytes (on a character boundary).
fn truncate_bytes(text: &str, limit: usize) -> &str {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` cut to at most `limit` bytes on a character boundary, with an ellipsis when
/// cut, so the API server does not refuse it.
pub fn truncate(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    const ELLIPSIS: &str = "…";
    format!(
        "{}{ELLIPSIS}",
        truncate_bytes(text, limit.saturating_sub(ELLIPSIS.len()))
    )
}

#[cfg(test)]
mod tests;
