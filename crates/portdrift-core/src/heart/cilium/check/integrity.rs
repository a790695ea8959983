//! The maps against themselves: slots naming backends that are not there, backends no
//! slot names, reverse-NAT entries missing or wrong, counts that disagree with the
//! slots, and maps close to their size limit. None of it needs the cluster state.

use crate::heart::cilium::lines::{backend_line, frontend_name, master_line, slot_line};
use crate::heart::cilium::maps::FamilyMaps;
use crate::heart::cilium::{CiliumMaps, Frontend, GroupProblem, MapKind};
use crate::heart::citation::Citation;
use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::model::Family;

use super::{ADVICE, CiliumCheck, finding};

/// Leaked backends listed one by one in a finding's evidence.
const LEAKS_LISTED: usize = 20;

pub(super) fn check_family(
    family: Family,
    fm: &FamilyMaps,
    origin: &dyn Fn(MapKind) -> String,
    check: &mut CiliumCheck,
) {
    let services = origin(MapKind::services(family));
    for f in &fm.frontends {
        if fm.backends_complete {
            missing_backends(family, fm, f, &services, &mut check.findings);
        }
        if fm.rev_nat_complete {
            rev_nat(
                family,
                fm,
                f,
                &origin(MapKind::rev_nat(family)),
                &mut check.findings,
            );
        }
    }
    // An entry that could not be decoded may be the master or slot that looks missing.
    if fm.services_complete {
        for problem in &fm.problems {
            slot_problem(family, problem, &services, check);
        }
    }
    if fm.services_complete && fm.backends_complete {
        leaked(
            family,
            fm,
            &origin(MapKind::backends(family)),
            &mut check.findings,
        );
    }
}

/// The port a finding about `f` carries: its own for a NodePort frontend (the port
/// findings are filed under), none for other frontends.
fn port_of(f: &Frontend) -> Option<u16> {
    f.flags.nodeport().then_some(f.port)
}

fn frontend_finding(
    kind: Kind,
    severity: Severity,
    family: Family,
    f: &Frontend,
    message: String,
) -> Finding {
    let mut out = finding(kind, severity, family, message);
    out.port = port_of(f);
    out.protocol = f.proto.protocol();
    out.rule = Some(master_line(f));
    out
}

/// One finding per frontend, naming every slot whose backend is not in the map.
fn missing_backends(family: Family, fm: &FamilyMaps, f: &Frontend, services: &str, out: &mut Vec<Finding>) {
    let missing: Vec<(u16, u32)> = f
        .slots
        .iter()
        .copied()
        .filter(|(_, id)| !fm.backends.contains_key(id))
        .collect();
    let Some(&(first_slot, first_id)) = missing.first() else {
        return;
    };
    let active = missing.iter().any(|(slot, _)| *slot <= f.count);
    let (severity, effect) = if active {
        (Severity::Critical, "new connections that select such a slot fail")
    } else {
        (
            Severity::Warning,
            "the slots are not active, but would be needed if the active backends go",
        )
    };
    let slots: Vec<String> = missing
        .iter()
        .map(|(s, id)| format!("slot {s} → backend {id}"))
        .collect();
    let mut finding = frontend_finding(
        Kind::MissingBackend,
        severity,
        family,
        f,
        format!(
            "Cilium's frontend {} names backends its backends map does not hold ({}; `backend {first_id} not found`): {effect}; {ADVICE}.",
            frontend_name(f),
            slots.join(", ")
        ),
    );
    finding.rule = Some(slot_line(f, first_slot, first_id, None));
    finding.rule_source = Some(Citation::file(services));
    finding.target = Some(std::net::SocketAddr::new(f.address, f.port).to_string());
    finding.evidence.push(master_line(f));
    finding
        .evidence
        .extend(missing.iter().map(|&(slot, id)| slot_line(f, slot, id, None)));
    out.push(finding);
}

fn rev_nat(family: Family, fm: &FamilyMaps, f: &Frontend, origin: &str, out: &mut Vec<Finding>) {
    let problem = match fm.rev_nats.get(&f.rev_nat) {
        None => format!(
            "has reverse-NAT ID {}, which Cilium's reverse-NAT map does not hold: replies from its backends are not translated back to the frontend's address",
            f.rev_nat
        ),
        Some(r) if r.address == f.address && r.port == f.port => return,
        Some(r) => format!(
            "has reverse-NAT ID {}, whose entry names {} instead: replies from its backends leave with that address as their source",
            f.rev_nat,
            std::net::SocketAddr::new(r.address, r.port)
        ),
    };
    let mut finding = frontend_finding(
        Kind::RevNatMismatch,
        Severity::Critical,
        family,
        f,
        format!("Cilium's frontend {} {problem}; {ADVICE}.", frontend_name(f)),
    );
    finding.rule_source = Some(Citation::file(origin));
    finding.target = Some(std::net::SocketAddr::new(f.address, f.port).to_string());
    out.push(finding);
}

fn slot_problem(family: Family, problem: &GroupProblem, services: &str, check: &mut CiliumCheck) {
    let (key, severity, what) = match problem {
        GroupProblem::MissingSlots { key, ranges } => {
            let list: Vec<String> = ranges
                .iter()
                .map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") })
                .collect();
            (
                key,
                Severity::Critical,
                format!(
                    "counts slots its map does not hold (slots {}): connections that select one find no backend",
                    list.join(", ")
                ),
            )
        }
        GroupProblem::SlotBeyondCount {
            key,
            slot,
            backend_id,
            count,
            qcount,
        } => (
            key,
            Severity::Warning,
            format!(
                "has slot {slot} (backend {backend_id}) beyond its {count} active and {qcount} other slots: a leftover no connection reaches, which still holds the backend"
            ),
        ),
        GroupProblem::MissingMaster { key, slots } => (
            key,
            Severity::Warning,
            format!(
                "has {} slot(s) but no master entry: leftovers of a deleted frontend that no connection reaches",
                slots.len()
            ),
        ),
        // A master or slot read with two values: the map changed during the read.
        GroupProblem::ConflictingMaster { key } | GroupProblem::ConflictingSlot { key, .. } => {
            check.not_checked.push(format!(
                "Cilium's frontend {} read with two different values for one entry (it changed during the read): not judged",
                crate::heart::cilium::lines::address(key.address, key.port, key.proto)
            ));
            return;
        }
        GroupProblem::RepeatedEntry { .. } => return,
    };
    let name = crate::heart::cilium::lines::address(key.address, key.port, key.proto);
    let mut f = finding(
        Kind::SlotCountMismatch,
        severity,
        family,
        format!("Cilium's frontend {name} {what}; {ADVICE}."),
    );
    f.protocol = key.proto.protocol();
    f.rule_source = Some(Citation::file(services));
    f.target = Some(std::net::SocketAddr::new(key.address, key.port).to_string());
    check.findings.push(f);
}

fn leaked(family: Family, fm: &FamilyMaps, origin: &str, out: &mut Vec<Finding>) {
    let leaked: Vec<_> = fm
        .backends
        .values()
        .filter(|b| !fm.referenced.contains(&b.id))
        .collect();
    if leaked.is_empty() {
        return;
    }
    let mut f = finding(
        Kind::LeakedBackend,
        Severity::Warning,
        family,
        format!(
            "Cilium's backends map holds {} backend(s) that no service slot names: leaked entries that fill the map (new backends fail once it is full); {ADVICE}.",
            leaked.len()
        ),
    );
    f.rule_source = Some(Citation::file(origin));
    f.evidence = leaked
        .iter()
        .take(LEAKS_LISTED)
        .map(|b| backend_line(b))
        .collect();
    if leaked.len() > LEAKS_LISTED {
        f.evidence
            .push(format!("… and {} more", leaked.len() - LEAKS_LISTED));
    }
    out.push(f);
}

/// A map at 90% of its `max_entries` or more.
pub(super) fn check_capacity(maps: &CiliumMaps, out: &mut Vec<Finding>) {
    for read in &maps.reads {
        let Some(stats) = &read.stats else { continue };
        let max = u64::from(stats.max_entries);
        let used = read.entries as u64;
        if max == 0 || used * 10 < max * 9 {
            continue;
        }
        let full = used >= max;
        let mut f = finding(
            Kind::MapNearlyFull,
            if full {
                Severity::Critical
            } else {
                Severity::Warning
            },
            read.kind.family(),
            format!(
                "Cilium's {} holds {used} of its {max} entries{}: {}; look for leaked backends and stale frontends (`cilium-dbg bpf lb list`), and raise the map size (Cilium's `bpf-lb-map-max`) if the cluster needs it; portdrift never writes Cilium's maps.",
                read.kind.pin_name(),
                if full { " and is full" } else { "" },
                if full {
                    "entries Cilium adds now fail, and Services stop following the cluster"
                } else {
                    "once it is full, entries Cilium adds fail"
                }
            ),
        );
        f.rule_source = Some(Citation::file(read.origin.as_str()));
        f.target = Some(read.kind.pin_name().to_string());
        out.push(f);
    }
}
