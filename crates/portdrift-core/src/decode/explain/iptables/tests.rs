use super::*;
use crate::heart::explain::model::{Cond, DnatTo, Net, Rule, RulePlace, Side};
use crate::heart::model::Protocol;

fn parse(text: &str) -> Rulesets {
    parse_save(
        text.as_bytes(),
        "iptables-nft-save.txt",
        Some(Backend::IptablesNft),
        Family::Ipv4,
    )
    .unwrap()
}

fn rule<'a>(r: &'a Rulesets, table: &str, chain: &str, i: usize) -> &'a Rule {
    let t = r.tables.iter().find(|t| t.name == table).unwrap();
    &t.chains[t.chain(chain).unwrap()].rules[i]
}

const NAT: &str = r#"*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SVC-X - [0:0]
:KUBE-SEP-A - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SVC-X
-A KUBE-SVC-X ! -s 10.244.0.0/16 -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-MARK-MASQ
-A KUBE-SVC-X -m comment --comment "ns/web:http -> 10.244.1.5:8080" -m statistic --mode random --probability 0.3333333349 -j KUBE-SEP-A
-A KUBE-SEP-A -p tcp -m tcp -j DNAT --to-destination 10.244.1.5:8080
-A KUBE-SEP-A -p tcp -j DNAT --to-destination [fd00::5]:8080
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-SVC-X -m addrtype --dst-type LOCAL -m multiport --dports 30000:30010,30080 -j RETURN
-A KUBE-SVC-X -m set --match-set cali40all-hosts src -j ACCEPT
-A KUBE-SVC-X -j QUEUE-SOMEWHERE
COMMIT
"#;

#[test]
fn kube_proxy_rules_read_as_conditions_and_actions() {
    let r = parse(NAT);
    assert!(r.gaps.is_empty(), "{:?}", r.gaps);
    let nat = &r.tables[0];
    let pre = &nat.chains[nat.chain("PREROUTING").unwrap()];
    assert_eq!(
        pre.base,
        Some(BaseChain {
            hook: Hook::Prerouting,
            priority: -100,
            kind: ChainType::Nat,
            accepts: true
        })
    );
    assert_eq!(pre.rules[0].action, Action::Jump("KUBE-SVC-X".into()));
    assert_eq!(pre.rules[0].place, RulePlace::Line(6));
    assert_eq!(
        pre.rules[0].comment.as_deref(),
        Some("kubernetes service portals")
    );

    let masq = rule(&r, "nat", "KUBE-SVC-X", 0);
    assert_eq!(
        masq.conds,
        vec![
            Cond::Addr {
                side: Side::Source,
                nets: vec![Net::parse("10.244.0.0/16").unwrap()],
                negated: true
            },
            Cond::Addr {
                side: Side::Destination,
                nets: vec![Net::parse("10.96.0.10").unwrap()],
                negated: false
            },
            Cond::Protocol {
                protocol: Some(Protocol::Tcp),
                negated: false
            },
            Cond::Port {
                side: Side::Destination,
                ranges: vec![(80, 80)],
                negated: false
            },
        ]
    );
    assert_eq!(masq.action, Action::Jump("KUBE-MARK-MASQ".into()));
    assert_eq!(
        rule(&r, "nat", "KUBE-SVC-X", 1).conds,
        vec![Cond::Random {
            probability: 0.3333333349
        }]
    );
    assert_eq!(
        rule(&r, "nat", "KUBE-SEP-A", 0).action,
        Action::Dnat(DnatTo {
            addr: "10.244.1.5".parse().unwrap(),
            port: Some(8080)
        })
    );
    assert_eq!(
        rule(&r, "nat", "KUBE-SEP-A", 1).action,
        Action::Dnat(DnatTo {
            addr: "fd00::5".parse().unwrap(),
            port: Some(8080)
        })
    );
    assert_eq!(
        rule(&r, "nat", "KUBE-MARK-MASQ", 0).action,
        Action::SetMark {
            value: 0x4000,
            mask: 0x4000
        }
    );
    let ret = rule(&r, "nat", "KUBE-SVC-X", 2);
    assert_eq!(ret.action, Action::Return);
    assert!(ret.conds.contains(&Cond::AddrLocal {
        side: Side::Destination,
        local: true,
        negated: false
    }));
    assert!(ret.conds.contains(&Cond::Port {
        side: Side::Destination,
        ranges: vec![(30000, 30010), (30080, 30080)],
        negated: false
    }));
}

#[test]
fn what_it_cannot_decide_is_kept_as_unknown_not_dropped() {
    let r = parse(NAT);
    let ipset = rule(&r, "nat", "KUBE-SVC-X", 3);
    assert!(
        ipset
            .conds
            .iter()
            .any(|c| matches!(c, Cond::Unknown(t) if t.contains("set"))),
        "{:?}",
        ipset.conds
    );
    assert_eq!(
        rule(&r, "nat", "KUBE-SVC-X", 4).action,
        Action::Unknown("QUEUE-SOMEWHERE".into())
    );
}

#[test]
fn a_damaged_dump_says_where() {
    let r =
        parse("*nat\n:PREROUTING ACCEPT [0:0]\n-A NOWHERE -j ACCEPT\nnot a rule\n-A PREROUTING -j DROP\n");
    assert!(
        r.gaps.iter().any(|g| g.contains(":3") && g.contains("NOWHERE")),
        "{:?}",
        r.gaps
    );
    assert!(r.gaps.iter().any(|g| g.contains(":4")), "{:?}", r.gaps);
    assert!(r.gaps.iter().any(|g| g.contains("no COMMIT")), "{:?}", r.gaps);
    // What was read stays.
    assert_eq!(rule(&r, "nat", "PREROUTING", 0).action, Action::Drop);
}

#[test]
fn a_rule_cut_off_after_its_target_flag_is_unknown_not_a_panic() {
    let r =
        parse("*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp -j\n-A PREROUTING -p tcp -g\nCOMMIT\n");
    for i in 0..2 {
        let action = &rule(&r, "nat", "PREROUTING", i).action;
        assert!(matches!(action, Action::Unknown(_)), "{action:?}");
    }
}

#[test]
fn filter_policies_and_priorities_are_the_kernels() {
    let r = parse(
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\nCOMMIT\n*raw\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n",
    );
    let filter = &r.tables[0];
    let forward = filter.chains[filter.chain("FORWARD").unwrap()].base.unwrap();
    assert_eq!(
        (forward.hook, forward.priority, forward.accepts),
        (Hook::Forward, 0, false)
    );
    let raw = r.tables[1].chains[0].base.unwrap();
    assert_eq!((raw.hook, raw.priority), (Hook::Prerouting, -300));
}

#[test]
fn a_dump_whose_name_does_not_say_its_backend_takes_it_from_the_header() {
    let read = |header: &str| {
        let text = format!("{header}\n*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n");
        parse_save(text.as_bytes(), "iptables-save.txt", None, Family::Ipv4)
            .unwrap()
            .tables[0]
            .backend
    };
    assert_eq!(
        read("# Generated by iptables-save v1.8.9 (nf_tables) on x"),
        Backend::IptablesNft
    );
    assert_eq!(
        read("# Generated by iptables-save v1.8.9 (legacy) on x"),
        Backend::IptablesLegacy
    );
    // Before 1.8 there was no other backend, and its tools never named it.
    assert_eq!(
        read("# Generated by iptables-save v1.6.1 on x"),
        Backend::IptablesLegacy
    );
    assert_eq!(read(""), Backend::IptablesNft);
}
