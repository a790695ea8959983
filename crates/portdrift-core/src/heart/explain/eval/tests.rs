use super::*;
use crate::heart::explain::model::{
    Action, BaseChain, Chain, Destination, DnatTo, Element, Field, KeyPart, Net, RulePlace, Set, SetRef, Side,
};
use crate::heart::model::{Backend, Family, Protocol};

fn rule(conds: Vec<Cond>, action: Action) -> Rule {
    Rule {
        place: RulePlace::Unknown,
        text: String::new(),
        conds,
        action,
        comment: None,
    }
}

fn base(hook: Hook, priority: i32, kind: ChainType) -> Option<BaseChain> {
    Some(BaseChain {
        hook,
        priority,
        kind,
        accepts: true,
    })
}

fn chain(name: &str, base: Option<BaseChain>, rules: Vec<Rule>) -> Chain {
    Chain {
        name: name.into(),
        base,
        rules,
    }
}

fn table(backend: Backend, name: &str, chains: Vec<Chain>) -> Table {
    Table {
        backend,
        family: Family::Ipv4,
        name: name.into(),
        origin: "test".into(),
        chains,
        sets: Vec::new(),
    }
}

fn dnat(ip: &str, port: u16) -> Action {
    Action::Dnat(DnatTo {
        addr: ip.parse().unwrap(),
        port: Some(port),
    })
}

fn port(p: u16) -> Cond {
    Cond::Port {
        side: Side::Destination,
        ranges: vec![(p, p)],
        negated: false,
    }
}

fn probe() -> Probe {
    Probe {
        protocol: Protocol::Tcp,
        destination: Destination::Addr("192.0.2.1".parse().unwrap()),
        port: 30080,
        source: "203.0.113.10".parse().unwrap(),
    }
}

fn forwarded(branches: &[Branch]) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = branches
        .iter()
        .filter_map(|b| match b.end {
            End::Forwarded(to) => Some((to.to_string(), (b.share * 1e6).round() / 1e6)),
            _ => None,
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn a_probability_cascade_splits_evenly() {
    let nat = table(
        Backend::IptablesNft,
        "nat",
        vec![chain(
            "PREROUTING",
            base(Hook::Prerouting, -100, ChainType::Nat),
            vec![
                rule(vec![port(30081)], dnat("10.0.0.9", 1)),
                rule(
                    vec![Cond::Random {
                        probability: 1.0 / 3.0,
                    }],
                    dnat("10.0.0.1", 80),
                ),
                rule(vec![Cond::Random { probability: 0.5 }], dnat("10.0.0.2", 80)),
                rule(vec![], dnat("10.0.0.3", 80)),
            ],
        )],
    );
    let rules = Rulesets {
        tables: vec![nat],
        gaps: vec![],
    };
    let (branches, remarks) = follow(&rules, &probe());
    assert_eq!(
        forwarded(&branches),
        vec![
            ("10.0.0.1:80".into(), 0.333333),
            ("10.0.0.2:80".into(), 0.333333),
            ("10.0.0.3:80".into(), 0.333333)
        ]
    );
    // The rule for another port is skipped without a line on the path.
    assert_eq!(remarks.quietly_skipped, 1);
}

#[test]
fn a_jump_returns_and_a_goto_returns_to_the_callers_caller() {
    let nat = table(
        Backend::IptablesNft,
        "nat",
        vec![
            chain(
                "PREROUTING",
                base(Hook::Prerouting, -100, ChainType::Nat),
                vec![
                    rule(vec![], Action::Jump("A".into())),
                    rule(
                        vec![Cond::Mark {
                            value: 0x4000,
                            mask: 0x4000,
                            negated: false,
                        }],
                        dnat("10.0.0.1", 80),
                    ),
                    rule(vec![], dnat("10.0.0.2", 80)),
                ],
            ),
            chain(
                "A",
                None,
                vec![rule(vec![], Action::Goto("B".into())), rule(vec![], Action::Drop)],
            ),
            chain(
                "B",
                None,
                vec![rule(
                    vec![],
                    Action::SetMark {
                        value: 0x4000,
                        mask: 0x4000,
                    },
                )],
            ),
        ],
    );
    let rules = Rulesets {
        tables: vec![nat],
        gaps: vec![],
    };
    let (branches, _) = follow(&rules, &probe());
    // B falls off its end: back in PREROUTING (not A, whose drop never runs), with the
    // mark B set, so the mark rule matches.
    assert_eq!(forwarded(&branches), vec![("10.0.0.1:80".into(), 1.0)]);
}

#[test]
fn a_rule_it_cannot_decide_stops_the_path_unless_another_condition_rules_it_out() {
    let unknown = Cond::Unknown("-m set --match-set x src".into());
    let nat = table(
        Backend::IptablesNft,
        "nat",
        vec![chain(
            "PREROUTING",
            base(Hook::Prerouting, -100, ChainType::Nat),
            vec![
                rule(vec![unknown.clone(), port(1)], dnat("10.0.0.1", 80)),
                rule(vec![unknown], dnat("10.0.0.2", 80)),
            ],
        )],
    );
    let rules = Rulesets {
        tables: vec![nat],
        gaps: vec![],
    };
    let (branches, _) = follow(&rules, &probe());
    assert_eq!(branches.len(), 1);
    assert!(
        matches!(&branches[0].end, End::Undecided { at: Some(at), why } if at.rule == Some(1) && why.contains("match-set")),
        "{:?}",
        branches[0].end
    );
}

#[test]
fn the_first_nat_chain_to_translate_binds_the_connection_and_a_filter_drop_undoes_it() {
    let nft = table(
        Backend::IptablesNft,
        "nat",
        vec![chain(
            "PREROUTING",
            base(Hook::Prerouting, -100, ChainType::Nat),
            vec![rule(vec![port(30080)], dnat("10.0.0.1", 80))],
        )],
    );
    let legacy = table(
        Backend::IptablesLegacy,
        "nat",
        vec![chain(
            "PREROUTING",
            base(Hook::Prerouting, -100, ChainType::Nat),
            vec![rule(vec![port(30080)], dnat("10.0.0.2", 80))],
        )],
    );
    let filter = table(
        Backend::IptablesNft,
        "filter",
        vec![chain(
            "FORWARD",
            base(Hook::Forward, 0, ChainType::Filter),
            vec![rule(
                vec![Cond::Addr {
                    side: Side::Destination,
                    nets: vec![Net::parse("10.0.0.0/24").unwrap()],
                    negated: false,
                }],
                Action::Drop,
            )],
        )],
    );
    let rules = Rulesets {
        tables: vec![legacy, nft, filter],
        gaps: vec![],
    };
    let (branches, remarks) = follow(&rules, &probe());
    assert_eq!(branches.len(), 1);
    let b = &branches[0];
    // The newer backend first; the legacy chain is not run; the tie is reported.
    assert_eq!(b.packet.translated.unwrap().to, "10.0.0.1:80".parse().unwrap());
    assert!(
        b.steps
            .iter()
            .any(|s| matches!(s.kind, StepKind::NotRun { .. }) && s.at.table == 0)
    );
    assert_eq!(remarks.nat_order_unknown.len(), 1);
    assert!(matches!(b.end, End::Dropped(at) if at.table == 2));
}

#[test]
fn numgen_shares_come_from_the_map() {
    let mut kp = table(
        Backend::Nftables,
        "ip kube-proxy",
        vec![
            chain(
                "nat-prerouting",
                base(Hook::Prerouting, -100, ChainType::Nat),
                vec![rule(
                    vec![],
                    Action::Vmap {
                        key: vec![Field::L4Proto, Field::Port(Side::Destination)],
                        map: SetRef::Named("service-nodeports".into()),
                    },
                )],
            ),
            chain(
                "service-x",
                None,
                vec![rule(
                    vec![],
                    Action::Numgen {
                        modulus: 4,
                        map: SetRef::Inline(vec![
                            Element {
                                key: vec![KeyPart::Int(0, 2)],
                                action: Some(Action::Goto("ep-a".into())),
                                text: "0-2 : goto ep-a".into(),
                            },
                            Element {
                                key: vec![KeyPart::Int(3, 3)],
                                action: Some(Action::Goto("ep-b".into())),
                                text: "3 : goto ep-b".into(),
                            },
                        ]),
                    },
                )],
            ),
            chain("ep-a", None, vec![rule(vec![], dnat("10.0.0.1", 80))]),
            chain("ep-b", None, vec![rule(vec![], dnat("10.0.0.2", 80))]),
        ],
    );
    kp.sets.push(Set {
        name: "service-nodeports".into(),
        elements: vec![Element {
            key: vec![
                KeyPart::Protocol(Some(Protocol::Tcp)),
                KeyPart::Port(30080, 30080),
            ],
            action: Some(Action::Goto("service-x".into())),
            text: "tcp . 30080 : goto service-x".into(),
        }],
    });
    let rules = Rulesets {
        tables: vec![kp],
        gaps: vec![],
    };
    let (branches, _) = follow(&rules, &probe());
    assert_eq!(
        forwarded(&branches),
        vec![("10.0.0.1:80".into(), 0.75), ("10.0.0.2:80".into(), 0.25)]
    );
    // Another port finds no element and goes nowhere.
    let other = Probe {
        port: 30081,
        ..probe()
    };
    let (branches, _) = follow(&rules, &other);
    assert!(forwarded(&branches).is_empty());
    assert!(matches!(branches[0].end, End::Delivered { port: 30081 }));
}
