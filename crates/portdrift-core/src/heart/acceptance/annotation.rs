//! Acceptances a team states on its own Service, without touching the agent's
//! config: `portdrift.io/accept: "missing-endpoint,squatter"` with
//! `portdrift.io/accept-reason` (required) and `portdrift.io/accept-expires`
//! (optional, RFC 3339). They accept only findings about that Service.

use std::collections::BTreeMap;

use super::{Acceptance, Origin};
use crate::heart::finding::Kind;

/// The finding kinds a Service accepts, comma-separated.
pub const ANNOTATION_ACCEPT: &str = "portdrift.io/accept";
/// Why; an acceptance without a reason is not applied.
pub const ANNOTATION_REASON: &str = "portdrift.io/accept-reason";
/// When the acceptance ends (RFC 3339).
pub const ANNOTATION_EXPIRES: &str = "portdrift.io/accept-expires";

/// The annotations the API watch keeps on a Service.
pub const ACCEPT_ANNOTATIONS: [&str; 3] = [ANNOTATION_ACCEPT, ANNOTATION_REASON, ANNOTATION_EXPIRES];

/// The acceptances Service `namespace/name` states in its annotations (none when it
/// has no `portdrift.io/accept`), or why they cannot be applied.
pub fn service_acceptances(
    namespace: &str,
    name: &str,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Vec<Acceptance>, String> {
    let Some(annotations) = annotations else {
        return Ok(Vec::new());
    };
    let Some(kinds) = annotations.get(ANNOTATION_ACCEPT) else {
        return Ok(Vec::new());
    };
    let reason = annotations
        .get(ANNOTATION_REASON)
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
        .ok_or_else(|| format!("{ANNOTATION_ACCEPT} without a {ANNOTATION_REASON}: not applied; say why"))?;
    let expires = match annotations.get(ANNOTATION_EXPIRES) {
        Some(at) => Some(
            at.trim()
                .parse::<jiff::Timestamp>()
                .map_err(|_| format!("{ANNOTATION_EXPIRES} {at:?} is not an RFC 3339 time: not applied"))?,
        ),
        None => None,
    };
    let service = format!("{namespace}/{name}");
    let mut accepted = Vec::new();
    for kind in kinds.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        let kind = Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == kind)
            .ok_or_else(|| format!("{ANNOTATION_ACCEPT}: {kind:?} is not a finding kind: not applied"))?;
        accepted.push(Acceptance {
            kind: Some(kind),
            service: Some(service.clone()),
            reason: reason.to_string(),
            expires,
            origin: Origin::Service(service.clone()),
            ..Acceptance::default()
        });
    }
    if accepted.is_empty() {
        return Err(format!("{ANNOTATION_ACCEPT} names no finding kind: not applied"));
    }
    Ok(accepted)
}
