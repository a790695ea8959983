//! Test support of the pure core: synthetic nodes and nf_tables messages. Compiled for
//! tests and with the `test-support` feature only, never into the release binary.

pub mod nf_messages;
pub mod synth;
