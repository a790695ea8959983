//! Small readers of rule values: chains, versions, comments, ports and addresses.

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;

use crate::heart::model::ServicePortRef;

use super::args::RuleArgs;

/// The CNI portmap plugin's dispatch chain, and the prefix of its per-container chains.
pub(super) const CNI_HOSTPORT_CHAIN: &str = "CNI-HOSTPORT-DNAT";
const CNI_DNAT_CHAIN_PREFIX: &str = "CNI-DN-";

/// The chain of a rule line (`-A CHAIN ...`).
pub(super) fn rule_chain(text: &str) -> &str {
    text.strip_prefix("-A ")
        .and_then(|r| r.split_ascii_whitespace().next())
        .unwrap_or("")
}

/// The version in an iptables-save header (`iptables-save v1.6.1 on ...`).
pub(super) fn header_version(header: &str) -> Option<(u32, u32)> {
    let v = header
        .split_ascii_whitespace()
        .find_map(|w| w.strip_prefix('v'))?;
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// kube-proxy's comments start with the Service port (`ns/svc:port`, then words like
/// `cluster IP` or `has no endpoints`).
pub(super) fn service_of_comment(comment: &str) -> Option<ServicePortRef> {
    comment.split(' ').next().and_then(ServicePortRef::parse)
}

/// Where in the rule's line the comment's first word (its Service port) is written.
pub(super) fn comment_service_span(text: &str, args: &RuleArgs<'_>) -> Option<Range<u32>> {
    let word = args.comment.as_deref()?.split(' ').next()?;
    let start = text.len().checked_sub(args.comment_from_end)?;
    Some(u32::try_from(start).ok()?..u32::try_from(start + word.len()).ok()?)
}

pub(super) fn is_cni_hostport_chain(chain: &str) -> bool {
    chain == CNI_HOSTPORT_CHAIN || chain.starts_with(CNI_DNAT_CHAIN_PREFIX)
}

/// `80`, `80,443`, `30000:30010` (multiport's list and ranges). Ranges wider than the
/// whole NodePort range are not hostPorts and are refused rather than expanded.
pub(super) fn parse_port_list(list: &str) -> Option<Vec<u16>> {
    let mut ports = Vec::new();
    for part in list.split(',') {
        match part.split_once(':') {
            Some((a, b)) => {
                let (a, b): (u16, u16) = (a.parse().ok()?, b.parse().ok()?);
                if a > b || b - a > 4096 {
                    return None;
                }
                ports.extend(a..=b);
            }
            None => ports.push(part.parse().ok()?),
        }
    }
    Some(ports)
}

pub(super) fn is_loopback_net(d: &str) -> bool {
    d.starts_with("127.") || d.starts_with("::1/") || d == "::1"
}

/// Parses `--to-destination`: `10.1.2.3:80`, `[fd00::1]:80`, or an address alone.
pub(super) fn parse_dnat_destination(s: &str) -> Result<(IpAddr, Option<u16>), String> {
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Ok((sa.ip(), Some(sa.port())));
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok((ip, None));
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']'))
        && let Ok(ip) = inner.parse::<IpAddr>()
    {
        return Ok((ip, None));
    }
    Err(format!(
        "DNAT destination {s:?} is not one address and port (ranges are not kube-proxy's)"
    ))
}
