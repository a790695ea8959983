//! hostport-conflict: CNI hostPorts on a Service's nodePort.

use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::model::RuleDump;

use super::attribution::DesiredIndex;
use super::builders::set_service;

pub(super) fn hostport_conflicts(source: &RuleDump, index: &DesiredIndex<'_>, out: &mut Vec<Finding>) {
    for hp in &source.hostports {
        // The allocator hands a port out once, whatever the protocol; but a hostPort
        // only competes with a Service of its own protocol.
        let Some(owner) = index.owners(hp.protocol, hp.port, source.family).next() else {
            continue;
        };
        let desired = index.port(owner);
        let to = match hp.targets.first() {
            Some(t) => format!(" to {t}"),
            None => String::new(),
        };
        let mut f = Finding::new(
            Kind::HostportConflict,
            Severity::Critical,
            format!(
                "A pod's hostPort mapping (CNI portmap) sends {}/{}{to}, while {} owns that port as its NodePort: whichever rule the kernel meets first takes the traffic — remove the hostPort or give the Service another nodePort.",
                hp.protocol,
                hp.port,
                desired.service.service()
            ),
        );
        f.protocol = Some(hp.protocol);
        f.port = Some(hp.port);
        f.family = Some(source.family);
        f.backend = Some(source.backend);
        set_service(&mut f, &desired.service);
        f.target = hp.targets.first().map(|t| t.to_string());
        f.rule = Some(hp.rule.text.to_string());
        f.rule_source = Some(source.cite_in("nat", hp.chain(), &hp.rule));
        out.push(f);
    }
}
