//! libFuzzer entry for portdrift_test_support::fuzzing::proc_net (the target itself lives in that crate,
//! shared with the stable driver and the regression test).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| portdrift_test_support::fuzzing::proc_net(data));
