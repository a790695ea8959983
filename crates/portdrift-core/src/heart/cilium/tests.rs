//! The checks on maps built entry by entry, against desired states built by the real
//! builder from API objects.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::json;

use super::*;
use crate::heart::desired::tests::{endpoint, nodeport_service, ready, service, v4_slice};
use crate::heart::desired::{DesiredState, desired_state};
use crate::heart::finding::{Kind, Severity};

const NODE_ADDR: &str = "10.0.1.21";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn flags(nodeport: bool, routable: bool) -> SvcFlags {
    let mut bits = 0;
    if nodeport {
        bits |= SvcFlags::NODEPORT;
    }
    if routable {
        bits |= SvcFlags::ROUTABLE;
    }
    SvcFlags(bits)
}

/// A NodePort frontend on `addr` (the surrogate when unspecified) with `ids` active.
fn frontend(addr: &str, port: u16, rev_nat: u16, ids: &[u32]) -> Frontend {
    let address = ip(addr);
    Frontend {
        address,
        port,
        proto: L4::Tcp,
        scope: Scope::External,
        count: ids.len() as u16,
        qcount: 0,
        rev_nat,
        flags: flags(true, !address.is_unspecified()),
        master_word: 0,
        slots: ids
            .iter()
            .enumerate()
            .map(|(i, id)| (i as u16 + 1, *id))
            .collect(),
    }
}

fn backend(id: u32, addr: &str, port: u16) -> MapBackend {
    MapBackend {
        id,
        address: ip(addr),
        port,
        proto: L4::Tcp,
        flags: 0,
        cluster_id: 0,
        zone: 0,
    }
}

/// Maps holding `frontends` and `backends`, with a correct reverse-NAT entry per
/// frontend and every map read whole.
fn maps(frontends: Vec<Frontend>, backends: Vec<MapBackend>) -> CiliumMaps {
    let rev_nats = frontends
        .iter()
        .map(|f| {
            (
                f.rev_nat,
                RevNat {
                    id: f.rev_nat,
                    address: f.address,
                    port: f.port,
                },
            )
        })
        .collect();
    let fm = FamilyMaps {
        referenced: frontends
            .iter()
            .flat_map(|f| f.slots.iter().map(|s| s.1))
            .collect(),
        frontends,
        problems: Vec::new(),
        backends: backends.into_iter().map(|b| (b.id, b)).collect(),
        rev_nats,
        services_complete: true,
        backends_complete: true,
        rev_nat_complete: true,
    };
    CiliumMaps {
        reads: Vec::new(),
        families: BTreeMap::from([(Family::Ipv4, fm)]),
    }
}

/// Service default/web on nodePort 30080 with endpoints `ips` (port 8080) on node-a.
fn web(ips: &[&str]) -> DesiredState {
    let eps: Vec<_> = ips.iter().map(|i| ready(i, "node-a")).collect();
    desired_state(
        &[nodeport_service("default", "web", 30080)],
        &[v4_slice("default", "web-1", "web", json!(eps))],
        Some("node-a"),
        None,
    )
}

fn kinds(check: &CiliumCheck) -> Vec<(Kind, Severity, Option<String>)> {
    check
        .findings
        .iter()
        .map(|f| (f.kind, f.severity, f.target.clone()))
        .collect()
}

fn healthy() -> CiliumMaps {
    maps(
        vec![
            frontend("0.0.0.0", 30080, 8, &[1, 2]),
            frontend(NODE_ADDR, 30080, 9, &[1, 2]),
        ],
        vec![backend(1, "10.244.1.5", 8080), backend(2, "10.244.2.6", 8080)],
    )
}

#[test]
fn a_healthy_node_has_no_findings() {
    let desired = web(&["10.244.1.5", "10.244.2.6"]);
    let check = cilium_findings(Some(&desired), &healthy(), None);
    assert_eq!(kinds(&check), []);
    assert!(check.not_checked.is_empty(), "{:?}", check.not_checked);
}

#[test]
fn a_deleted_pods_backend_in_an_active_slot_is_stale() {
    let desired = web(&["10.244.1.5"]);
    let check = cilium_findings(Some(&desired), &healthy(), None);
    assert_eq!(
        kinds(&check),
        [(
            Kind::StaleEndpoint,
            Severity::Critical,
            Some("10.244.2.6:8080".into())
        )]
    );
    let f = &check.findings[0];
    assert_eq!(f.port, Some(30080));
    assert_eq!(f.service.as_deref(), Some("default/web"));
    assert_eq!(f.backend, None);
    // Both frontends hold it: one finding, each slot in the evidence.
    assert_eq!(f.evidence.len(), 2, "{:?}", f.evidence);
    assert!(
        f.rule.as_deref().unwrap().contains("10.244.2.6:8080/TCP (8) (2)"),
        "{:?}",
        f.rule
    );
}

#[test]
fn an_endpoint_no_active_slot_holds_is_missing() {
    let desired = web(&["10.244.1.5", "10.244.2.6", "10.244.3.7"]);
    let check = cilium_findings(Some(&desired), &healthy(), None);
    assert_eq!(
        kinds(&check),
        [(
            Kind::MissingEndpoint,
            Severity::Critical,
            Some("10.244.3.7:8080".into())
        )]
    );
}

#[test]
fn a_node_address_without_the_frontend_is_a_missing_rule() {
    // Another Service's NodePort is on 10.0.1.21; web's is only on the surrogate.
    let desired = desired_state(
        &[
            nodeport_service("default", "web", 30080),
            nodeport_service("default", "api", 30090),
        ],
        &[
            v4_slice("default", "web-1", "web", json!([ready("10.244.1.5", "node-a")])),
            v4_slice("default", "api-1", "api", json!([ready("10.244.2.6", "node-a")])),
        ],
        Some("node-a"),
        None,
    );
    let maps = maps(
        vec![
            frontend("0.0.0.0", 30080, 8, &[1]),
            frontend("0.0.0.0", 30090, 10, &[2]),
            frontend(NODE_ADDR, 30090, 11, &[2]),
        ],
        vec![backend(1, "10.244.1.5", 8080), backend(2, "10.244.2.6", 8080)],
    );
    let check = cilium_findings(Some(&desired), &maps, None);
    assert_eq!(kinds(&check), [(Kind::MissingRule, Severity::Critical, None)]);
    assert_eq!(check.findings[0].port, Some(30080));
    assert!(check.findings[0].message.contains("node address 10.0.1.21"));
}

#[test]
fn a_frontend_for_a_deleted_service_is_stale() {
    let desired = web(&["10.244.1.5", "10.244.2.6"]);
    let mut m = healthy();
    let fm = m.families.get_mut(&Family::Ipv4).unwrap();
    fm.frontends.push(frontend("0.0.0.0", 31999, 20, &[1]));
    fm.rev_nats.insert(
        20,
        RevNat {
            id: 20,
            address: ip("0.0.0.0"),
            port: 31999,
        },
    );
    let check = cilium_findings(Some(&desired), &m, None);
    assert_eq!(kinds(&check), [(Kind::StaleNodeport, Severity::Critical, None)]);
    assert_eq!(check.findings[0].port, Some(31999));
}

#[test]
fn a_slot_naming_an_absent_backend_is_reported_as_cilium_prints_it() {
    let desired = web(&["10.244.1.5", "10.244.2.6"]);
    let mut m = healthy();
    m.families.get_mut(&Family::Ipv4).unwrap().backends.remove(&2);
    let check = cilium_findings(Some(&desired), &m, None);
    let missing: Vec<_> = check
        .findings
        .iter()
        .filter(|f| f.kind == Kind::MissingBackend)
        .collect();
    assert_eq!(missing.len(), 2, "one per frontend: {:?}", kinds(&check));
    assert!(missing.iter().all(|f| f.severity == Severity::Critical));
    assert!(
        missing[0]
            .rule
            .as_deref()
            .unwrap()
            .contains("backend 2 not found")
    );
    // The endpoint it should have reached is then missing from the active slots.
    assert!(check.findings.iter().any(|f| f.kind == Kind::MissingEndpoint));
}

#[test]
fn a_backend_no_slot_names_is_leaked_once_per_family() {
    let mut m = healthy();
    let fm = m.families.get_mut(&Family::Ipv4).unwrap();
    fm.backends.insert(7, backend(7, "10.244.9.9", 8080));
    fm.backends.insert(8, backend(8, "10.244.9.10", 8080));
    // Without a cluster state: the maps' own consistency is still checked.
    let check = cilium_findings(None, &m, None);
    assert_eq!(kinds(&check), [(Kind::LeakedBackend, Severity::Warning, None)]);
    assert_eq!(check.findings[0].evidence.len(), 2);
}

#[test]
fn a_reverse_nat_entry_naming_another_frontend_is_a_mismatch() {
    let mut m = healthy();
    let fm = m.families.get_mut(&Family::Ipv4).unwrap();
    fm.rev_nats.insert(
        9,
        RevNat {
            id: 9,
            address: ip("10.0.1.99"),
            port: 30080,
        },
    );
    let check = cilium_findings(None, &m, None);
    assert_eq!(
        kinds(&check),
        [(
            Kind::RevNatMismatch,
            Severity::Critical,
            Some("10.0.1.21:30080".into())
        )]
    );
    fm_remove_rev_nat(&mut m, 8);
    let check = cilium_findings(None, &m, None);
    assert_eq!(
        check
            .findings
            .iter()
            .filter(|f| f.kind == Kind::RevNatMismatch)
            .count(),
        2
    );
}

fn fm_remove_rev_nat(m: &mut CiliumMaps, id: u16) {
    m.families.get_mut(&Family::Ipv4).unwrap().rev_nats.remove(&id);
}

#[test]
fn nothing_is_concluded_missing_from_a_map_not_read_whole() {
    let desired = web(&["10.244.1.5", "10.244.2.6"]);
    let mut m = healthy();
    let fm = m.families.get_mut(&Family::Ipv4).unwrap();
    fm.backends.remove(&2);
    fm.rev_nats.clear();
    fm.backends_complete = false;
    fm.rev_nat_complete = false;
    let check = cilium_findings(Some(&desired), &m, None);
    assert!(
        check.findings.iter().all(|f| !matches!(
            f.kind,
            Kind::MissingBackend | Kind::RevNatMismatch | Kind::LeakedBackend
        )),
        "{:?}",
        kinds(&check)
    );
    assert_eq!(check.not_checked.len(), 2, "{:?}", check.not_checked);
    // Nor an endpoint missing from slots whose backends were not all read.
    assert!(
        check.findings.iter().all(|f| f.kind != Kind::MissingEndpoint),
        "{:?}",
        kinds(&check)
    );
}

#[test]
fn a_difference_the_second_read_does_not_show_is_dropped() {
    let desired = web(&["10.244.1.5", "10.244.2.6"]);
    let mut torn = healthy();
    torn.families.get_mut(&Family::Ipv4).unwrap().backends.remove(&2);
    let check = cilium_findings(Some(&desired), &torn, Some(&healthy()));
    assert_eq!(kinds(&check), []);
    assert_eq!(check.not_checked.len(), 1, "{:?}", check.not_checked);
    // Shown by both reads: kept.
    let check = cilium_findings(Some(&desired), &torn, Some(&torn.clone()));
    assert!(!check.findings.is_empty());
}

#[test]
fn local_policy_judges_each_scope_by_its_own_set() {
    let svc = service(
        "default",
        "web",
        json!({
            "type": "NodePort",
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"],
            "externalTrafficPolicy": "Local",
            "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30080}],
        }),
    );
    let desired = desired_state(
        &[svc],
        &[v4_slice(
            "default",
            "web-1",
            "web",
            json!([ready("10.244.1.5", "node-a"), ready("10.244.2.6", "node-b")]),
        )],
        Some("node-a"),
        None,
    );
    let internal = |addr: &str, rev: u16| Frontend {
        scope: Scope::Internal,
        ..frontend(addr, 30080, rev, &[1, 2])
    };
    let m = maps(
        vec![
            frontend("0.0.0.0", 30080, 8, &[1]),
            internal("0.0.0.0", 12),
            frontend(NODE_ADDR, 30080, 9, &[1]),
            internal(NODE_ADDR, 13),
        ],
        vec![backend(1, "10.244.1.5", 8080), backend(2, "10.244.2.6", 8080)],
    );
    let check = cilium_findings(Some(&desired), &m, None);
    assert_eq!(kinds(&check), []);
    // The external scope without the node's own endpoint: external clients reach none.
    let m = maps(
        vec![
            frontend("0.0.0.0", 30080, 8, &[2]),
            internal("0.0.0.0", 12),
            frontend(NODE_ADDR, 30080, 9, &[2]),
            internal(NODE_ADDR, 13),
        ],
        vec![backend(1, "10.244.1.5", 8080), backend(2, "10.244.2.6", 8080)],
    );
    let check = cilium_findings(Some(&desired), &m, None);
    assert_eq!(
        kinds(&check),
        [(
            Kind::MissingEndpoint,
            Severity::Critical,
            Some("10.244.1.5:8080".into())
        )]
    );
}

#[test]
fn a_terminating_endpoint_in_a_non_active_slot_is_expected() {
    let desired = desired_state(
        &[nodeport_service("default", "web", 30080)],
        &[v4_slice(
            "default",
            "web-1",
            "web",
            json!([
                ready("10.244.1.5", "node-a"),
                endpoint("10.244.2.6", "node-b", Some(false), Some(true), Some(true))
            ]),
        )],
        Some("node-a"),
        None,
    );
    let mut f = frontend("0.0.0.0", 30080, 8, &[1, 2]);
    f.count = 1;
    f.qcount = 1;
    let mut g = frontend(NODE_ADDR, 30080, 9, &[1, 2]);
    g.count = 1;
    g.qcount = 1;
    let m = maps(
        vec![f, g],
        vec![backend(1, "10.244.1.5", 8080), backend(2, "10.244.2.6", 8080)],
    );
    assert_eq!(kinds(&cilium_findings(Some(&desired), &m, None)), []);
}

#[test]
fn an_any_protocol_frontend_serves_its_tcp_service() {
    let desired = web(&["10.244.1.5", "10.244.2.6"]);
    let mut m = healthy();
    for f in &mut m.families.get_mut(&Family::Ipv4).unwrap().frontends {
        f.proto = L4::Any;
    }
    assert_eq!(kinds(&cilium_findings(Some(&desired), &m, None)), []);
}

/// Service default/web on nodePort 30080 with one endpoint, annotated `key: value`.
fn annotated_web(key: &str, value: &str) -> DesiredState {
    let mut svc = nodeport_service("default", "web", 30080);
    svc.metadata.annotations = Some(BTreeMap::from([(key.to_string(), value.to_string())]));
    desired_state(
        &[svc],
        &[v4_slice(
            "default",
            "web-1",
            "web",
            json!([ready("10.244.1.5", "node-a")]),
        )],
        Some("node-a"),
        None,
    )
}

#[test]
fn annotations_keep_a_service_off_a_node() {
    let desired = annotated_web("service.cilium.io/type", "LoadBalancer");
    // No frontend for it: nothing is missing.
    let empty = maps(vec![frontend("0.0.0.0", 31000, 3, &[])], Vec::new());
    let check = cilium_findings(Some(&desired), &empty, None);
    assert!(
        check.findings.iter().all(|f| f.port != Some(30080)),
        "{:?}",
        kinds(&check)
    );
    // Its frontends anyway: stale, as a warning.
    let check = cilium_findings(Some(&desired), &healthy(), None);
    assert!(
        check.findings.iter().any(|f| f.kind == Kind::StaleNodeport
            && f.severity == Severity::Warning
            && f.port == Some(30080)),
        "{:?}",
        kinds(&check)
    );
}

#[test]
fn a_node_selector_without_the_nodes_labels_is_not_judged() {
    let desired = annotated_web("service.cilium.io/node-selector", "pool=edge");
    let check = cilium_findings(Some(&desired), &healthy(), None);
    assert_eq!(kinds(&check), []);
    assert_eq!(check.not_checked.len(), 1, "{:?}", check.not_checked);
}

#[test]
fn a_map_at_ninety_percent_of_its_size_is_nearly_full() {
    let mut m = healthy();
    m.reads.push(MapRead {
        kind: MapKind::Backends4,
        origin: "bpf/cilium_lb4_backends_v3.json".into(),
        stats: Some(MapStats {
            map_type: "hash".into(),
            key_size: 4,
            value_size: 12,
            max_entries: 20,
        }),
        entries: 18,
        unreadable: Vec::new(),
        unreadable_count: 0,
        complete: true,
    });
    let check = cilium_findings(None, &m, None);
    assert_eq!(
        kinds(&check),
        [(
            Kind::MapNearlyFull,
            Severity::Warning,
            Some("cilium_lb4_backends_v3".into())
        )]
    );
    m.reads[0].entries = 20;
    assert_eq!(
        cilium_findings(None, &m, None).findings[0].severity,
        Severity::Critical
    );
    m.reads[0].entries = 17;
    assert_eq!(kinds(&cilium_findings(None, &m, None)), []);
}

#[test]
fn slots_are_judged_only_when_every_services_entry_was_decoded() {
    let mut m = healthy();
    let fm = m.families.get_mut(&Family::Ipv4).unwrap();
    fm.problems.push(GroupProblem::MissingSlots {
        key: FrontendKey {
            address: ip("0.0.0.0"),
            port: 30080,
            proto: L4::Tcp,
            scope: Scope::External,
        },
        ranges: vec![(3, 3)],
    });
    assert_eq!(
        kinds(&cilium_findings(None, &m, None)),
        [(
            Kind::SlotCountMismatch,
            Severity::Critical,
            Some("0.0.0.0:30080".into())
        )]
    );
    // The slot may be the entry that could not be decoded.
    m.families.get_mut(&Family::Ipv4).unwrap().services_complete = false;
    let check = cilium_findings(None, &m, None);
    assert_eq!(kinds(&check), []);
    assert_eq!(check.not_checked.len(), 1, "{:?}", check.not_checked);
}

#[test]
fn a_family_the_cluster_uses_without_its_maps_is_said_not_checked() {
    let svc = service(
        "default",
        "web",
        json!({
            "type": "NodePort",
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10", "fd00::10"],
            "ipFamilies": ["IPv4", "IPv6"],
            "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30080}],
        }),
    );
    let desired = desired_state(
        &[svc],
        &[v4_slice(
            "default",
            "web-1",
            "web",
            json!([ready("10.244.1.5", "node-a"), ready("10.244.2.6", "node-a")]),
        )],
        Some("node-a"),
        None,
    );
    let check = cilium_findings(Some(&desired), &healthy(), None);
    assert_eq!(kinds(&check), []);
    assert_eq!(check.not_checked.len(), 1, "{:?}", check.not_checked);
    assert!(check.not_checked[0].contains("cilium_lb6_services_v2"));
}

#[test]
fn a_frontend_caught_between_two_slot_writes_is_not_judged() {
    let desired = web(&["10.244.1.5", "10.244.2.6"]);
    // Slots 1 and 2 being swapped: backend 1 in both for a moment.
    let m = maps(
        vec![
            frontend("0.0.0.0", 30080, 8, &[1, 2]),
            frontend(NODE_ADDR, 30080, 9, &[1, 1]),
        ],
        vec![backend(1, "10.244.1.5", 8080), backend(2, "10.244.2.6", 8080)],
    );
    let check = cilium_findings(Some(&desired), &m, Some(&m.clone()));
    assert_eq!(kinds(&check), []);
    assert_eq!(check.not_checked.len(), 1, "{:?}", check.not_checked);
}
