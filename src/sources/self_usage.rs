//! What the agent itself costs: its CPU time, the tools it ran included, as
//! `/proc/self/stat` counts it (what `ps` and `time` read).

use std::time::Duration;

use crate::decode::proc_process::stat_cpu_ticks;

/// The CPU time used so far; None where `/proc/self/stat` cannot be read.
pub fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    Some(Duration::from_secs_f64(seconds(stat_cpu_ticks(&stat)?)))
}

/// Clock ticks (`/proc`'s unit of CPU and start times) in seconds.
fn seconds(ticks: u64) -> f64 {
    ticks as f64 / rustix::param::clock_ticks_per_second().max(1) as f64
}

/// What the `process_*` metrics report, as Go exporters name them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    /// Own user and system time (not its tools').
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub threads: u64,
    /// Since the epoch.
    pub start_time_seconds: f64,
    pub open_fds: Option<u64>,
    /// The soft limit; None when unlimited.
    pub max_fds: Option<u64>,
}

/// This process's stats from `/proc/self`; None where its stat line cannot be read.
pub fn process_stats() -> Option<ProcessStats> {
    use crate::decode::proc_process::{boot_time, max_open_files, parse_stat};
    let stat = parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| boot_time(&s))
        .unwrap_or(0);
    Some(ProcessStats {
        cpu_seconds: seconds(stat.cpu_ticks),
        resident_bytes: stat.resident_pages * rustix::param::page_size() as u64,
        virtual_bytes: stat.virtual_bytes,
        threads: stat.threads,
        start_time_seconds: boot as f64 + seconds(stat.start_ticks),
        open_fds: std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64),
        max_fds: std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|l| max_open_files(&l)),
    })
}
