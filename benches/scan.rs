//! Parse + diff of a generated 10,000-Service node (about 240,000 iptables-save
//! lines): the cost of one scan once the dump is in hand.
//!
//! `cargo bench --bench scan`

#![allow(clippy::unwrap_used, reason = "a benchmark's setup panics where it breaks")]

use std::hint::black_box;

// The allocator the binary uses, so the figures are the binary's.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use criterion::{Criterion, criterion_group, criterion_main};
use portdrift::decode::cluster::read_cluster_state;
use portdrift::decode::iptables::{SourceHint, parse_save};
use portdrift::heart::detect::{DetectConfig, detect};
use portdrift::heart::observed::Observed;
use portdrift_test_support::synth::{SynthConfig, generate};

fn scan_10k(c: &mut Criterion) {
    let config = SynthConfig::default();
    let node = generate(&config);
    let desired =
        read_cluster_state(node.cluster_json.as_bytes(), Some(&config.node)).expect("generated state parses");
    let detect_config = DetectConfig {
        nodeport_range: 20000..=32767,
        grace: None,
        cluster_state_stale: false,
        acceptances: None,
    };
    let mut group = c.benchmark_group("10k-services");
    group.sample_size(20);
    group.bench_function("parse-iptables-save", |b| {
        b.iter(|| {
            parse_save(
                black_box(node.iptables_save.as_bytes()),
                "bench",
                SourceHint::default(),
            )
            .unwrap()
        })
    });
    group.bench_function("parse-and-detect", |b| {
        b.iter(|| {
            let source = parse_save(
                black_box(node.iptables_save.as_bytes()),
                "bench",
                SourceHint::default(),
            )
            .unwrap();
            let observed = Observed {
                dumps: vec![source],
                ..Default::default()
            };
            let findings = detect(Some(&desired), &observed, &detect_config);
            assert!(
                findings.is_empty(),
                "a generated node is clean: {:?}",
                findings.first()
            );
            findings
        })
    });
    group.bench_function("read-cluster-json", |b| {
        b.iter(|| read_cluster_state(black_box(node.cluster_json.as_bytes()), Some("worker-1")).unwrap())
    });
    group.finish();
}

criterion_group!(benches, scan_10k);
criterion_main!(benches);
