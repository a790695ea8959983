//! Every fuzz target over its seeds from `testdata/` and over every input a fuzzer
//! once failed on (`fuzz/regressions/<target>/`): each must run to the end without a
//! panic and with its invariants holding. An input a fuzzer finds goes into that
//! directory with the fix, so that it stays fixed.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::time::{Duration, Instant};

use portdrift_test_support::fuzzing::{TARGETS, seeds, target};

#[test]
fn every_target_passes_its_seeds() {
    let seeds = seeds(&support::root().join("testdata")).expect("testdata is readable");
    for (name, run) in TARGETS {
        let inputs = seeds.get(name).map(Vec::as_slice).unwrap_or(&[]);
        assert!(!inputs.is_empty(), "no seeds for {name}");
        for input in inputs {
            run(input);
        }
    }
}

#[test]
fn every_input_that_once_failed_passes_now() {
    let dir = support::root().join("fuzz/regressions");
    let mut ran = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz/regressions exists") {
        let sub = entry.unwrap().path();
        if !sub.is_dir() {
            continue;
        }
        let name = sub.file_name().unwrap().to_string_lossy().into_owned();
        let run = target(&name).unwrap_or_else(|| panic!("{} names no fuzz target", sub.display()));
        for file in std::fs::read_dir(&sub).unwrap() {
            let file = file.unwrap().path();
            let input = std::fs::read(&file).unwrap();
            let started = Instant::now();
            let outcome = std::panic::catch_unwind(|| run(&input));
            assert!(outcome.is_ok(), "{} fails again", file.display());
            // A debug build is far slower than the fuzzer's; a hang is not.
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{} took {:?}",
                file.display(),
                started.elapsed()
            );
            ran += 1;
        }
    }
    eprintln!("{ran} regression inputs");
}
