//! libFuzzer entry for portdrift::testing::fuzzing::ipvs (the target itself lives in the library,
//! shared with the stable driver and the regression test).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| portdrift::testing::fuzzing::ipvs(data));
