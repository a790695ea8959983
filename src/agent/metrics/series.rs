//! The per-finding series of `portdrift_finding`, capped, label tallies, and families
//! whose every series exists from the start.

use std::collections::BTreeMap;
use std::hash::Hash;

use prometheus_client::metrics::family::{Family, MetricConstructor};

use super::{FindingLabel, NO_BACKEND};
use crate::heart::finding::{Finding, Severity};
use crate::heart::model::{Backend, Protocol};

/// `family` with a series for each of `labels`, at zero: dashboards and alerts see
/// every bounded value before the first scan sets it.
pub(super) fn at_zero<L, M, C>(
    family: Family<L, M, C>,
    labels: impl IntoIterator<Item = L>,
) -> Family<L, M, C>
where
    L: Clone + Hash + Eq,
    M: Clone,
    C: MetricConstructor<M>,
{
    for label in labels {
        family.get_or_create_owned(&label);
    }
    family
}

/// How often each label set occurs.
pub(super) fn tally<L: Hash + Eq>(labels: impl Iterator<Item = L>) -> Vec<(L, i64)> {
    let mut counts: std::collections::HashMap<L, i64> = std::collections::HashMap::new();
    for l in labels {
        *counts.entry(l).or_default() += 1;
    }
    counts.into_iter().collect()
}

/// The per-finding series: at most `max` label sets, chosen most severe first, then by
/// port, kind, protocol, service and backend, so the same findings always get the same
/// series; and how many findings were left out.
pub(super) fn detail_series<'a>(
    findings: impl Iterator<Item = &'a Finding>,
    max: usize,
) -> (Vec<(FindingLabel, i64)>, usize) {
    let mut by_label: BTreeMap<(Severity, u16, FindingLabel), i64> = BTreeMap::new();
    for f in findings {
        // A finding without a port (node-wide) sorts after every port.
        let port_order = f.port.unwrap_or(u16::MAX);
        *by_label
            .entry((f.severity, port_order, finding_label(f)))
            .or_default() += 1;
    }
    let mut shown = Vec::new();
    let mut not_shown = 0;
    for ((_, _, label), n) in by_label {
        if shown.len() < max {
            shown.push((label, n));
        } else {
            not_shown += usize::try_from(n).unwrap_or(usize::MAX);
        }
    }
    (shown, not_shown)
}

fn finding_label(f: &Finding) -> FindingLabel {
    FindingLabel {
        kind: f.kind.as_str(),
        severity: f.severity.as_str(),
        protocol: f.protocol.map_or("", Protocol::as_str),
        port: f.port.map(|p| p.to_string()).unwrap_or_default(),
        service: f.service.clone().unwrap_or_default(),
        backend: f.backend.map_or(NO_BACKEND, Backend::as_str),
    }
}
