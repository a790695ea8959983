use std::net::IpAddr;

use super::*;
use crate::heart::explain::model::{
    Action, Chain, Cond, CtState, DnatTo, Element, Field, KeyPart, Net, Rule, RulePlace, SetRef, Side,
};
use crate::heart::model::Protocol;

const CLEAN: &[u8] = include_bytes!("../../../../../../testdata/clean-nftables/nft.json");
const STALE_ELEMENT: &[u8] = include_bytes!("../../../../../../testdata/nftables-stale-element/nft.json");
const STALE_DROP: &[u8] =
    include_bytes!("../../../../../../testdata/local-policy-stale-drop-nftables/nft.json");
const MODE_SWITCH: &[u8] = include_bytes!("../../../../../../testdata/nftables-mode-switch/nft.json");

/// kube-proxy's tables only, as explain reads an nftables-mode node.
fn kube_proxy_only(_: Family, name: &str) -> bool {
    name != "kube-proxy"
}

fn nothing_skipped(_: Family, _: &str) -> bool {
    false
}

fn parse(json: &[u8], skip: &dyn Fn(Family, &str) -> bool) -> Rulesets {
    parse_ruleset(json, "nft.json", skip).expect("an nft -j document")
}

fn table<'r>(rulesets: &'r Rulesets, name: &str, family: Family) -> &'r Table {
    rulesets
        .tables
        .iter()
        .find(|t| t.name == name && t.family == family)
        .unwrap_or_else(|| panic!("no table {name} ({family})"))
}

fn chain<'t>(table: &'t Table, name: &str) -> &'t Chain {
    &table.chains[table.chain(name).unwrap_or_else(|| panic!("no chain {name}"))]
}

fn host(addr: &str) -> Net {
    Net::parse(addr).expect("an address")
}

fn doc(objects: &str) -> Vec<u8> {
    format!(r#"{{"nftables": [{{"metainfo": {{"json_schema_version": 1}}}}, {objects}]}}"#).into_bytes()
}

#[test]
fn kube_proxy_table_has_its_base_chains_with_hook_priority_and_type() {
    let rulesets = parse(CLEAN, &kube_proxy_only);
    assert_eq!(rulesets.tables.len(), 1, "only ip kube-proxy is read");
    let kp = table(&rulesets, "ip kube-proxy", Family::Ipv4);
    assert_eq!(kp.backend, Backend::Nftables);
    assert_eq!(kp.origin, "nft.json");
    assert_eq!(
        chain(kp, "nat-prerouting").base,
        Some(BaseChain {
            hook: Hook::Prerouting,
            priority: -100,
            kind: ChainType::Nat,
            accepts: true,
        })
    );
    assert_eq!(
        chain(kp, "filter-prerouting-pre-dnat").base.map(|b| b.priority),
        Some(-110)
    );
    assert_eq!(chain(kp, "services").base, None);
    assert_eq!(
        chain(kp, "nat-prerouting").rules[0].action,
        Action::Jump("services".to_string())
    );
    assert!(rulesets.gaps.is_empty(), "{:?}", rulesets.gaps);
}

#[test]
fn services_chain_dispatches_nodeports_through_the_service_nodeports_vmap() {
    let rulesets = parse(CLEAN, &kube_proxy_only);
    let services = chain(table(&rulesets, "ip kube-proxy", Family::Ipv4), "services");
    let rule = services
        .rules
        .iter()
        .find(|r| r.text.contains("@service-nodeports"))
        .expect("the NodePort dispatch rule");
    assert_eq!(
        rule.text,
        "ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports"
    );
    assert!(matches!(rule.place, RulePlace::Handle(_)));
    assert_eq!(
        rule.conds,
        vec![Cond::Lookup {
            key: vec![Field::Addr(Side::Destination)],
            set: SetRef::Named("nodeport-ips".to_string()),
            negated: false,
        }]
    );
    assert_eq!(
        rule.action,
        Action::Vmap {
            key: vec![Field::L4Proto, Field::Port(Side::Destination)],
            map: SetRef::Named("service-nodeports".to_string()),
        }
    );
}

#[test]
fn service_chain_picks_an_endpoint_with_numgen() {
    let rulesets = parse(CLEAN, &kube_proxy_only);
    let service = chain(
        table(&rulesets, "ip kube-proxy", Family::Ipv4),
        "service-XVAFOOW3-analytics/exporter/tcp/http",
    );
    let Some(Rule {
        action: Action::Numgen {
            modulus,
            map: SetRef::Inline(elements),
        },
        conds,
        ..
    }) = service.rules.last()
    else {
        panic!("not a numgen rule: {:?}", service.rules.last());
    };
    assert_eq!(*modulus, 5);
    assert!(conds.is_empty());
    assert_eq!(elements.len(), 5);
    assert_eq!(
        elements[0],
        Element {
            key: vec![KeyPart::Int(0, 0)],
            action: Some(Action::Goto(
                "endpoint-YXZOJ2MF-analytics/exporter/tcp/http__10.244.2.43/8080".to_string()
            )),
            text: "0 : goto endpoint-YXZOJ2MF-analytics/exporter/tcp/http__10.244.2.43/8080".to_string(),
        }
    );
    assert_eq!(elements[4].key, vec![KeyPart::Int(4, 4)]);
    // The first rule marks traffic to the ClusterIP from outside the pod network.
    assert_eq!(
        service.rules[0].conds,
        vec![
            Cond::Addr {
                side: Side::Destination,
                nets: vec![host("10.99.186.8")],
                negated: false,
            },
            Cond::Addr {
                side: Side::Source,
                nets: vec![host("10.244.0.0/16")],
                negated: true,
            },
        ]
    );
}

#[test]
fn endpoint_chain_ends_in_the_dnat_of_its_address_and_port() {
    let rulesets = parse(CLEAN, &kube_proxy_only);
    let endpoint = chain(
        table(&rulesets, "ip kube-proxy", Family::Ipv4),
        "endpoint-YXZOJ2MF-analytics/exporter/tcp/http__10.244.2.43/8080",
    );
    assert_eq!(endpoint.rules.len(), 2);
    assert_eq!(
        endpoint.rules[0].conds,
        vec![Cond::Addr {
            side: Side::Source,
            nets: vec![host("10.244.2.43")],
            negated: false,
        }]
    );
    assert_eq!(
        endpoint.rules[0].action,
        Action::Jump("mark-for-masquerade".to_string())
    );
    let dnat = &endpoint.rules[1];
    assert_eq!(dnat.text, "meta l4proto tcp dnat to 10.244.2.43:8080");
    assert_eq!(
        dnat.conds,
        vec![Cond::Protocol {
            protocol: Some(Protocol::Tcp),
            negated: false,
        }]
    );
    assert_eq!(
        dnat.action,
        Action::Dnat(DnatTo {
            addr: "10.244.2.43".parse::<IpAddr>().unwrap(),
            port: Some(8080),
        })
    );
}

#[test]
fn service_nodeports_map_holds_typed_elements_with_their_verdicts() {
    let rulesets = parse(CLEAN, &kube_proxy_only);
    let kp = table(&rulesets, "ip kube-proxy", Family::Ipv4);
    let map = kp.set("service-nodeports").expect("the service-nodeports map");
    let element = map
        .elements
        .iter()
        .find(|e| {
            e.key
                == vec![
                    KeyPart::Protocol(Some(Protocol::Tcp)),
                    KeyPart::Port(30985, 30985),
                ]
        })
        .expect("tcp . 30985");
    assert_eq!(
        element.action,
        Some(Action::Goto(
            "external-YTUOTC7J-reports/backend/tcp/http".to_string()
        ))
    );
    assert_eq!(
        element.text,
        "tcp . 30985 : goto external-YTUOTC7J-reports/backend/tcp/http"
    );
    // Elements with a comment keep it in their text, as nft prints them.
    let no_endpoints = kp
        .set("no-endpoint-nodeports")
        .expect("the no-endpoint-nodeports map");
    let rejected = no_endpoints
        .elements
        .iter()
        .find(|e| {
            e.key
                == vec![
                    KeyPart::Protocol(Some(Protocol::Tcp)),
                    KeyPart::Port(30009, 30009),
                ]
        })
        .expect("tcp . 30009");
    assert_eq!(
        rejected.text,
        "tcp . 30009 comment \"ml/sessions:http\" : goto reject-chain"
    );
    // A set: keys only.
    let cluster_ips = kp.set("cluster-ips").expect("the cluster-ips set");
    assert!(cluster_ips.elements.iter().all(|e| e.action.is_none()));
    assert!(
        cluster_ips
            .elements
            .iter()
            .any(|e| e.key == vec![KeyPart::Addr(host("10.96.0.1"))])
    );
    let firewall = kp.set("firewall-ips").expect("the firewall-ips map");
    assert_eq!(
        firewall.elements[0].key,
        vec![
            KeyPart::Addr(host("203.0.113.225")),
            KeyPart::Protocol(Some(Protocol::Tcp)),
            KeyPart::Port(443, 443),
        ]
    );
}

#[test]
fn session_affinity_lookups_carry_the_set_timeout_and_the_update_is_no_action() {
    let rulesets = parse(CLEAN, &kube_proxy_only);
    let kp = table(&rulesets, "ip kube-proxy", Family::Ipv4);
    let service = chain(kp, "service-YTUOTC7J-reports/backend/tcp/http");
    let name = "affinity-T2PRDG3K-reports/backend/tcp/http__10.244.3.13/8080";
    assert_eq!(
        service.rules[1].conds,
        vec![Cond::Affinity {
            name: name.to_string(),
            seconds: Some(10800),
        }]
    );
    assert_eq!(
        service.rules[1].action,
        Action::Goto("endpoint-T2PRDG3K-reports/backend/tcp/http__10.244.3.13/8080".to_string())
    );
    let endpoint = chain(kp, "endpoint-T2PRDG3K-reports/backend/tcp/http__10.244.3.13/8080");
    assert_eq!(endpoint.rules[1].text, format!("update @{name} {{ ip saddr }}"));
    assert_eq!(endpoint.rules[1].action, Action::Continue);
    assert!(endpoint.rules[1].conds.is_empty());
}

#[test]
fn masquerade_marks_and_local_sources_are_read() {
    let rulesets = parse(CLEAN, &kube_proxy_only);
    let kp = table(&rulesets, "ip kube-proxy", Family::Ipv4);
    assert_eq!(
        chain(kp, "mark-for-masquerade").rules[0].action,
        Action::SetMark {
            value: 0x4000,
            mask: 0x4000,
        }
    );
    let masquerading = chain(kp, "masquerading");
    assert_eq!(
        masquerading.rules[0].conds,
        vec![Cond::Mark {
            value: 0,
            mask: 0x4000,
            negated: false,
        }]
    );
    assert_eq!(masquerading.rules[0].action, Action::Return);
    assert_eq!(
        masquerading.rules[1].action,
        Action::SetMark {
            value: 0x4000,
            mask: 0
        }
    );
    assert_eq!(masquerading.rules[2].action, Action::SourceNat);
    let external = chain(kp, "external-GNFU7GGY-catalog/mailer/tcp/http");
    let local = &external.rules[1];
    assert_eq!(
        local.conds,
        vec![Cond::AddrLocal {
            side: Side::Source,
            local: true,
            negated: false,
        }]
    );
    assert_eq!(local.comment.as_deref(), Some("masquerade local traffic"));
    assert_eq!(
        local.text,
        "fib saddr type local jump mark-for-masquerade comment \"masquerade local traffic\""
    );
    let filter_input = chain(kp, "filter-input");
    assert_eq!(
        filter_input.rules[0].conds,
        vec![Cond::CtState {
            states: vec![CtState::New],
            negated: false,
        }]
    );
}

#[test]
fn iptables_nft_tables_are_left_out_when_skip_says_so() {
    let all = parse(CLEAN, &nothing_skipped);
    let names: Vec<&str> = all.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["ip mangle", "ip filter", "ip nat", "ip kube-proxy"]);
    let skip_iptables = |_: Family, name: &str| matches!(name, "nat" | "filter" | "mangle");
    let some = parse(CLEAN, &skip_iptables);
    let names: Vec<&str> = some.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["ip kube-proxy"]);
    assert!(some.gaps.is_empty(), "{:?}", some.gaps);
}

#[test]
fn expressions_it_cannot_decide_become_unknown_not_dropped() {
    // iptables-nft's conntrack match (`ct status dnat`: its options are not in the
    // JSON) stays an unknown condition; its comment match always matches.
    let all = parse(CLEAN, &nothing_skipped);
    let firewall = chain(table(&all, "ip filter", Family::Ipv4), "KUBE-FIREWALL");
    let rule = &firewall.rules[0];
    assert_eq!(rule.action, Action::Drop);
    assert_eq!(rule.conds.len(), 3, "{:?}", rule.conds);
    assert!(
        matches!(&rule.conds[2], Cond::Unknown(t) if t.contains("conntrack")),
        "{:?}",
        rule.conds
    );
    // An xt target whose options are lost (MARK) is an unknown action; MASQUERADE is
    // a source NAT by its name alone.
    let switch = parse(MODE_SWITCH, &nothing_skipped);
    let postrouting = chain(table(&switch, "ip nat", Family::Ipv4), "KUBE-POSTROUTING");
    assert!(
        matches!(&postrouting.rules[1].action, Action::Unknown(t) if t.contains("MARK")),
        "{:?}",
        postrouting.rules[1]
    );
    assert_eq!(postrouting.rules[2].action, Action::SourceNat);
    let odd = doc(concat!(
        r#"{"table": {"family": "ip", "name": "t", "handle": 1}},"#,
        r#"{"chain": {"family": "ip", "table": "t", "name": "c", "handle": 1}},"#,
        r#"{"rule": {"family": "ip", "table": "t", "chain": "c", "handle": 2, "expr": ["#,
        r#"{"match": {"op": "==", "left": {"osf": {"key": "name"}}, "right": "Linux"}},"#,
        r#"{"queue": {"num": 1}}]}}"#
    ));
    let rulesets = parse(&odd, &nothing_skipped);
    let rule = &rulesets.tables[0].chains[0].rules[0];
    assert!(
        matches!(&rule.conds[..], [Cond::Unknown(t)] if t.contains("osf")),
        "{:?}",
        rule.conds
    );
    assert!(
        matches!(&rule.action, Action::Unknown(t) if t.contains("queue")),
        "{:?}",
        rule.action
    );
    assert_eq!(rule.place, RulePlace::Handle(2));
}

#[test]
fn not_an_nft_document_is_an_error() {
    let not_json = parse_ruleset(b"table ip kube-proxy {", "nft.json", &nothing_skipped);
    assert!(
        matches!(not_json, Err(NftExplainError::InvalidJson { .. })),
        "{not_json:?}"
    );
    let empty = parse_ruleset(b"  \n", "nft.json", &nothing_skipped);
    assert!(
        matches!(empty, Err(NftExplainError::InvalidJson { .. })),
        "{empty:?}"
    );
    let other_json = parse_ruleset(br#"[{"table": {}}]"#, "nft.json", &nothing_skipped);
    assert!(
        matches!(other_json, Err(NftExplainError::NotARuleset { .. })),
        "{other_json:?}"
    );
}

#[test]
fn stale_drop_element_of_no_endpoint_nodeports_drops() {
    let rulesets = parse(STALE_DROP, &kube_proxy_only);
    let kp = table(&rulesets, "ip kube-proxy", Family::Ipv4);
    let map = kp
        .set("no-endpoint-nodeports")
        .expect("the no-endpoint-nodeports map");
    let element = map
        .elements
        .iter()
        .find(|e| e.action == Some(Action::Drop))
        .expect("a drop element");
    assert_eq!(
        element.key,
        vec![
            KeyPart::Protocol(Some(Protocol::Tcp)),
            KeyPart::Port(31443, 31443)
        ]
    );
}

#[test]
fn kube_proxy_tables_of_every_dump_read_without_unknowns_or_gaps() {
    for (name, dump) in [
        ("clean", CLEAN),
        ("stale-element", STALE_ELEMENT),
        ("stale-drop", STALE_DROP),
        ("mode-switch", MODE_SWITCH),
    ] {
        let rulesets = parse(dump, &kube_proxy_only);
        assert!(rulesets.gaps.is_empty(), "{name}: {:?}", rulesets.gaps);
        let kp = table(&rulesets, "ip kube-proxy", Family::Ipv4);
        for c in &kp.chains {
            for r in &c.rules {
                assert!(
                    !matches!(r.action, Action::Unknown(_)),
                    "{name}: {} {}",
                    c.name,
                    r.text
                );
                assert!(
                    !r.conds.iter().any(|c| matches!(c, Cond::Unknown(_))),
                    "{name}: {} {}",
                    c.name,
                    r.text
                );
            }
        }
        for s in &kp.sets {
            for e in &s.elements {
                assert!(
                    !e.key.iter().any(|k| matches!(k, KeyPart::Unknown(_))),
                    "{name}: {}",
                    e.text
                );
            }
        }
    }
}

#[test]
fn iptables_nft_nodeport_rules_read_as_conditions_and_xt_matches_as_unknown() {
    let rulesets = parse(MODE_SWITCH, &nothing_skipped);
    let nat = table(&rulesets, "ip nat", Family::Ipv4);
    let services = chain(nat, "KUBE-SERVICES");
    // iptables-nft's `-m addrtype --dst-type LOCAL` is an xt match whose options the
    // JSON does not carry: undecided, not guessed.
    let last = services.rules.last().expect("rules");
    assert!(
        matches!(&last.conds[..], [Cond::Unknown(t)] if t.contains("addrtype")),
        "{:?}",
        last.conds
    );
    assert_eq!(last.action, Action::Jump("KUBE-NODEPORTS".to_string()));
    let nodeports = chain(nat, "KUBE-NODEPORTS");
    let first = &nodeports.rules[0];
    assert_eq!(
        first.conds,
        vec![
            Cond::Protocol {
                protocol: Some(Protocol::Tcp),
                negated: false,
            },
            Cond::Port {
                side: Side::Destination,
                ranges: vec![(30990, 30990)],
                negated: false,
            },
        ]
    );
}

#[test]
fn inet_tables_become_one_table_per_family_with_the_rules_each_can_match() {
    let json = doc(concat!(
        r#"{"table": {"family": "inet", "name": "fw", "handle": 1}},"#,
        r#"{"table": {"family": "netdev", "name": "edge", "handle": 2}},"#,
        r#"{"chain": {"family": "netdev", "table": "edge", "name": "in", "handle": 1, "type": "filter", "hook": "ingress", "dev": "eth0", "prio": 0, "policy": "accept"}},"#,
        r#"{"chain": {"family": "inet", "table": "fw", "name": "pre", "handle": 1, "type": "nat", "hook": "prerouting", "prio": "dstnat - 10", "policy": "accept"}},"#,
        r#"{"chain": {"family": "inet", "table": "fw", "name": "input", "handle": 2, "type": "filter", "hook": "input", "prio": "filter", "policy": "drop"}},"#,
        r#"{"rule": {"family": "inet", "table": "fw", "chain": "input", "handle": 3, "expr": [{"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": {"range": ["10.0.0.1", "10.0.0.6"]}}}, {"drop": null}]}},"#,
        r#"{"rule": {"family": "inet", "table": "fw", "chain": "input", "handle": 4, "expr": [{"match": {"op": "==", "left": {"meta": {"key": "nfproto"}}, "right": "ipv6"}}, {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": {"set": ["tcp", "udp"]}}}, {"match": {"op": ">=", "left": {"payload": {"protocol": "th", "field": "dport"}}, "right": 30000}}, {"accept": null}]}},"#,
        r#"{"rule": {"family": "inet", "table": "fw", "chain": "pre", "handle": 5, "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 8080}}, {"dnat": {"family": "ip", "addr": "10.0.0.9", "port": 80}}]}}"#
    ));
    let rulesets = parse(&json, &nothing_skipped);
    assert_eq!(rulesets.tables.len(), 2);
    let v4 = table(&rulesets, "inet fw", Family::Ipv4);
    let v6 = table(&rulesets, "inet fw", Family::Ipv6);
    assert_eq!(
        chain(v4, "pre").base.map(|b| (b.priority, b.kind)),
        Some((-110, ChainType::Nat))
    );
    assert_eq!(
        chain(v4, "input").base.map(|b| (b.priority, b.accepts)),
        Some((0, false))
    );
    // `ip saddr` rules only IPv4; `meta nfproto ipv6` only IPv6.
    assert_eq!(chain(v4, "input").rules.len(), 1);
    assert_eq!(
        chain(v4, "input").rules[0].conds,
        vec![Cond::Addr {
            side: Side::Source,
            nets: vec![
                host("10.0.0.1"),
                host("10.0.0.2/31"),
                host("10.0.0.4/31"),
                host("10.0.0.6")
            ],
            negated: true,
        }]
    );
    let v6_rules = &chain(v6, "input").rules;
    assert_eq!(v6_rules.len(), 1);
    assert_eq!(v6_rules[0].place, RulePlace::Handle(4));
    assert_eq!(
        v6_rules[0].conds,
        vec![
            Cond::Lookup {
                key: vec![Field::L4Proto],
                set: SetRef::Inline(vec![
                    Element {
                        key: vec![KeyPart::Protocol(Some(Protocol::Tcp))],
                        action: None,
                        text: "tcp".to_string(),
                    },
                    Element {
                        key: vec![KeyPart::Protocol(Some(Protocol::Udp))],
                        action: None,
                        text: "udp".to_string(),
                    },
                ]),
                negated: false,
            },
            Cond::Port {
                side: Side::Destination,
                ranges: vec![(30000, u16::MAX)],
                negated: false,
            },
        ]
    );
    // `dnat ip to` is passed over by IPv6 packets.
    assert_eq!(
        chain(v4, "pre").rules[0].action,
        Action::Dnat(DnatTo {
            addr: "10.0.0.9".parse().unwrap(),
            port: Some(80),
        })
    );
    assert_eq!(chain(v6, "pre").rules[0].action, Action::Continue);
    assert_eq!(
        rulesets.gaps,
        vec!["nft.json: netdev table edge has an ingress chain this explanation does not evaluate"]
    );
}

#[test]
fn priority_names_and_offsets() {
    assert_eq!(priority("dstnat"), Some(-100));
    assert_eq!(priority("srcnat + 5"), Some(105));
    assert_eq!(priority("mangle-1"), Some(-151));
    assert_eq!(priority("-300"), Some(-300));
    assert_eq!(priority("out"), None);
    assert_eq!(timeout_seconds(&Expr::Str("3h".into())), Some(10800));
    assert_eq!(timeout_seconds(&Expr::Str("1d2m5s".into())), Some(86_525));
}

#[test]
fn older_kube_proxy_local_dispatch_and_rules_with_two_effects() {
    // kube-proxy before `nodeport-ips` sent NodePorts by `fib daddr type local`.
    let json = doc(concat!(
        r#"{"table": {"family": "ip", "name": "kube-proxy", "handle": 1}},"#,
        r#"{"chain": {"family": "ip", "table": "kube-proxy", "name": "services", "handle": 1}},"#,
        r#"{"rule": {"family": "ip", "table": "kube-proxy", "chain": "services", "handle": 2, "expr": [{"match": {"op": "==", "left": {"fib": {"result": "type", "flags": ["daddr"]}}, "right": "local"}}, {"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": {"prefix": {"addr": "127.0.0.0", "len": 8}}}}, {"vmap": {"key": {"concat": [{"meta": {"key": "l4proto"}}, {"payload": {"protocol": "th", "field": "dport"}}]}, "data": "@service-nodeports"}}]}},"#,
        r#"{"rule": {"family": "ip", "table": "kube-proxy", "chain": "services", "handle": 3, "expr": [{"match": {"op": "==", "left": {"fib": {"result": "type", "flags": ["saddr"]}}, "right": "unicast"}}, {"mangle": {"key": {"meta": {"key": "mark"}}, "value": 1}}, {"accept": null}]}},"#,
        r#"{"rule": {"family": "ip", "table": "kube-proxy", "chain": "services", "handle": 4, "expr": [{"dnat": {"addr": {"range": ["10.0.0.1", "10.0.0.3"]}, "port": 80}}]}}"#
    ));
    let rulesets = parse(&json, &nothing_skipped);
    let services = chain(table(&rulesets, "ip kube-proxy", Family::Ipv4), "services");
    assert_eq!(
        services.rules[0].conds,
        vec![
            Cond::AddrLocal {
                side: Side::Destination,
                local: true,
                negated: false,
            },
            Cond::Addr {
                side: Side::Destination,
                nets: vec![host("127.0.0.0/8")],
                negated: true,
            },
        ]
    );
    assert_eq!(
        services.rules[0].text,
        "fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports"
    );
    // Whether a source is `unicast` depends on routes; a mark and a verdict in one
    // rule is more than one action can say.
    let both = &services.rules[1];
    assert!(
        matches!(&both.conds[..], [Cond::Unknown(t)] if t == "fib saddr type unicast"),
        "{both:?}"
    );
    assert!(
        matches!(&both.action, Action::Unknown(t) if *t == both.text),
        "{both:?}"
    );
    // A DNAT to a range follows its first address, and says so.
    assert_eq!(
        services.rules[2].action,
        Action::Dnat(DnatTo {
            addr: "10.0.0.1".parse().unwrap(),
            port: Some(80),
        })
    );
    assert_eq!(
        rulesets.gaps,
        vec![
            "nft.json: table ip kube-proxy chain services handle 4: \
             `dnat to 10.0.0.1-10.0.0.3:80` is read as its first address"
        ]
    );
}
