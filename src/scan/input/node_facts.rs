//! Reading the node's facts beside the rules: the local port sysctls, kube-proxy's
//! health and proxy mode answers, and IPVS mode's traces.

use std::io::BufRead;

use crate::decode::{ipvs, node};
use crate::heart::input::Input;
use crate::heart::ipvs::{IpvsRead, IpvsTable};
use crate::heart::observed::{IpvsTraces, KubeProxyHealth, NodeSysctls};
use crate::heart::outcome::{InputState, ScanInput};
use crate::scan::readers::read_small;
use crate::sources::source::Source;

use super::settle;

/// Reads the local port sysctls. Returns how many of the two files the source knew.
pub(super) fn read_sysctls<S: Source>(src: &S, input: &mut ScanInput) -> usize {
    let mut present = 0;
    let mut sysctls = NodeSysctls::default();
    let mut read_any = false;

    let fetched = src.fetch_bytes(Input::LocalPortRange, read_small);
    if let Some(settled) = settle(src, Input::LocalPortRange, fetched) {
        present += 1;
        let mut status = settled.status;
        if let Some(text) = settled.value {
            read_any = true;
            match node::parse_local_port_range(&text) {
                Ok(range) => {
                    status.notes.push(format!("{}-{}", range.start(), range.end()));
                    sysctls.local_port_range = Some(range);
                }
                Err(e) => {
                    status.status = InputState::Error;
                    status.notes.push(e.to_string());
                }
            }
        }
        input.sources.push(status);
    }

    let fetched = src.fetch_bytes(Input::ReservedPorts, read_small);
    if let Some(settled) = settle(src, Input::ReservedPorts, fetched) {
        present += 1;
        let mut status = settled.status;
        if let Some(text) = settled.value {
            read_any = true;
            let (ranges, errors) = node::parse_reserved_ports(&text);
            if status.status == InputState::Empty || (ranges.is_empty() && errors.is_empty()) {
                // An empty sysctl is a fine answer: nothing is reserved.
                status.status = InputState::Ok;
                status.notes.push("none reserved".into());
            }
            if !errors.is_empty() {
                status.status = InputState::Partial;
                status.unparsed = errors.len();
                status.notes.extend(errors.iter().take(5).map(|e| e.to_string()));
            }
            if !ranges.is_empty() {
                status.notes.push(
                    ranges
                        .iter()
                        .map(|r| {
                            if r.start() == r.end() {
                                r.start().to_string()
                            } else {
                                format!("{}-{}", r.start(), r.end())
                            }
                        })
                        .collect::<Vec<_>>()
                        .join(","),
                );
            }
            sysctls.reserved_ports = ranges;
        }
        input.sources.push(status);
    }
    if read_any {
        input.observed.sysctls = Some(sysctls);
    }
    present
}

/// Reads kube-proxy's health answer.
pub(super) fn read_healthz<S: Source>(src: &S, input: &mut ScanInput) -> bool {
    let fetched = src.fetch_bytes(Input::KubeProxyHealthz, read_small);
    let Some(settled) = settle(src, Input::KubeProxyHealthz, fetched) else {
        return false;
    };
    input.observed.kube_proxy_answered.healthz = Some(settled.value.is_some());
    let mut status = settled.status;
    if let Some(body) = settled.value
        && matches!(
            status.status,
            InputState::Ok | InputState::Failed | InputState::Empty
        )
    {
        let healthy = status.status != InputState::Failed;
        match KubeProxyHealth::from_body(healthy, body.as_bytes()) {
            Ok(health) => {
                status.notes.extend(health.describe());
                input.observed.kube_proxy_health = Some(health);
            }
            Err(e) => {
                status.status = InputState::Error;
                status.notes.push(format!("garbled answer: {e}"));
            }
        }
    }
    input.sources.push(status);
    true
}

/// Reads kube-proxy's `/proxyMode` answer.
pub(super) fn read_proxy_mode<S: Source>(src: &S, input: &mut ScanInput) -> bool {
    let fetched = src.fetch_bytes(Input::KubeProxyMode, read_small);
    let Some(settled) = settle(src, Input::KubeProxyMode, fetched) else {
        return false;
    };
    input.observed.kube_proxy_answered.proxy_mode = Some(settled.value.is_some());
    let mut status = settled.status;
    if let Some(body) = settled.value
        && status.status == InputState::Ok
    {
        let answer = body.trim();
        if let Some(mode) = crate::decode::node::parse_proxy_mode(answer) {
            status.notes.push(format!("kube-proxy runs in {answer} mode"));
            input.observed.kube_proxy_mode = Some(mode);
        } else {
            status.status = InputState::Error;
            status.notes.push(format!(
                "not a proxy mode this reads: {:?}",
                answer.chars().take(40).collect::<String>()
            ));
        }
    }
    input.sources.push(status);
    true
}

/// Keeps a read IPVS table, with its status.
fn keep_ipvs_table<S: Source>(
    src: &S,
    from: Input,
    settled: super::Settled<IpvsTable>,
    traces: &mut IpvsTraces,
    input: &mut ScanInput,
) {
    let mut status = settled.status;
    if let Some(table) = settled.value {
        traces.virtual_servers = Some(table.services.len());
        status.items = Some(table.services.len());
        status.unparsed = table.unparsed.len();
        if !table.unparsed.is_empty() && status.status == InputState::Ok {
            status.status = InputState::Partial;
        }
        status.notes.extend(
            table
                .unparsed
                .iter()
                .take(5)
                .map(|u| format!("line {}: {}", u.line, u.reason)),
        );
        input.observed.ipvs_table = Some(IpvsRead {
            origin: src.label(from),
            table,
            whole: settled.trusted,
        });
    }
    input.sources.push(status);
}

/// Reads IPVS mode's traces outside netfilter: `kube-ipvs0` among the interfaces, and
/// the kernel's IPVS virtual servers. Returns how many of the two files the source knew.
pub(super) fn read_ipvs_traces<S: Source>(src: &S, input: &mut ScanInput) -> usize {
    let mut present = 0;
    let mut traces = IpvsTraces::default();
    let mut read_any = false;
    let fetched = src.fetch_bytes(Input::NetDev, |r| {
        let mut found = false;
        for line in r.lines() {
            found |= node::net_dev_has(&line?, node::IPVS_INTERFACE);
        }
        Ok(found)
    });
    if let Some(settled) = settle(src, Input::NetDev, fetched) {
        present += 1;
        let mut status = settled.status;
        if let Some(found) = settled.value {
            read_any = true;
            traces.interface = found;
            if found {
                status.notes.push(format!("{} present", node::IPVS_INTERFACE));
            }
        }
        input.sources.push(status);
    }
    // A node without the ip_vs module has no such file: that is no news.
    let fetched = src.fetch_bytes(Input::IpVs, |r| ipvs::parse_proc_ip_vs(r));
    if let Some(settled) = settle(src, Input::IpVs, fetched).filter(|s| s.status.status != InputState::Absent)
    {
        present += 1;
        read_any |= settled.value.is_some();
        keep_ipvs_table(src, Input::IpVs, settled, &mut traces, input);
    }
    // A bundle may hold `ipvsadm -Ln` instead (what people paste); the kernel's own
    // file wins when both are there.
    let fetched = src.fetch_bytes(Input::Ipvsadm, |r| ipvs::parse_ipvsadm(r));
    if let Some(settled) = settle(src, Input::Ipvsadm, fetched) {
        present += 1;
        if input.observed.ipvs_table.is_none() {
            read_any |= settled.value.is_some();
            keep_ipvs_table(src, Input::Ipvsadm, settled, &mut traces, input);
        } else {
            let mut status = settled.status;
            status.notes.push(format!("not used: {} was read", Input::IpVs));
            input.sources.push(status);
        }
    }
    if read_any {
        input.observed.ipvs = Some(traces);
    }
    present
}
