//! The values written in rules' options: port ranges, marks and DNAT targets.

use std::net::IpAddr;

use crate::heart::explain::model::DnatTo;

/// `30080`, `30000:30100`, `80,443,8000:8080`.
pub(super) fn port_ranges(value: &str) -> Option<Vec<(u16, u16)>> {
    value
        .split(',')
        .map(|part| match part.split_once(':') {
            Some((lo, hi)) => {
                let lo = if lo.is_empty() { 0 } else { lo.parse().ok()? };
                let hi = if hi.is_empty() { u16::MAX } else { hi.parse().ok()? };
                Some((lo, hi))
            }
            None => part.parse().ok().map(|p| (p, p)),
        })
        .collect()
}

/// `0x4000/0x4000`, `0x4000`, `16384`.
pub(super) fn mark_value(value: &str) -> Option<(u32, u32)> {
    let (v, m) = match value.split_once('/') {
        Some((v, m)) => (v, Some(m)),
        None => (value, None),
    };
    let num = |s: &str| match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    };
    Some((num(v)?, m.map_or(Some(u32::MAX), num)?))
}

/// `10.244.1.5:8080`, `10.244.1.5`, `[fd00::5]:8080`, `10.0.0.1-10.0.0.3:80-81` (a
/// range: its first address and port).
pub(super) fn dnat_to(value: &str) -> Option<DnatTo> {
    if let Some(rest) = value.strip_prefix('[') {
        let (addr, port) = rest.split_once(']')?;
        let addr: IpAddr = addr.parse().ok()?;
        let port = match port.strip_prefix(':') {
            Some(p) => Some(p.split('-').next()?.parse().ok()?),
            None => None,
        };
        return Some(DnatTo { addr, port });
    }
    if let Ok(addr) = value.parse::<IpAddr>() {
        return Some(DnatTo { addr, port: None });
    }
    let (addr, port) = value.rsplit_once(':')?;
    let addr: IpAddr = addr.split('-').next()?.parse().ok()?;
    let port = port.split('-').next()?.parse().ok()?;
    Some(DnatTo {
        addr,
        port: Some(port),
    })
}
