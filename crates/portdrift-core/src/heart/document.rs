//! The envelope of every JSON document portdrift writes (`scan --format json`,
//! `/findings`, `fleet`, `ports`, `lint`, a snapshot's `snapshot.json`): which
//! contract it follows, what it is, when, by which version and about which node it was
//! written. Scripts
//! and `fleet` read these documents; within `portdrift.io/v1` fields are added, never
//! renamed or removed (docs/scan.md, "The JSON contract").

use serde::Serialize;

/// The contract every document follows.
pub const API_VERSION: &str = "portdrift.io/v1";

/// What a document is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub enum DocumentKind {
    /// One node's scan: `scan --format json` and the agent's `/findings`.
    ScanReport,
    /// The findings of many agents: `fleet --format json`.
    FleetView,
    /// The cluster's NodePort allocations: `ports --format json`.
    PortAllocation,
    /// Service manifests checked: `lint --format json`.
    LintReport,
    /// How a snapshot was captured: a bundle's `snapshot.json`.
    Snapshot,
    /// Where a connection to a NodePort goes: `explain --format json`, `/explain`.
    Explanation,
}

impl DocumentKind {
    pub const ALL: [DocumentKind; 6] = [
        DocumentKind::ScanReport,
        DocumentKind::FleetView,
        DocumentKind::PortAllocation,
        DocumentKind::LintReport,
        DocumentKind::Snapshot,
        DocumentKind::Explanation,
    ];
}

/// A document: the envelope's fields, then the body's own.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Document<'a, T: Serialize> {
    #[serde(rename = "apiVersion")]
    pub api_version: &'static str,
    pub kind: DocumentKind,
    /// When the document was written (RFC 3339, UTC); the caller reads the clock.
    pub generated_at: String,
    pub portdrift_version: &'static str,
    /// The node the document is about (a scan, a snapshot), when its name is known;
    /// null for a document about no one node (`fleet`, `ports`, `lint`).
    pub node: Option<&'a str>,
    #[serde(flatten)]
    pub body: &'a T,
}

impl<'a, T: Serialize> Document<'a, T> {
    /// `body` as a document of `kind` about `node`, written at `at`.
    pub fn new(
        kind: DocumentKind,
        node: Option<&'a str>,
        at: jiff::Timestamp,
        body: &'a T,
    ) -> Document<'a, T> {
        Document {
            api_version: API_VERSION,
            kind,
            generated_at: at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            portdrift_version: env!("CARGO_PKG_VERSION"),
            node,
            body,
        }
    }
}

pub mod schema;

#[cfg(test)]
mod tests;
