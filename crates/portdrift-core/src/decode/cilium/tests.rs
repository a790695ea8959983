use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;
use crate::heart::model::Family;

// Byte builders that follow the documented layouts field by field, so that a test
// reads like the struct it encodes.

fn key4(addr: [u8; 4], port: u16, slot: u16, proto: u8, scope: u8) -> Vec<u8> {
    let mut k = addr.to_vec();
    k.extend_from_slice(&port.to_be_bytes());
    k.extend_from_slice(&slot.to_le_bytes());
    k.extend_from_slice(&[proto, scope, 0, 0]);
    k
}

fn svc_value(word: u32, count: u16, rev_nat: u16, flags: u8, flags2: u8, qcount: u16) -> Vec<u8> {
    let mut v = word.to_le_bytes().to_vec();
    v.extend_from_slice(&count.to_le_bytes());
    v.extend_from_slice(&rev_nat.to_be_bytes());
    v.extend_from_slice(&[flags, flags2]);
    v.extend_from_slice(&qcount.to_le_bytes());
    v
}

fn backend4(addr: [u8; 4], port: u16, proto: u8, flags: u8) -> Vec<u8> {
    let mut v = addr.to_vec();
    v.extend_from_slice(&port.to_be_bytes());
    v.extend_from_slice(&[proto, flags, 0, 0, 0, 0]);
    v
}

const TCP: u8 = 6;
const NODEPORT: u8 = 0x02;
const EXT_LOCAL: u8 = 0x04;
const ROUTABLE: u8 = 0x40;
const TWO_SCOPES: u8 = 0x20;

/// The surrogate NodePort 0.0.0.0:30080/TCP with two backends, as (key, value) pairs.
fn nodeport_30080() -> Vec<(Vec<u8>, Vec<u8>)> {
    vec![
        (key4([0; 4], 30080, 0, TCP, 0), svc_value(0, 2, 8, NODEPORT, 0, 0)),
        (key4([0; 4], 30080, 1, TCP, 0), svc_value(11, 0, 8, 0, 0, 0)),
        (key4([0; 4], 30080, 2, TCP, 0), svc_value(12, 0, 8, 0, 0, 0)),
    ]
}

fn entries(pairs: &[(Vec<u8>, Vec<u8>)]) -> Vec<ServiceEntry> {
    pairs
        .iter()
        .map(|(k, v)| parse_service_entry(k, v, Family::Ipv4).unwrap())
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    let items: Vec<String> = bytes.iter().map(|b| format!("\"0x{b:02x}\"")).collect();
    format!("[{}]", items.join(","))
}

fn bpftool_json(pairs: &[(Vec<u8>, Vec<u8>)]) -> String {
    let items: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{{\"key\":{},\"value\":{}}}", hex(k), hex(v)))
        .collect();
    format!("[{}]", items.join(","))
}

#[test]
fn the_worked_example_from_a_real_dump_decodes() {
    // NodePort master as bpftool printed it on a kind node (tkng.io's NodePort chapter).
    let key = [
        0xac, 0x12, 0x00, 0x06, 0x75, 0xdb, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    let value = [0, 0, 0, 0, 0x03, 0, 0, 0x08, 0x42, 0, 0, 0];
    let e = parse_service_entry(&key, &value, Family::Ipv4).unwrap();
    assert_eq!(e.address, IpAddr::V4(Ipv4Addr::new(172, 18, 0, 6)));
    assert_eq!(
        (e.port, e.slot, e.proto, e.scope),
        (30171, 0, L4::Any, Scope::External)
    );
    assert_eq!((e.count, e.rev_nat, e.qcount), (3, 8, 0));
    assert!(e.flags.nodeport() && e.flags.routable());
}

#[test]
fn a_nodeport_frontend_groups_with_its_two_backends() {
    let (frontends, problems) = group_frontends(&entries(&nodeport_30080()));
    assert_eq!(problems, vec![]);
    assert_eq!(frontends.len(), 1);
    let f = &frontends[0];
    assert_eq!(f.address, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    assert_eq!((f.port, f.proto, f.scope), (30080, L4::Tcp, Scope::External));
    assert_eq!((f.count, f.qcount, f.rev_nat), (2, 0, 8));
    assert!(f.flags.nodeport());
    assert!(!f.flags.routable(), "the surrogate is not routable");
    assert_eq!(f.slots, vec![(1, 11), (2, 12)]);
}

#[test]
fn a_cluster_ip_frontend_has_neither_nodeport_nor_routable() {
    let pairs = vec![
        (key4([10, 96, 32, 28], 80, 0, TCP, 0), svc_value(0, 1, 7, 0, 0, 0)),
        (
            key4([10, 96, 32, 28], 80, 1, TCP, 0),
            svc_value(11, 0, 7, 0, 0, 0),
        ),
    ];
    let (frontends, problems) = group_frontends(&entries(&pairs));
    assert!(problems.is_empty());
    let f = &frontends[0];
    assert_eq!(f.address, IpAddr::V4(Ipv4Addr::new(10, 96, 32, 28)));
    assert_eq!(f.port, 80);
    assert_eq!(f.flags, SvcFlags(0));
    assert!(!f.flags.nodeport() && !f.flags.routable());
}

#[test]
fn proto_any_and_tcp_are_two_frontends() {
    let pairs = vec![
        (
            key4([10, 0, 1, 21], 30080, 0, 0, 0),
            svc_value(0, 0, 9, NODEPORT | ROUTABLE, 0, 0),
        ),
        (
            key4([10, 0, 1, 21], 30080, 0, TCP, 0),
            svc_value(0, 0, 9, NODEPORT | ROUTABLE, 0, 0),
        ),
    ];
    let (frontends, problems) = group_frontends(&entries(&pairs));
    assert!(problems.is_empty());
    let protos: Vec<L4> = frontends.iter().map(|f| f.proto).collect();
    assert_eq!(protos, vec![L4::Any, L4::Tcp]);
    assert_eq!(L4::from_byte(17), L4::Udp);
    assert_eq!(L4::from_byte(132), L4::Sctp);
    assert_eq!(L4::from_byte(99), L4::Other(99));
    assert_eq!(L4::Other(99).byte(), 99);
}

#[test]
fn a_local_policy_frontend_has_one_master_per_scope() {
    let ext = NODEPORT | ROUTABLE | EXT_LOCAL;
    let pairs = vec![
        // Scope external: only the node-local backend.
        (
            key4([10, 0, 1, 21], 30081, 0, TCP, 0),
            svc_value(0, 1, 5, ext, TWO_SCOPES, 0),
        ),
        (
            key4([10, 0, 1, 21], 30081, 1, TCP, 0),
            svc_value(101, 0, 5, 0, 0, 0),
        ),
        // Scope internal: every backend.
        (
            key4([10, 0, 1, 21], 30081, 0, TCP, 1),
            svc_value(0, 2, 5, ext, TWO_SCOPES, 0),
        ),
        (
            key4([10, 0, 1, 21], 30081, 1, TCP, 1),
            svc_value(101, 0, 5, 0, 0, 0),
        ),
        (
            key4([10, 0, 1, 21], 30081, 2, TCP, 1),
            svc_value(102, 0, 5, 0, 0, 0),
        ),
    ];
    let (frontends, problems) = group_frontends(&entries(&pairs));
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(frontends.len(), 2);
    let (e, i) = (&frontends[0], &frontends[1]);
    assert_eq!((e.scope, i.scope), (Scope::External, Scope::Internal));
    assert!(e.flags.ext_local() && e.flags.two_scopes() && !e.flags.int_local());
    assert_eq!(e.slots, vec![(1, 101)]);
    assert_eq!(i.slots, vec![(1, 101), (2, 102)]);
}

#[test]
fn quarantined_slots_after_count_are_kept() {
    let pairs = vec![
        (key4([10, 96, 0, 10], 53, 0, 17, 0), svc_value(0, 1, 3, 0, 0, 1)),
        (key4([10, 96, 0, 10], 53, 1, 17, 0), svc_value(21, 0, 3, 0, 0, 0)),
        (
            key4([10, 96, 0, 10], 53, 2, 17, 0),
            svc_value(22, 0, 3, 0, 0x40, 0),
        ),
    ];
    let (frontends, problems) = group_frontends(&entries(&pairs));
    assert!(problems.is_empty());
    assert_eq!(frontends[0].slots, vec![(1, 21), (2, 22)]);
    assert_eq!((frontends[0].count, frontends[0].qcount), (1, 1));
}

#[test]
fn an_ipv6_backend_decodes() {
    let addr = Ipv6Addr::new(0xfd00, 0x10, 0x244, 0, 0, 0, 0, 0x5);
    let mut value = addr.octets().to_vec();
    value.extend_from_slice(&8080u16.to_be_bytes());
    value.extend_from_slice(&[TCP, 1]);
    value.extend_from_slice(&3u16.to_le_bytes());
    value.extend_from_slice(&[7, 0]);
    let b = parse_backend_entry(&42u32.to_le_bytes(), &value, Family::Ipv6).unwrap();
    assert_eq!(b.id, 42);
    assert_eq!(b.address, IpAddr::V6(addr));
    assert_eq!((b.port, b.proto, b.flags), (8080, L4::Tcp, 1));
    assert_eq!(b.state(), BackendState::Terminating);
    assert_eq!((b.cluster_id, b.zone), (3, 7));
}

#[test]
fn an_ipv6_service_key_and_rev_nat_decode() {
    let addr = Ipv6Addr::new(0xfd00, 0x10, 0x96, 0, 0, 0, 0, 0x1);
    let mut key = addr.octets().to_vec();
    key.extend_from_slice(&443u16.to_be_bytes());
    key.extend_from_slice(&1u16.to_le_bytes());
    key.extend_from_slice(&[TCP, 0, 0, 0]);
    let e = parse_service_entry(&key, &svc_value(77, 0, 4, 0, 0, 0), Family::Ipv6).unwrap();
    assert_eq!(
        (e.address, e.port, e.slot, e.word),
        (IpAddr::V6(addr), 443, 1, 77)
    );

    let mut value = addr.octets().to_vec();
    value.extend_from_slice(&443u16.to_be_bytes());
    let r = parse_rev_nat_entry(&4u16.to_be_bytes(), &value, Family::Ipv6).unwrap();
    assert_eq!((r.id, r.address, r.port), (4, IpAddr::V6(addr), 443));
}

#[test]
fn a_rev_nat_and_a_v4_backend_decode_from_the_research_script_bytes() {
    let r = parse_rev_nat_entry(&[0x00, 0x08], &[0x0a, 0x00, 0x01, 0x15, 0x75, 0x80], Family::Ipv4).unwrap();
    assert_eq!(
        (r.id, r.address, r.port),
        (8, IpAddr::V4(Ipv4Addr::new(10, 0, 1, 21)), 30080)
    );
    let b = parse_backend_entry(
        &[1, 0, 0, 0],
        &backend4([10, 244, 1, 5], 8080, TCP, 0),
        Family::Ipv4,
    )
    .unwrap();
    assert_eq!((b.id, b.port, b.state()), (1, 8080, BackendState::Active));
}

#[test]
fn wrong_sizes_are_errors_not_panics() {
    let err = parse_service_entry(&[0; 11], &[0; 12], Family::Ipv4).unwrap_err();
    assert_eq!(
        err,
        CiliumMapError::WrongSize {
            map: "cilium_lb4_services_v2",
            what: "key",
            expected: 12,
            got: 11
        }
    );
    assert!(parse_service_entry(&[0; 12], &[0; 12], Family::Ipv6).is_err());
    assert!(parse_backend_entry(&[0; 4], &[0; 13], Family::Ipv4).is_err());
    assert!(parse_rev_nat_entry(&[], &[], Family::Ipv6).is_err());
    for kind in MapKind::ALL {
        let (k, v) = (vec![0; kind.key_size()], vec![0; kind.value_size()]);
        let dump = parse_bpftool_dump(bpftool_json(&[(k, v)]).as_bytes(), kind).unwrap();
        assert!(dump.problems.is_empty(), "{kind:?}");
    }
}

#[test]
fn a_slot_beyond_count_is_a_problem_and_left_out() {
    let mut pairs = nodeport_30080();
    pairs.push((key4([0; 4], 30080, 3, TCP, 0), svc_value(13, 0, 8, 0, 0, 0)));
    let (frontends, problems) = group_frontends(&entries(&pairs));
    assert_eq!(frontends[0].slots, vec![(1, 11), (2, 12)]);
    assert!(matches!(
        problems[..],
        [GroupProblem::SlotBeyondCount {
            slot: 3,
            backend_id: 13,
            count: 2,
            qcount: 0,
            ..
        }]
    ));
}

#[test]
fn slots_without_a_master_are_a_problem_and_no_frontend() {
    let pairs = nodeport_30080()[1..].to_vec();
    let (frontends, problems) = group_frontends(&entries(&pairs));
    assert!(frontends.is_empty());
    assert!(matches!(&problems[..], [GroupProblem::MissingMaster { slots, .. }] if slots == &[1, 2]));
}

#[test]
fn duplicate_and_missing_slots_are_problems() {
    let mut pairs = nodeport_30080();
    // The master now claims four slots; slot 2 is read twice with different IDs, slot 1
    // twice with the same; slots 3 and 4 are absent.
    pairs[0].1 = svc_value(0, 4, 8, NODEPORT, 0, 0);
    pairs.push((key4([0; 4], 30080, 2, TCP, 0), svc_value(99, 0, 8, 0, 0, 0)));
    pairs.push(pairs[1].clone());
    let (frontends, problems) = group_frontends(&entries(&pairs));
    assert_eq!(frontends[0].slots, vec![(1, 11)]);
    let key = FrontendKey::of(&entries(&pairs)[0]);
    assert!(problems.contains(&GroupProblem::ConflictingSlot {
        key,
        slot: 2,
        backend_ids: vec![12, 99]
    }));
    assert!(problems.contains(&GroupProblem::RepeatedEntry { key, slot: 1 }));
    assert!(problems.contains(&GroupProblem::MissingSlots {
        key,
        ranges: vec![(3, 4)]
    }));
}

#[test]
fn a_huge_count_gives_one_range_not_a_slot_per_number() {
    let pairs = vec![(
        key4([0; 4], 1, 0, TCP, 0),
        svc_value(0, u16::MAX, 1, 0, 0, u16::MAX),
    )];
    let (_, problems) = group_frontends(&entries(&pairs));
    assert!(
        matches!(&problems[..], [GroupProblem::MissingSlots { ranges, .. }] if ranges == &[(1, u16::MAX)])
    );
}

#[test]
fn a_bpftool_dump_decodes_every_entry() {
    let json = bpftool_json(&nodeport_30080());
    let dump = parse_bpftool_dump(json.as_bytes(), MapKind::Services4).unwrap();
    assert_eq!(dump.entries, 3);
    assert!(dump.problems.is_empty());
    assert_eq!(dump.services, entries(&nodeport_30080()));
    let (frontends, _) = group_frontends(&dump.services);
    assert_eq!(frontends[0].slots, vec![(1, 11), (2, 12)]);
}

#[test]
fn bad_entries_are_problems_with_their_index_and_the_rest_is_read() {
    let good = nodeport_30080();
    let json = format!(
        "[{},{},{},{},{},{},{}]",
        // 0: a short key.
        format_args!(
            "{{\"key\":{},\"value\":{}}}",
            hex(&good[0].0[..11]),
            hex(&good[0].1)
        ),
        // 1: a non-hex byte.
        format_args!("{{\"key\":[\"0xzz\"],\"value\":{}}}", hex(&good[0].1)),
        // 2: only the BTF form.
        "{\"formatted\":{\"key\":{\"address\":0},\"value\":{}}}",
        // 3: no value.
        format_args!("{{\"key\":{}}}", hex(&good[1].0)),
        // 4: not an object; 5: a number where a byte string belongs.
        "42",
        format_args!("{{\"key\":{},\"value\":[1,2]}}", hex(&good[1].0)),
        // 6: a good entry, with bpftool's formatted form beside it.
        format_args!(
            "{{\"key\":{},\"value\":{},\"formatted\":{{}}}}",
            hex(&good[0].0),
            hex(&good[0].1)
        ),
    );
    let dump = parse_bpftool_dump(json.as_bytes(), MapKind::Services4).unwrap();
    assert_eq!(dump.entries, 7);
    assert_eq!(dump.services.len(), 1);
    let got: Vec<(usize, &CiliumMapError)> = dump.problems.iter().map(|p| (p.index, &p.error)).collect();
    assert!(matches!(got[0], (0, CiliumMapError::WrongSize { got: 11, .. })));
    assert!(matches!(
        got[1],
        (
            1,
            CiliumMapError::NotHexByte {
                field: "key",
                position: 0,
                ..
            }
        )
    ));
    assert!(matches!(got[2], (2, CiliumMapError::OnlyFormatted)));
    assert!(matches!(got[3], (3, CiliumMapError::Missing("value"))));
    assert!(matches!(got[4], (4, CiliumMapError::NotAnObject)));
    assert!(matches!(
        got[5],
        (5, CiliumMapError::NotHexByte { field: "value", .. })
    ));
    assert_eq!(got.len(), 6);
}

#[test]
fn a_document_that_is_not_a_json_array_is_an_error() {
    assert!(matches!(
        parse_bpftool_dump(b"not json", MapKind::Backends4),
        Err(CiliumMapError::NotJson(_))
    ));
    assert_eq!(
        parse_bpftool_dump(b"{\"key\":[]}", MapKind::Backends4),
        Err(CiliumMapError::NotAnArray("an object"))
    );
    for (doc, what) in [
        ("42", "a number"),
        ("\"x\"", "a string"),
        ("null", "null"),
        ("true", "a boolean"),
    ] {
        assert_eq!(
            parse_bpftool_dump(doc.as_bytes(), MapKind::Backends4),
            Err(CiliumMapError::NotAnArray(what)),
            "{doc}"
        );
    }
    // Cut short, or followed by more than one document: not read.
    assert!(matches!(
        parse_bpftool_dump(b"[{\"key\":[\"0x01\"]", MapKind::Backends4),
        Err(CiliumMapError::NotJson(_))
    ));
    assert!(matches!(
        parse_bpftool_dump(b"[] []", MapKind::Backends4),
        Err(CiliumMapError::NotJson(_))
    ));
    let empty = parse_bpftool_dump(b"[]", MapKind::RevNat6).unwrap();
    assert_eq!((empty.entries, empty.problems.len()), (0, 0));
}

#[test]
fn hex_bytes_accept_one_or_two_digits_either_case_only() {
    for (text, ok) in [
        ("0x0A", true),
        ("0xa", true),
        ("0X1f", true),
        ("0x", false),
        ("0x100", false),
        ("ff", false),
        ("0x+1", false),
    ] {
        let json = format!("[{{\"key\":[\"{text}\",\"0x00\"],\"value\":[\"0x00\"]}}]");
        let dump = parse_bpftool_dump(json.as_bytes(), MapKind::RevNat4).unwrap();
        let hex_error = dump
            .problems
            .iter()
            .any(|p| matches!(p.error, CiliumMapError::NotHexByte { .. }));
        assert_eq!(!hex_error, ok, "{text}");
    }
}

#[test]
fn bpftools_error_answer_is_said_as_such() {
    let err = parse_bpftool_dump(br#"{"error":"failed to get btf"}"#, MapKind::Services4).unwrap_err();
    assert_eq!(err, CiliumMapError::Tool("failed to get btf".into()));
    assert!(err.to_string().contains("failed to get btf"));
}
