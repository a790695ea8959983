use super::*;
use crate::heart::model::{ProxySignals, RuleDump};
use crate::heart::observed::IpvsTraces;

fn source(backend: Backend, signals: ProxySignals) -> RuleDump {
    let mut s = RuleDump::empty("dump", backend, Family::Ipv4);
    s.signals = signals;
    s
}

fn iptables_mode() -> ProxySignals {
    ProxySignals {
        iptables_mode: true,
        services_dispatch: Some(ProxyMode::Iptables),
        ..Default::default()
    }
}

#[test]
fn kube_proxys_answer_wins_and_a_disagreement_is_said() {
    let observed = Observed {
        dumps: vec![source(Backend::IptablesNft, iptables_mode())],
        kube_proxy_mode: Some(ProxyMode::Ipvs),
        ..Default::default()
    };
    let d = decide(&observed, &BTreeMap::from([(Family::Ipv4, 0)]));
    assert_eq!(d.mode, ProxyMode::Ipvs);
    assert!(d.evidence.contains("/proxyMode"), "{d:?}");
    assert_eq!(d.unjudged.len(), 1, "{d:?}");
}

#[test]
fn a_reported_mode_without_its_rules_is_not_an_all_clear() {
    let observed = Observed {
        kube_proxy_mode: Some(ProxyMode::Iptables),
        ..Default::default()
    };
    let d = decide(&observed, &BTreeMap::new());
    assert_eq!(d.mode, ProxyMode::Iptables);
    assert!(d.unjudged[0].contains("none of its iptables-mode"), "{d:?}");
}

#[test]
fn ipvs_dispatch_in_kube_services_beats_iptables_leftovers() {
    let observed = Observed {
        dumps: vec![
            source(
                Backend::IptablesNft,
                ProxySignals {
                    iptables_mode: true,
                    services_dispatch: Some(ProxyMode::Ipvs),
                    ipvs: vec!["chain KUBE-NODE-PORT".into()],
                    ..Default::default()
                },
            ),
            source(Backend::IptablesLegacy, iptables_mode()),
        ],
        ..Default::default()
    };
    let d = decide(&observed, &BTreeMap::from([(Family::Ipv4, 1)]));
    assert_eq!(d.mode, ProxyMode::Ipvs);
    assert!(d.evidence.contains("KUBE-NODE-PORT"), "{d:?}");
}

#[test]
fn the_primary_backend_names_iptables_or_nftables() {
    let observed = Observed {
        dumps: vec![
            source(Backend::IptablesNft, iptables_mode()),
            source(Backend::Nftables, ProxySignals::default()),
        ],
        ..Default::default()
    };
    assert_eq!(
        decide(&observed, &BTreeMap::from([(Family::Ipv4, 1)])).mode,
        ProxyMode::Nftables
    );
    assert_eq!(
        decide(&observed, &BTreeMap::from([(Family::Ipv4, 0)])).mode,
        ProxyMode::Iptables
    );
}

#[test]
fn ipvs_traces_replacements_and_nothing() {
    let ipvs_node = Observed {
        ipvs: Some(IpvsTraces {
            interface: true,
            virtual_servers: Some(3),
        }),
        ..Default::default()
    };
    assert_eq!(decide(&ipvs_node, &BTreeMap::new()).mode, ProxyMode::Ipvs);
    let cilium = Observed {
        dumps: vec![source(
            Backend::IptablesNft,
            ProxySignals {
                replacement: Some(("Cilium", "CILIUM_PRE_nat".into())),
                ..Default::default()
            },
        )],
        ..Default::default()
    };
    let d = decide(&cilium, &BTreeMap::new());
    assert_eq!(d.mode, ProxyMode::Replaced);
    assert!(d.evidence.contains("Cilium"));
    let bare = Observed::default();
    assert_eq!(decide(&bare, &BTreeMap::new()).mode, ProxyMode::None);
    // IPVS's module loaded with no virtual server says nothing.
    let idle = Observed {
        ipvs: Some(IpvsTraces {
            interface: false,
            virtual_servers: Some(0),
        }),
        ..Default::default()
    };
    assert_eq!(decide(&idle, &BTreeMap::new()).mode, ProxyMode::None);
}

#[test]
fn only_live_dispatch_is_compared() {
    assert!(holds_live_dispatch(&source(
        Backend::IptablesNft,
        iptables_mode()
    )));
    assert!(holds_live_dispatch(&source(
        Backend::Nftables,
        ProxySignals::default()
    )));
    assert!(!holds_live_dispatch(&source(
        Backend::IptablesNft,
        ProxySignals {
            iptables_mode: true,
            services_dispatch: Some(ProxyMode::Ipvs),
            ..Default::default()
        }
    )));
    assert!(!holds_live_dispatch(&source(
        Backend::IptablesLegacy,
        ProxySignals::default()
    )));
}

/// `iptables -S` on a node where Cilium replaces kube-proxy: the whole filter table,
/// Cilium's chains and kubelet's, none of kube-proxy's.
const CILIUM_FILTER_S: &str = "-P INPUT ACCEPT
-P FORWARD ACCEPT
-P OUTPUT ACCEPT
-N CILIUM_FORWARD
-N CILIUM_INPUT
-N CILIUM_OUTPUT
-N KUBE-FIREWALL
-N KUBE-KUBELET-CANARY
-A INPUT -m comment --comment \"cilium-feeder: CILIUM_INPUT\" -j CILIUM_INPUT
-A INPUT -j KUBE-FIREWALL
-A FORWARD -m comment --comment \"cilium-feeder: CILIUM_FORWARD\" -j CILIUM_FORWARD
-A OUTPUT -m comment --comment \"cilium-feeder: CILIUM_OUTPUT\" -j CILIUM_OUTPUT
-A OUTPUT -j KUBE-FIREWALL
-A CILIUM_FORWARD -o cilium_host -m comment --comment \"cilium: any->cluster on cilium_host forward accept\" -j ACCEPT
-A CILIUM_INPUT -m mark --mark 0x200/0xf00 -m comment --comment \"cilium: ACCEPT for proxy traffic\" -j ACCEPT
-A CILIUM_OUTPUT -m mark --mark 0xa00/0xe00 -m comment --comment \"cilium: ACCEPT for proxy traffic\" -j ACCEPT
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment \"block incoming localnet connections\" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
";

fn parsed(text: &str) -> RuleDump {
    crate::decode::iptables::parse_save_str(text, "iptables-save.txt", Default::default())
}

#[test]
fn a_whole_filter_table_with_a_replacements_chains_and_none_of_kube_proxys_is_replaced() {
    let observed = Observed {
        dumps: vec![parsed(CILIUM_FILTER_S)],
        ..Default::default()
    };
    let d = decide(&observed, &BTreeMap::new());
    assert_eq!(d.mode, ProxyMode::Replaced, "{d:?}");
    assert!(
        d.evidence.contains("Cilium's chain CILIUM_FORWARD")
            && d.evidence
                .contains("none of the chains kube-proxy's iptables and IPVS modes always create"),
        "{}",
        d.evidence
    );
    // A chain of kube-proxy's beside them: not an absence.
    let with_kube_proxy = CILIUM_FILTER_S.replace(
        "-N KUBE-KUBELET-CANARY\n",
        "-N KUBE-KUBELET-CANARY\n-N KUBE-FORWARD\n",
    );
    let observed = Observed {
        dumps: vec![parsed(&with_kube_proxy)],
        ..Default::default()
    };
    assert_ne!(decide(&observed, &BTreeMap::new()).mode, ProxyMode::Replaced);
    // A fragment (no -P lines: its table is guessed) cannot show an absence either.
    let fragment: String = CILIUM_FILTER_S
        .lines()
        .filter(|l| !l.starts_with("-P "))
        .map(|l| format!("{l}\n"))
        .collect();
    let observed = Observed {
        dumps: vec![parsed(&fragment)],
        ..Default::default()
    };
    let d = decide(&observed, &BTreeMap::new());
    assert_eq!(d.mode, ProxyMode::None, "{d:?}");
    assert!(d.evidence.contains("partial dump"), "{}", d.evidence);
}
