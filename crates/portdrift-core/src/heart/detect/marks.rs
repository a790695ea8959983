//! Marks on findings: drawn from a stale cluster state, or pending within the grace period.

use crate::heart::finding::{Finding, Kind, Severity};

use super::Grace;
use super::attribution::DesiredIndex;

/// Marks the findings that rest on the cluster state when that state is stale.
pub(super) fn mark_stale_state(findings: &mut [Finding]) {
    for f in findings.iter_mut() {
        let depends = matches!(
            f.kind,
            Kind::StaleNodeport
                | Kind::StaleEndpoint
                | Kind::MissingEndpoint
                | Kind::MissingRule
                | Kind::Squatter
                | Kind::NodeportCollision
                | Kind::HostportConflict
        );
        if depends {
            f.on_stale_cluster_state = true;
            f.message = format!(
                "(cluster state not current: the API watch is failing) {}",
                f.message
            );
        }
    }
}

// === grace ===

/// Turns differences about recently changed Services into pending, info findings. A
/// rule whose Service no longer exists has no clock: it is never pending.
pub(super) fn mark_pending(findings: &mut [Finding], index: &DesiredIndex<'_>, grace: Grace) {
    for f in findings.iter_mut() {
        if !matches!(
            f.kind,
            Kind::StaleEndpoint | Kind::MissingEndpoint | Kind::MissingRule
        ) {
            continue;
        }
        let (Some(protocol), Some(port), Some(service)) = (f.protocol, f.port, f.service.as_deref()) else {
            continue;
        };
        let changed = index
            .by_port
            .get((protocol, port))
            .iter()
            .map(|&i| index.port(i))
            .find(|p| {
                p.service.service() == service
                    && Some(p.service.port_name.as_str()) == f.service_port.as_deref()
            })
            .and_then(|p| p.last_change);
        let Some(changed) = changed else { continue };
        let age = grace.now.duration_since(changed);
        let window = jiff::SignedDuration::try_from(grace.window).unwrap_or(jiff::SignedDuration::MAX);
        if age >= window {
            continue;
        }
        let left = (window - age.max(jiff::SignedDuration::ZERO)).as_secs();
        f.severity = Severity::Info;
        f.pending_seconds = Some(left.max(0) as u64);
        f.message = format!(
            "Pending for {left} s more: {service} changed {} s ago, and kube-proxy may still be applying it. {}",
            age.as_secs().max(0),
            f.message
        );
    }
}
