//! Findings: what the detector reports, what makes two of them the same finding, and
//! their JSON form (a contract relied on by outside checks: fields may be added, never
//! renamed or removed).

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::heart::citation::Citation;
use crate::heart::model::{Backend, Family, ProcessInfo, Protocol};

/// The kinds of drift portdrift knows.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    schemars::JsonSchema,
    serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A NodePort rule for a port that no Service owns, or that belongs to another
    /// (deleted) Service than the port's owner.
    StaleNodeport,
    /// A NodePort's rules DNAT to an `ip:port` no EndpointSlice of the Service lists.
    StaleEndpoint,
    /// A ready endpoint that the port's rules never DNAT to.
    MissingEndpoint,
    /// The Service has endpoints but the node has no NodePort rule for it (or,
    /// node-wide, the jump to every NodePort rule is gone).
    MissingRule,
    /// More than one NodePort rule for one port in one backend.
    DuplicateRule,
    /// kube-proxy rules in more than one backend.
    BackendSplit,
    /// A process listening on a NodePort.
    Squatter,
    /// Two Services claim one nodePort and protocol in the API.
    NodeportCollision,
    /// A kube-proxy chain that nothing jumps to.
    OrphanChain,
    /// A rule line the parser could not understand: the analysis around it is incomplete.
    UnparsedRule,
    /// A CNI hostPort mapping on a port a Service uses as its nodePort.
    HostportConflict,
    /// The node's ephemeral port range overlaps the NodePort range without reserving it.
    PortRangeOverlap,
    /// A rule in kube-proxy's chains that kube-proxy never writes (a DNAT to nowhere, a
    /// jump to an undeclared chain).
    MalformedRule,
    /// A NodePort rule commented as its port's owner whose chain name no kube-proxy
    /// release gives that owner, with nothing else showing whose it is: left alone.
    UnattributedRule,
    /// An accepted exception that has accepted no finding for a week (the agent).
    IdleAcceptance,
    /// A Cilium service slot names a backend ID the backends map does not hold
    /// (`backend N not found`): connections that select it fail.
    MissingBackend,
    /// A backend in Cilium's backends map that no service slot references: a leak that
    /// fills the map.
    LeakedBackend,
    /// A Cilium frontend's reverse-NAT entry is missing or names another address: replies
    /// leave with the wrong source.
    RevNatMismatch,
    /// A Cilium frontend's active or quarantined count disagrees with its slots.
    SlotCountMismatch,
    /// A Cilium service map within 10% of its `max_entries`: new entries will fail.
    MapNearlyFull,
}

impl Kind {
    pub const ALL: [Kind; 20] = [
        Kind::StaleNodeport,
        Kind::StaleEndpoint,
        Kind::MissingEndpoint,
        Kind::MissingRule,
        Kind::DuplicateRule,
        Kind::BackendSplit,
        Kind::Squatter,
        Kind::NodeportCollision,
        Kind::OrphanChain,
        Kind::UnparsedRule,
        Kind::HostportConflict,
        Kind::PortRangeOverlap,
        Kind::MalformedRule,
        Kind::UnattributedRule,
        Kind::IdleAcceptance,
        Kind::MissingBackend,
        Kind::LeakedBackend,
        Kind::RevNatMismatch,
        Kind::SlotCountMismatch,
        Kind::MapNearlyFull,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::StaleNodeport => "stale-nodeport",
            Kind::StaleEndpoint => "stale-endpoint",
            Kind::MissingEndpoint => "missing-endpoint",
            Kind::MissingRule => "missing-rule",
            Kind::DuplicateRule => "duplicate-rule",
            Kind::BackendSplit => "backend-split",
            Kind::Squatter => "squatter",
            Kind::NodeportCollision => "nodeport-collision",
            Kind::OrphanChain => "orphan-chain",
            Kind::UnparsedRule => "unparsed-rule",
            Kind::HostportConflict => "hostport-conflict",
            Kind::PortRangeOverlap => "port-range-overlap",
            Kind::MalformedRule => "malformed-rule",
            Kind::UnattributedRule => "unattributed-rule",
            Kind::IdleAcceptance => "idle-acceptance",
            Kind::MissingBackend => "missing-backend",
            Kind::LeakedBackend => "leaked-backend",
            Kind::RevNatMismatch => "rev-nat-mismatch",
            Kind::SlotCountMismatch => "slot-count-mismatch",
            Kind::MapNearlyFull => "map-nearly-full",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How urgent a finding is. Ordered from most to least severe.
// Deserialize: `fleet` reads it back from the agents' `/findings`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    schemars::JsonSchema,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Traffic for a live Service is going to the wrong place right now.
    Critical,
    /// Drift that will hurt later or that kube-proxy should have fixed.
    Warning,
    /// Harmless leftovers and changes still settling.
    Info,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a finding is accepted as an exception (`heart::acceptance`), in its JSON and
/// report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Accepted {
    pub reason: String,
    /// RFC 3339, or null when it does not expire.
    #[schemars(extend("format" = "date-time"))]
    pub expires: Option<String>,
    /// Where the acceptance was stated: `acceptances entry 2`, or a Service's
    /// annotation.
    // Default: agents older than this field wrote acceptances without it.
    #[serde(default)]
    pub by: String,
}

/// What makes two findings the same finding, within a scan and across scans: it stays
/// while the same drift persists, whatever its message, evidence or severity (a pending
/// difference's grace window ends). Built by [`Finding::identity`], which leaves an
/// empty Service or target out, so that one is the same as an absent one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FindingId {
    pub kind: Kind,
    pub port: Option<u16>,
    pub protocol: Option<Protocol>,
    pub backend: Option<Backend>,
    pub service: Option<String>,
    pub target: Option<String>,
    pub family: Option<Family>,
}

impl FindingId {
    /// The first 16 hex digits of the SHA-256 of the identity's fields: the same drift
    /// has the same digest in every scan, on every node and across portdrift's versions.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let parts = [
            self.kind.as_str(),
            self.backend.map(|b| b.as_str()).unwrap_or(""),
            self.family.map(|f| f.as_str()).unwrap_or(""),
            self.protocol.map(|p| p.as_str()).unwrap_or(""),
            &self.port.map(|p| p.to_string()).unwrap_or_default(),
            self.service.as_deref().unwrap_or(""),
            self.target.as_deref().unwrap_or(""),
        ];
        let digest = Sha256::digest(parts.join("\0").as_bytes());
        data_encoding::HEXLOWER.encode(&digest[..8])
    }

    /// The identity ordered by its fields' spellings, an absent one first, but for the
    /// target and family, which compare last.
    fn spelled(&self) -> (&str, Option<u16>, &str, &str, Option<&str>) {
        (
            self.kind.as_str(),
            self.port,
            self.protocol.map_or("", Protocol::as_str),
            self.backend.map_or("", Backend::as_str),
            self.service.as_deref(),
        )
    }

    /// The target's bytes and a `|` after them, as the identity once held it in text: so
    /// a target sorts after the longer ones it begins, and an absent one after all.
    fn target_in_text(&self) -> impl Iterator<Item = u8> + '_ {
        let target = self.target.as_deref().unwrap_or_default();
        target.bytes().chain(std::iter::once(b'|'))
    }
}

/// The order the identity had when it was text, which the order of Events created in a
/// scan and of the agent's log lines follows.
impl Ord for FindingId {
    fn cmp(&self, other: &FindingId) -> Ordering {
        self.spelled()
            .cmp(&other.spelled())
            .then_with(|| self.target_in_text().cmp(other.target_in_text()))
            .then_with(|| self.family.cmp(&other.family))
    }
}

impl PartialOrd for FindingId {
    fn partial_cmp(&self, other: &FindingId) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// One difference between what the cluster says and what the node does.
///
/// In JSON every field is present (null, `[]` or `false` where it does not apply),
/// after an `id`.
// Read back (the fleet reads its agents' findings), a field an older agent did not
// write yet is null, empty or false, and the `id` is ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(remote = "Self")]
#[schemars(transform = id_in_schema)]
pub struct Finding {
    pub kind: Kind,
    pub severity: Severity,
    pub protocol: Option<Protocol>,
    /// The NodePort; null only for node-wide findings that concern no single port.
    pub port: Option<u16>,
    pub family: Option<Family>,
    pub backend: Option<Backend>,
    /// `namespace/name`.
    pub service: Option<String>,
    /// The Service's port name as kube-proxy names it (empty for an unnamed port).
    pub service_port: Option<String>,
    /// Every Service the finding concerns when there are several (a nodeport-collision's
    /// claimants; `service` holds the first).
    #[serde(default)]
    pub services: Vec<String>,
    /// Every NodePort the finding concerns when it is about several (a backend-split).
    #[serde(default)]
    pub ports: Vec<u16>,
    /// `ip:port` of a DNAT target, `[v6]:port` for IPv6.
    pub target: Option<String>,
    /// The rule as its backend prints it.
    pub rule: Option<String>,
    /// Where the rule was found: `file:line`.
    #[schemars(with = "Option<String>")]
    pub rule_source: Option<Citation>,
    pub process: Option<ProcessInfo>,
    /// The socket inode of a squatting listener.
    pub inode: Option<u64>,
    /// Seconds left in the grace window when the difference is still settling (the
    /// Service changed recently); such a finding is `info` until then.
    pub pending_seconds: Option<u64>,
    /// The finding was drawn from a cluster state that is no longer current.
    #[serde(default)]
    pub on_stale_cluster_state: bool,
    /// One human sentence: what is wrong and what to do.
    #[serde(default)]
    pub message: String,
    /// Supporting facts beyond the fields above (chain path, other rules), for people.
    #[serde(default)]
    pub evidence: Vec<String>,
    /// Accepted as an exception (an acceptances file, a Service's annotation): shown,
    /// never counted.
    pub accepted: Option<Accepted>,
}

/// The `id` the hand-written [`Serialize`] adds (always), in the schema the derive
/// writes for the other fields.
fn id_in_schema(schema: &mut schemars::Schema) {
    if let Some(properties) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) {
        properties.insert(
            "id".into(),
            serde_json::json!({
                "description": "A stable hash of what identifies the finding (kind, backend, family, protocol, port, Service, target): the same in its Event and log line.",
                "type": "string",
                "pattern": "^[0-9a-f]{16}$"
            }),
        );
    }
    if let Some(required) = schema.get_mut("required").and_then(|r| r.as_array_mut()) {
        required.insert(0, "id".into());
    }
}

/// A finding's JSON: its `id`, then its fields.
impl Serialize for Finding {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct WithId<'a> {
            id: String,
            #[serde(flatten, serialize_with = "fields")]
            finding: &'a Finding,
        }
        fn fields<S: serde::Serializer>(f: &&Finding, s: S) -> Result<S::Ok, S::Error> {
            Finding::serialize(f, s)
        }
        WithId {
            id: self.id(),
            finding: self,
        }
        .serialize(serializer)
    }
}

/// A finding's JSON read back: its fields, without the `id` (derived from them).
impl<'de> Deserialize<'de> for Finding {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Finding, D::Error> {
        Finding::deserialize(deserializer)
    }
}

impl Finding {
    /// A finding with only its kind, severity and message set; callers fill the rest.
    pub fn new(kind: Kind, severity: Severity, message: impl Into<String>) -> Finding {
        Finding {
            kind,
            severity,
            protocol: None,
            port: None,
            family: None,
            backend: None,
            service: None,
            service_port: None,
            services: Vec::new(),
            ports: Vec::new(),
            target: None,
            rule: None,
            rule_source: None,
            process: None,
            inode: None,
            pending_seconds: None,
            on_stale_cluster_state: false,
            message: message.into(),
            evidence: Vec::new(),
            accepted: None,
        }
    }

    /// A stable id: the [`FindingId::digest`] of the finding's identity, the same in its
    /// JSON, Event and log line.
    pub fn id(&self) -> String {
        self.identity().digest()
    }

    /// The finding's identity across scans (see [`FindingId`]).
    pub fn identity(&self) -> FindingId {
        let present = |text: &Option<String>| text.clone().filter(|t| !t.is_empty());
        FindingId {
            kind: self.kind,
            port: self.port,
            protocol: self.protocol,
            backend: self.backend,
            service: present(&self.service),
            target: present(&self.target),
            family: self.family,
        }
    }

    /// Sort key: by port, then most severe first, then kind, so reports group by port;
    /// rule positions by file, then number (line 97 before line 100, rule 9 before 10).
    pub fn sort_key(&self) -> impl Ord + '_ {
        (
            self.port.unwrap_or(u16::MAX),
            self.protocol,
            self.severity,
            self.kind,
            self.backend,
            self.family,
            self.target.as_deref(),
            self.rule_source.as_ref(),
        )
    }
}

#[cfg(test)]
mod tests;
