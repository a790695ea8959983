//! What the agent itself costs: its CPU time, the tools it ran included, as
//! `/proc/self/stat` counts it (what `ps` and `time` read).

use std::time::Duration;

use crate::decode::proc_process::stat_cpu_ticks;

/// The CPU time used so far; None where `/proc/self/stat` cannot be read.
pub fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let ticks = stat_cpu_ticks(&stat)?;
    let per_second = rustix::param::clock_ticks_per_second().max(1);
    Some(Duration::from_nanos(
        ticks.saturating_mul(1_000_000_000) / per_second,
    ))
}
