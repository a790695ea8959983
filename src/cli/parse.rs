//! Parsers of flag values: sizes, durations, addresses and port ranges.

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::time::Duration;

/// An address, or off: `--kube-proxy-healthz`, `--kube-proxy-metrics`, `--findings-listen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthzAddr(pub Option<SocketAddr>);

/// Parses `1048576`, `64K`, `256M`, `1G` (binary units; `KiB`, `MiB`, `GiB` too).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 256M)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(format!("{s:?}: unknown unit (use K, M or G)")),
    };
    let size = n
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))?;
    if size == 0 {
        return Err("the size must be more than zero".into());
    }
    Ok(size)
}

/// Parses `127.0.0.1:10256`, `[::1]:10256` or `off`.
pub fn parse_healthz_addr(s: &str) -> Result<HealthzAddr, String> {
    match s.trim() {
        "off" | "none" | "" => Ok(HealthzAddr(None)),
        t => t
            .parse()
            .map(|a| HealthzAddr(Some(a)))
            .map_err(|_| format!("{s:?} is not IP:PORT (or off)")),
    }
}

/// Parses durations written like `30s`, `2m`, `1h30m`, `500ms`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("{s:?} is not a duration like 30s or 2m: {e}"))?;
    std::time::Duration::try_from(d).map_err(|_| format!("{s:?} is negative"))
}

/// A tool timeout: a duration, more than zero.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("the timeout must be more than zero".into());
    }
    Ok(d)
}

/// A log level (`error`, `warn`, `info`, `debug`, `trace`) or a filter of them by
/// module (`info,portdrift::sources=debug`), as `RUST_LOG` takes it.
pub fn parse_log_level(s: &str) -> Result<String, String> {
    // RUST_LOG would take a bare word as a module to log at every level; here every
    // directive names its level, so `--log-level verbose` is an error, not silence.
    for directive in s.split(',') {
        let level = directive.rsplit_once('=').map_or(directive, |(_, level)| level);
        level
            .trim()
            .parse::<tracing_subscriber::filter::LevelFilter>()
            .map_err(|_| {
                format!("{directive:?} is not a level (error, warn, info, debug, trace, off) or MODULE=LEVEL")
            })?;
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(s)
        .map(|_| s.to_string())
        .map_err(|e| format!("not a log level or filter: {e}"))
}

/// Parses `30000-32767`.
pub fn parse_port_range(s: &str) -> Result<RangeInclusive<u16>, String> {
    let (a, b) = s.split_once('-').ok_or("expected FIRST-LAST, e.g. 30000-32767")?;
    let a: u16 = a
        .trim()
        .parse()
        .map_err(|_| format!("{a:?} is not a port number"))?;
    let b: u16 = b
        .trim()
        .parse()
        .map_err(|_| format!("{b:?} is not a port number"))?;
    if a > b {
        return Err(format!("the range {a}-{b} is empty"));
    }
    Ok(a..=b)
}

#[cfg(test)]
mod tests;
