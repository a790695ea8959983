//! The diff: desired + observed → findings. Pure: no I/O, no clock.
//!
//! One function per finding kind. Each rule is first *attributed* to a Service port
//! (by the hash in its chain name, which kube-proxy keeps even when it drops comments,
//! or by its comment), then judged against the Service that owns its port now.

use std::ops::RangeInclusive;

use crate::heart::cilium::cilium_findings;
use crate::heart::desired::DesiredState;
use crate::heart::finding::Finding;
use crate::heart::ipvs::ipvs_findings;
use crate::heart::model::ProxyMode;
use crate::heart::observed::Observed;
use crate::heart::proxy_mode::{self, Datapath, ProxyDecision};

mod attribution;
mod backend_split;
mod builders;
mod collision;
mod duplicate;
mod entry;
mod hostport;
mod ipvs;
mod marks;
mod missing;
mod orphan;
mod port_range;
mod squatter;
mod stale;
mod unreadable;

use attribution::{DesiredIndex, Judged, judge_source};
use backend_split::{backend_split, choose_primaries};
use collision::nodeport_collisions;
use duplicate::duplicate_rules;
use entry::unreached_nodeports;
use hostport::hostport_conflicts;
use marks::{mark_pending, mark_stale_state};
use missing::missing_rules;
use orphan::orphan_chains;
use port_range::port_range_overlap;
use squatter::squatters;
use stale::stale_rules;
use unreadable::{malformed_rules, unparsed_rules};

/// Settings that change what counts as drift.
#[derive(Debug, Clone)]
pub struct DetectConfig {
    /// The cluster's `--service-node-port-range`.
    pub nodeport_range: RangeInclusive<u16>,
    /// How long kube-proxy may take to apply a change before a difference counts.
    pub grace: Option<Grace>,
    /// The cluster state is the last good one but no longer current (the API watch
    /// is failing or silent): findings that depend on it are marked, so nobody —
    /// least of all repair — acts on them as if they were fresh.
    pub cluster_state_stale: bool,
    /// Findings accepted as exceptions, and the time their expiry is judged at. None:
    /// none are applied, not even the Services' annotations.
    pub acceptances: Option<crate::heart::acceptance::AcceptanceInput>,
}

/// kube-proxy applies API changes seconds late: a difference about a Service that
/// changed less than `window` before `now` is reported as pending (severity info).
/// `now` is passed in, so the detector stays free of clocks.
#[derive(Debug, Clone, Copy)]
pub struct Grace {
    pub now: jiff::Timestamp,
    pub window: std::time::Duration,
}

impl Default for DetectConfig {
    fn default() -> Self {
        DetectConfig {
            nodeport_range: 30000..=32767,
            grace: None,
            cluster_state_stale: false,
            acceptances: None,
        }
    }
}

/// How many unparsed lines of one source are reported one by one.
const UNPARSED_REPORTED: usize = 100;

/// What the detector found, and the proxy mode it judged the node by.
#[derive(Debug, Clone)]
pub struct Detection {
    pub findings: Vec<Finding>,
    pub proxy: ProxyDecision,
}

/// Finds every difference between the desired and the observed state. Without a
/// desired state only the checks that need no cluster state run (duplicates, backend
/// split, orphans, unparsed lines, rules kube-proxy never writes).
pub fn detect(desired: Option<&DesiredState>, observed: &Observed, config: &DetectConfig) -> Vec<Finding> {
    examine(desired, observed, config).findings
}

/// [`detect`], with the proxy mode and the sources the verdicts rest on.
pub fn examine(desired: Option<&DesiredState>, observed: &Observed, config: &DetectConfig) -> Detection {
    let empty = DesiredState::default();
    let index = DesiredIndex::new(desired.unwrap_or(&empty));
    let has_desired = desired.is_some();
    let mut findings = Vec::new();

    // Each rule is attributed to a Service port once; every check reads the verdict.
    let judged: Vec<Vec<Judged<'_>>> = observed.dumps.iter().map(|s| judge_source(s, &index)).collect();
    let primaries = choose_primaries(&observed.dumps, &judged, &index, has_desired);
    let mut proxy = proxy_mode::decide(observed, &primaries);
    for (source, judged) in observed.dumps.iter().zip(&judged) {
        // iptables-mode rules that IPVS mode's KUBE-SERVICES no longer leads to are
        // leftovers no packet reaches: not judged (the coverage says so).
        if source.signals.services_dispatch != Some(ProxyMode::Ipvs) {
            if has_desired {
                stale_rules(source, judged, &index, &mut findings);
                hostport_conflicts(source, &index, &mut findings);
            }
            duplicate_rules(source, judged, &index, &mut findings);
        }
        orphan_chains(source, &index, &mut findings);
        unparsed_rules(source, &mut findings);
        malformed_rules(source, &mut findings);
    }
    backend_split(&observed.dumps, &primaries, &mut findings);
    if proxy.mode.is_read() {
        for &primary in primaries.values() {
            unreached_nodeports(&observed.dumps[primary], &mut findings);
        }
    }
    if let Some(maps) = &observed.cilium {
        // The maps' NodePorts are compared with the cluster only when Cilium is the
        // node's Service proxy; their own consistency always.
        let judged = desired.filter(|_| proxy.datapath == Some(Datapath::CiliumMaps));
        let check = cilium_findings(judged, maps, observed.cilium_confirm.as_ref());
        findings.extend(check.findings);
        proxy.unjudged.extend(check.not_checked);
    }
    if proxy.datapath == Some(Datapath::IpvsServers)
        && let Some(read) = &observed.ipvs_table
    {
        proxy.unjudged.extend(ipvs::not_judged(desired, read, config));
        if let Some(desired) = desired {
            findings.extend(ipvs_findings(
                desired,
                &read.table,
                &read.origin,
                config.nodeport_range.clone(),
            ));
        }
    }
    port_range_overlap(observed, config, &mut findings);
    if has_desired {
        if proxy.mode.is_read() {
            for (&family, &primary) in &primaries {
                missing_rules(
                    family,
                    &observed.dumps[primary],
                    &judged[primary],
                    &index,
                    &mut findings,
                );
            }
        }
        squatters(observed, &index, config, &mut findings);
        nodeport_collisions(&index, &mut findings);
    }
    if let Some(grace) = config.grace {
        mark_pending(&mut findings, &index, grace);
    }
    if config.cluster_state_stale && has_desired {
        mark_stale_state(&mut findings);
    }
    findings.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    drop_identical(&mut findings);
    Detection { findings, proxy }
}

/// Removes findings identical to an earlier one (two rules that prove the same thing in
/// the same words): a report lists each fact once. Identical findings share a sort key,
/// so only neighbours with an equal key are compared.
fn drop_identical(findings: &mut Vec<Finding>) {
    let mut kept: Vec<Finding> = Vec::with_capacity(findings.len());
    let mut group_start = 0;
    for f in findings.drain(..) {
        if kept.last().is_none_or(|last| last.sort_key() != f.sort_key()) {
            group_start = kept.len();
        }
        if !kept[group_start..].contains(&f) {
            kept.push(f);
        }
    }
    *findings = kept;
}

#[cfg(test)]
mod tests;
