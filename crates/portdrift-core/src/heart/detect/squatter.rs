//! squatter: a local process listening on a Service's nodePort.

use std::collections::HashSet;

use crate::heart::citation::Citation;
use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::model::Protocol;
use crate::heart::observed::Observed;

use super::DetectConfig;
use super::attribution::DesiredIndex;
use super::builders::set_service;

pub(super) fn squatters(
    observed: &Observed,
    index: &DesiredIndex<'_>,
    config: &DetectConfig,
    out: &mut Vec<Finding>,
) {
    let mut seen = HashSet::new();
    for l in &observed.listeners {
        if !seen.insert((l.protocol, l.port, l.inode)) {
            continue;
        }
        // kube-proxy itself serves health checks on these.
        if l.protocol == Protocol::Tcp && index.health_check.contains_key(&l.port) {
            continue;
        }
        let owner = index.by_port.get((l.protocol, l.port)).first().copied();
        let process = observed.owners.get(&l.inode).cloned();
        let who = match &process {
            Some(p) => format!("{} (pid {})", p.name, p.pid),
            None => format!("A process (socket inode {})", l.inode),
        };
        let verb = if l.protocol == Protocol::Tcp {
            "listens"
        } else {
            "is bound"
        };
        let mut f = match owner {
            Some(i) => {
                let desired = index.port(i);
                let mut f = Finding::new(
                    Kind::Squatter,
                    Severity::Critical,
                    format!(
                        "{who} {verb} on {}/{}, which {} owns as its NodePort: traffic kube-proxy does not redirect reaches this process instead — stop it or move it off the NodePort range.",
                        l.protocol,
                        l.port,
                        desired.service.service()
                    ),
                );
                set_service(&mut f, &desired.service);
                f
            }
            None if config.nodeport_range.contains(&l.port)
                && !index.allocated(l.port)
                && !index.state.services_partial =>
            {
                Finding::new(
                    Kind::Squatter,
                    Severity::Warning,
                    format!(
                        "{who} {verb} on {}/{} inside the NodePort range {}-{}; the next Service given this port will collide with it — move the process, or reserve the port.",
                        l.protocol,
                        l.port,
                        config.nodeport_range.start(),
                        config.nodeport_range.end()
                    ),
                )
            }
            None => continue,
        };
        f.protocol = Some(l.protocol);
        f.port = Some(l.port);
        f.family = Some(l.family);
        f.inode = Some(l.inode);
        f.process = process;
        f.rule_source = Some(Citation::line(l.origin.as_str(), l.line));
        f.evidence.push(format!(
            "socket {}:{} uid {} inode {}",
            l.addr, l.port, l.uid, l.inode
        ));
        out.push(f);
    }
}
