//! nodeport-collision: two Services holding one nodePort.

use crate::heart::finding::{Finding, Kind, Severity};

use super::attribution::DesiredIndex;
use super::builders::set_service;

pub(super) fn nodeport_collisions(index: &DesiredIndex<'_>, out: &mut Vec<Finding>) {
    for ((protocol, port), claimants) in index.by_port.groups().filter(|(_, v)| v.len() > 1) {
        // One Service with the port twice (two families, a duplicated port entry) is not
        // a collision: only distinct Services are.
        let mut names: Vec<String> = claimants
            .iter()
            .map(|&i| index.port(i).service.service())
            .collect();
        names.dedup();
        if names.len() < 2 {
            continue;
        }
        let first = index.port(claimants[0]);
        let mut f = Finding::new(
            Kind::NodeportCollision,
            Severity::Critical,
            format!(
                "{} Services claim {protocol}/{port} as their nodePort ({}); only one can receive its traffic — give the others a different nodePort.",
                names.len(),
                names.join(", ")
            ),
        );
        f.protocol = Some(protocol);
        f.port = Some(port);
        set_service(&mut f, &first.service);
        f.services = names;
        out.push(f);
    }
}
