//! What the API watch keeps per Service, counted by DHAT's heap profiler (not RSS,
//! which moves with the allocator's pages): on a synthetic cluster of realistic objects,
//! each Service and its EndpointSlice are trimmed and reduced to the records the watch
//! stores, and the desired state is built from them, as the agent keeps it. The test
//! fails when that exceeds its budget per Service.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::sync::Arc;

use portdrift::heart::desired::DesiredBuilder;
use portdrift::heart::desired::record::{ServiceRecord, SliceRecord};
use portdrift::heart::desired::slices::ZoneTable;
use portdrift::heart::desired::trim::{trim_endpoint_slice, trim_service};

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// The bytes allocated and not yet freed.
fn live() -> isize {
    dhat::HeapStats::get().curr_bytes as isize
}

/// Bytes kept per Service with 5 endpoints, the records (the watch's stores) and the
/// desired state built from them together: the project's goal. docs/performance.md
/// has the measured figures.
const KEPT_BUDGET: usize = 1_000;

#[test]
fn the_kept_state_stays_within_its_budget_per_service() {
    const SERVICES: usize = 4_000;
    let _profiler = dhat::Profiler::builder().testing().build();
    let (services, slices) = support::fake_apiserver::objects::realistic_cluster(SERVICES, 5);
    let node = Some("worker-7");

    // Trimmed as the watch trims them: what its stores held before records.
    let before = live();
    let trimmed: Vec<_> = services
        .iter()
        .map(|s| {
            let mut s = s.clone();
            trim_service(&mut s);
            Arc::new(s)
        })
        .collect();
    let trimmed_slices: Vec<_> = slices
        .iter()
        .map(|s| {
            let mut s = s.clone();
            trim_endpoint_slice(&mut s);
            Arc::new(s)
        })
        .collect();
    let objects = (live() - before) as usize;

    let before = live();
    let mut zones = ZoneTable::default();
    let service_records: Vec<_> = trimmed.iter().map(|s| Arc::new(ServiceRecord::of(s))).collect();
    let slice_records: Vec<_> = trimmed_slices
        .iter()
        .map(|s| Arc::new(SliceRecord::of(s, node, &mut zones)))
        .collect();
    let records = (live() - before) as usize;
    drop((trimmed, trimmed_slices));

    let before = live();
    let mut builder = DesiredBuilder::with_zones(node, zones.clone());
    for record in &service_records {
        builder.add_service_record(record);
    }
    for record in &slice_records {
        builder.add_slice_record(record);
    }
    let desired = builder.finish(None);
    let built = (live() - before) as usize;

    assert_eq!(desired.ports.len(), SERVICES, "every Service owns a nodePort");
    assert!(desired.problems.is_empty(), "{:?}", desired.problems);
    let (per_record, per_desired) = (records / SERVICES, built / SERVICES);
    let per_object = objects / SERVICES;
    println!(
        "per Service with 5 endpoints: records {per_record} bytes (the trimmed objects: {per_object}), desired state {per_desired} bytes; together {} (goal {KEPT_BUDGET})",
        per_record + per_desired
    );
    assert!(
        per_record * 2 < per_object,
        "records ({per_record} bytes) are not a fraction of the objects they replace ({per_object})"
    );
    assert!(
        per_record + per_desired <= KEPT_BUDGET,
        "records ({per_record} bytes per Service) and desired state ({per_desired}) are over the budget of {KEPT_BUDGET}"
    );
}
