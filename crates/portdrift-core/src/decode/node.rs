//! Node-wide facts that are not rules or sockets: the kernel's local port sysctls and
//! kube-proxy's own health report.
//!
//! Both are read the same way offline (bundle files) and live (`/proc/sys`, kube-proxy's
//! `/healthz`); the parsers here are pure and tolerate anything.

use std::ops::RangeInclusive;
use std::time::SystemTime;

use crate::heart::model::ProxyMode;
use crate::heart::observed::KubeProxyHealth;

/// Why a sysctl value could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SysctlParseError {
    #[error("expected two port numbers (\"FIRST LAST\"), got {0:?}")]
    NotARange(String),
    #[error("{0:?} is not a port number")]
    NotAPort(String),
    #[error("the range {0}-{1} is empty")]
    Reversed(u16, u16),
}

fn port(word: &str) -> Result<u16, SysctlParseError> {
    word.parse()
        .map_err(|_| SysctlParseError::NotAPort(word.chars().take(40).collect()))
}

/// Parses `ip_local_port_range`: two numbers separated by whitespace (the kernel prints
/// `32768\t60999`).
pub fn parse_local_port_range(text: &str) -> Result<RangeInclusive<u16>, SysctlParseError> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let [first, last] = words[..] else {
        return Err(SysctlParseError::NotARange(
            text.trim().chars().take(80).collect(),
        ));
    };
    let (first, last) = (port(first)?, port(last)?);
    if first > last {
        return Err(SysctlParseError::Reversed(first, last));
    }
    Ok(first..=last)
}

/// Parses `ip_local_reserved_ports`: comma-separated ports and `FIRST-LAST` ranges, or
/// nothing at all. Items that cannot be understood are returned as errors beside the
/// ones that could, so one odd item does not hide the others.
pub fn parse_reserved_ports(text: &str) -> (Vec<RangeInclusive<u16>>, Vec<SysctlParseError>) {
    let mut ranges = Vec::new();
    let mut errors = Vec::new();
    for item in text.split([',', '\n']).map(str::trim).filter(|i| !i.is_empty()) {
        let parsed = match item.split_once('-') {
            Some((a, b)) => port(a.trim()).and_then(|a| {
                let b = port(b.trim())?;
                if a > b {
                    Err(SysctlParseError::Reversed(a, b))
                } else {
                    Ok(a..=b)
                }
            }),
            None => port(item).map(|p| p..=p),
        };
        match parsed {
            Ok(r) => ranges.push(r),
            Err(e) => errors.push(e),
        }
    }
    (ranges, errors)
}

/// The IPVS dummy interface kube-proxy creates.
pub const IPVS_INTERFACE: &str = "kube-ipvs0";

/// Whether `/proc/net/dev` lists `name` (lines `  name: counters...` after two headers).
pub fn net_dev_has(text: &str, name: &str) -> bool {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .any(|(iface, _)| iface.trim() == name)
}

/// Counts the virtual servers of `/proc/net/ip_vs`: one line per service (`TCP
/// 0A600001:01BB rr`), each followed by its real servers (`  -> ...`).
pub fn count_ip_vs_services(text: &str) -> usize {
    text.lines()
        .filter(|l| {
            let first = l.split_whitespace().next().unwrap_or("");
            matches!(first, "TCP" | "UDP" | "SCTP" | "FWM")
        })
        .count()
}

/// Why a `/healthz` body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HealthBodyError {
    #[error("the body is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("the body is not a JSON object")]
    NotObject,
}

impl KubeProxyHealth {
    /// Reads a `/healthz` body. Errors only when the body is not a JSON object.
    pub fn from_body(healthy: bool, body: &[u8]) -> Result<KubeProxyHealth, HealthBodyError> {
        let value: serde_json::Value = serde_json::from_slice(body).map_err(HealthBodyError::NotJson)?;
        let obj = value.as_object().ok_or(HealthBodyError::NotObject)?;
        let text = |k: &str| obj.get(k).and_then(|v| v.as_str()).map(str::to_string);
        let last_updated = text("lastUpdated");
        let current_time = text("currentTime");
        let since_last_update = match (
            last_updated.as_deref().and_then(parse_go_time),
            current_time.as_deref().and_then(parse_go_time),
        ) {
            (Some(l), Some(c)) => c.duration_since(l).ok(),
            _ => None,
        };
        Ok(KubeProxyHealth {
            healthy,
            last_updated,
            current_time,
            since_last_update,
            node_eligible: obj.get("nodeEligible").and_then(|v| v.as_bool()),
        })
    }
}

/// The mode kube-proxy's `/proxyMode` endpoint answers (`iptables`, `nftables`, `ipvs`),
/// or None for an answer this does not read (a mode of a later kube-proxy, or not one).
pub fn parse_proxy_mode(answer: &str) -> Option<ProxyMode> {
    match answer.trim() {
        "iptables" => Some(ProxyMode::Iptables),
        "nftables" => Some(ProxyMode::Nftables),
        "ipvs" => Some(ProxyMode::Ipvs),
        _ => None,
    }
}

/// Reads a time as kube-proxy prints it: Go's `time.Time.String()` through `%q`
/// (`2025-11-30 10:00:00.123456789 +0000 UTC m=+12.345678901`), or RFC 3339. None for
/// anything else, and for Go's zero time (kube-proxy has never synced).
pub fn parse_go_time(text: &str) -> Option<SystemTime> {
    let mut words = text.split_whitespace();
    let (date, time) = (words.next()?, words.next());
    let timestamp = match time {
        // RFC 3339: `2025-11-30T10:00:00.5Z` or with an offset.
        None => date.parse::<jiff::Timestamp>().ok()?,
        Some(time) => {
            let offset = match words.next() {
                Some(o) => parse_offset(o)?,
                None => 0,
            };
            let local: jiff::civil::DateTime = format!("{date}T{time}").parse().ok()?;
            let offset = jiff::tz::Offset::from_seconds(offset).ok()?;
            offset.to_timestamp(local).ok()?
        }
    };
    // Go's zero time (year 1) is "never", not a time.
    if timestamp.as_second() < 0 {
        return None;
    }
    Some(SystemTime::from(timestamp))
}

/// `+0100`, `-07:00` → seconds east of UTC.
fn parse_offset(text: &str) -> Option<i32> {
    let (sign, digits) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let digits: String = digits.chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let hours: i32 = digits[..2].parse().ok()?;
    let minutes: i32 = digits[2..].parse().ok()?;
    Some(sign * (hours * 3600 + minutes * 60))
}

#[cfg(test)]
mod tests;
