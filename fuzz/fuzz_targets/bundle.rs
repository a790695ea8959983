//! libFuzzer entry for portdrift_test_support::fuzzing::bundle (the target itself lives in that crate,
//! shared with the stable driver and the regression test).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| portdrift_test_support::fuzzing::bundle(data));
