//! The compact forms the watch keeps and the desired state holds give back exactly what
//! was put in: addresses, their order, conditions and hints.

use std::net::SocketAddr;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

use crate::heart::desired::EndpointSet;
use crate::heart::desired::slices::{NodeHint, SliceRead, ZoneTable, read_slice};

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn an_endpoint_set_keeps_order_and_membership_whatever_the_families() {
    let v4 = [
        "10.0.0.2:80",
        "10.0.0.10:80",
        "10.0.0.2:79",
        "9.255.255.255:65535",
        "10.0.0.2:80",
    ];
    let set: EndpointSet = v4.iter().map(|a| addr(a)).collect();
    let mut sorted: Vec<SocketAddr> = v4.iter().map(|a| addr(a)).collect();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        set.iter().collect::<Vec<_>>(),
        sorted,
        "SocketAddr's order, duplicates once"
    );
    assert_eq!(set.len(), 4);
    assert!(set.contains(&addr("10.0.0.2:79")));
    assert!(!set.contains(&addr("10.0.0.2:81")));
    assert!(
        !set.contains(&addr("[::ffff:10.0.0.2]:80")),
        "an IPv6 address is not its IPv4 twin"
    );

    // One IPv6 address among them: the same answers.
    let mut mixed = set.clone();
    assert!(mixed.insert(addr("[fd00::1]:80")));
    assert!(!mixed.insert(addr("10.0.0.10:80")), "already there");
    sorted.push(addr("[fd00::1]:80"));
    sorted.sort();
    assert_eq!(mixed.iter().collect::<Vec<_>>(), sorted);
    assert!(mixed.contains(&addr("[fd00::1]:80")) && mixed.contains(&addr("10.0.0.10:80")));
    assert_ne!(mixed, set);
    assert!(EndpointSet::default().is_empty());
}

fn slice(endpoints: serde_json::Value) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"namespace": "shop", "name": "web-abc",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    }))
    .unwrap()
}

#[test]
fn a_slices_endpoints_read_back_with_their_conditions_and_hints() {
    let read = |endpoints| {
        let mut zones = ZoneTable::default();
        let SliceRead::Use { summary, .. } = read_slice(&slice(endpoints), Some("node-a"), &mut zones) else {
            panic!("a slice kube-proxy uses")
        };
        (summary, zones)
    };
    let (summary, zones) = read(json!([
        {"addresses": ["10.1.0.1"], "conditions": {"ready": true}, "nodeName": "node-a"},
        {"addresses": ["10.1.0.2"], "conditions": {"ready": false, "serving": true, "terminating": true},
         "hints": {"forZones": [{"name": "z1"}, {"name": "z2"}], "forNodes": [{"name": "node-b"}]}},
        {"addresses": ["10.1.0.3"], "conditions": {"ready": false, "serving": false},
         "hints": {"forNodes": [{"name": "node-a"}]}},
    ]));
    let got: Vec<_> = summary.endpoints.iter().collect();
    assert_eq!(got.len(), 3);
    let (z1, z2) = (zones.lookup("z1").unwrap(), zones.lookup("z2").unwrap());
    let row = |e: &crate::heart::desired::slices::SliceEndpoint<'_>| {
        (
            e.ip.to_string(),
            e.ready,
            e.serving,
            e.terminating,
            e.local,
            e.zone_hints.to_vec(),
            e.node_hint,
        )
    };
    assert_eq!(
        row(&got[0]),
        (
            "10.1.0.1".into(),
            true,
            true,
            false,
            true,
            vec![],
            NodeHint::Absent
        )
    );
    assert_eq!(
        row(&got[1]),
        (
            "10.1.0.2".into(),
            false,
            true,
            true,
            false,
            vec![z1, z2],
            NodeHint::Elsewhere
        )
    );
    assert_eq!(
        row(&got[2]),
        (
            "10.1.0.3".into(),
            false,
            false,
            false,
            false,
            vec![],
            NodeHint::ThisNode
        )
    );

    // Without hints anywhere, none are kept, and none are read back.
    let (plain, _) = read(json!([{"addresses": ["10.1.0.9"]}]));
    let only = plain.endpoints.iter().next().unwrap();
    assert!(only.zone_hints.is_empty() && only.ready && only.serving && !only.terminating);
}
