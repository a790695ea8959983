use std::num::NonZeroU64;
use std::sync::Arc;

use super::*;

fn source(origin: &str, lookup: Lookup, backend: Backend, family: Family) -> RuleDump {
    let mut s = RuleDump::empty(origin, backend, family);
    s.lookup = lookup;
    s
}

fn iptables_rule(position: u32, handle: Option<u64>) -> (RuleText, RuleIdentity) {
    let text: Arc<str> = "-A KUBE-SEP-W7O7 -p udp -j DNAT --to-destination 10.244.3.61:5140".into();
    let rule = RuleText {
        text: text.clone(),
        line: 123,
        position,
        handle: handle.and_then(NonZeroU64::new),
    };
    let identity = RuleIdentity::Iptables {
        table: "nat".into(),
        chain: "KUBE-SEP-W7O7".into(),
        rule: text,
    };
    (rule, identity)
}

fn nft_rule(family: &str, line: u32, handle: Option<u64>, element: Option<&str>) -> (RuleText, RuleIdentity) {
    let rule = RuleText::at_line("dnat ip to 10.244.3.61:5140", line);
    let identity = RuleIdentity::Nftables {
        table: format!("{family} kube-proxy").into(),
        container: if element.is_some() {
            "service-nodeports"
        } else {
            "endpoint-X"
        }
        .into(),
        handle,
        element: element.map(Into::into),
    };
    (rule, identity)
}

#[test]
fn a_file_is_cited_by_line() {
    let file = source(
        "iptables-nft-save.txt",
        Lookup::Lines,
        Backend::IptablesNft,
        Family::Ipv4,
    );
    let (rule, identity) = iptables_rule(2, None);
    assert_eq!(
        file.cite_rule(&rule, &identity).to_string(),
        "iptables-nft-save.txt:123"
    );
    assert_eq!(
        file.cite_chain("nat", "KUBE-SEP-W7O7", 40).to_string(),
        "iptables-nft-save.txt:40"
    );
    assert_eq!(file.cite_line(7).to_string(), "iptables-nft-save.txt:7");
    assert_eq!(file.cite_line(0).to_string(), "iptables-nft-save.txt");

    let text = source("nft.txt", Lookup::Lines, Backend::Nftables, Family::Ipv4);
    let (rule, identity) = nft_rule("ip", 88, Some(31), None);
    assert_eq!(text.cite_rule(&rule, &identity).to_string(), "nft.txt:88");
    // nft's JSON has no lines: the handle is what finds the rule in it.
    let json = source("nft.json", Lookup::Lines, Backend::Nftables, Family::Ipv6);
    let (rule, identity) = nft_rule("ip6", 0, Some(31), None);
    assert_eq!(
        json.cite_rule(&rule, &identity).to_string(),
        "nft.json: table ip6 kube-proxy chain endpoint-X handle 31"
    );
}

#[test]
fn a_live_rule_is_cited_by_chain_number_and_handle() {
    let netlink = source(
        "netlink: nf_tables ip (iptables-nft)",
        Lookup::Chains,
        Backend::IptablesNft,
        Family::Ipv4,
    );
    let (rule, identity) = iptables_rule(2, Some(124));
    assert_eq!(
        netlink.cite_rule(&rule, &identity).to_string(),
        "iptables-nft table nat chain KUBE-SEP-W7O7 rule 2 handle 124"
    );
    assert_eq!(
        netlink.cite_chain("nat", "KUBE-SEP-W7O7", 40).to_string(),
        "iptables-nft table nat chain KUBE-SEP-W7O7"
    );
    // A line not understood has no chain: its line in what the save tool prints.
    assert_eq!(netlink.cite_line(95).to_string(), "iptables-nft-save line 95");

    let legacy = source(
        "ip6tables-legacy-save",
        Lookup::Chains,
        Backend::IptablesLegacy,
        Family::Ipv6,
    );
    let (rule, identity) = iptables_rule(3, None);
    assert_eq!(
        legacy.cite_rule(&rule, &identity).to_string(),
        "ip6tables-legacy table nat chain KUBE-SEP-W7O7 rule 3"
    );

    let nft = source(
        "netlink: nf_tables ip|ip6 kube-proxy",
        Lookup::Chains,
        Backend::Nftables,
        Family::Ipv4,
    );
    let (rule, identity) = nft_rule("ip", 0, Some(31), None);
    assert_eq!(
        nft.cite_rule(&rule, &identity).to_string(),
        "nft table ip kube-proxy chain endpoint-X handle 31"
    );
    let (rule, identity) = nft_rule("ip", 0, None, Some("tcp . 30080"));
    assert_eq!(
        nft.cite_rule(&rule, &identity).to_string(),
        "nft table ip kube-proxy map service-nodeports element tcp . 30080"
    );
}

#[test]
fn citations_order_as_people_count() {
    let netlink = source("netlink", Lookup::Chains, Backend::IptablesNft, Family::Ipv4);
    let rule = |position: u32, handle: u64| {
        let (mut rule, _) = iptables_rule(position, Some(handle));
        rule.line = 0;
        netlink.cite_in("nat", "KUBE-NODEPORTS", &rule)
    };
    let mut cited = [
        rule(10, 7),
        Citation::line("iptables-save.txt", 100),
        rule(9, 1200),
        Citation::line("iptables-save.txt", 97),
        Citation::file("iptables-save.txt"),
        netlink.cite_chain("nat", "KUBE-SEP-A10", 0),
        netlink.cite_chain("nat", "KUBE-SEP-A7", 0),
    ];
    cited.sort();
    let texts: Vec<String> = cited.iter().map(ToString::to_string).collect();
    assert_eq!(
        texts,
        [
            "iptables-nft table nat chain KUBE-NODEPORTS rule 9 handle 1200",
            "iptables-nft table nat chain KUBE-NODEPORTS rule 10 handle 7",
            "iptables-nft table nat chain KUBE-SEP-A7",
            "iptables-nft table nat chain KUBE-SEP-A10",
            "iptables-save.txt",
            "iptables-save.txt:97",
            "iptables-save.txt:100",
        ]
    );
}

/// Citations order as their texts do with numbers read as numbers, whatever their
/// sources and shapes: the report's order from before they had a type.
#[test]
fn citations_order_as_their_texts_with_numbers_as_numbers() {
    let mut cited = vec![
        Citation::file("proc/net/tcp6"),
        Citation::line("proc/net/tcp", 12),
        Citation::line("proc/net/tcp", 9),
        Citation::Written("nft.json: table ip x chain y".into()),
    ];
    for (origin, lookup, backend, family) in [
        ("nft.json", Lookup::Lines, Backend::Nftables, Family::Ipv4),
        ("nft", Lookup::Lines, Backend::Nftables, Family::Ipv6),
        (
            "nft -j list ruleset",
            Lookup::Chains,
            Backend::Nftables,
            Family::Ipv4,
        ),
        (
            "iptables-save.txt",
            Lookup::Lines,
            Backend::IptablesNft,
            Family::Ipv4,
        ),
        (
            "iptables-save.txt.1",
            Lookup::Lines,
            Backend::IptablesNft,
            Family::Ipv4,
        ),
        ("netlink", Lookup::Chains, Backend::IptablesNft, Family::Ipv4),
        (
            "ip6tables-legacy-save",
            Lookup::Chains,
            Backend::IptablesLegacy,
            Family::Ipv6,
        ),
    ] {
        let s = source(origin, lookup, backend, family);
        cited.push(s.cite_whole());
        for line in [0, 9, 10, 97, 100] {
            cited.push(s.cite_line(line));
            cited.push(s.cite_chain("nat", "KUBE-SEP-A7", line));
            cited.push(s.cite_chain("nat", "KUBE-SEP-A10", line));
            for (position, handle) in [(0, None), (2, None), (2, Some(9)), (10, Some(10))] {
                let (mut rule, identity) = iptables_rule(position, handle);
                rule.line = line;
                cited.push(s.cite_rule(&rule, &identity));
            }
            for (handle, element) in [
                (Some(31), None),
                (None, Some("tcp . 30080")),
                (None, Some("udp . 9")),
            ] {
                let (rule, identity) = nft_rule("ip", line, handle, element);
                cited.push(s.cite_rule(&rule, &identity));
            }
        }
    }
    let mut by_text = cited.clone();
    by_text.sort_by(|a, b| NaturalOrder(&a.to_string()).cmp(&NaturalOrder(&b.to_string())));
    cited.sort();
    let texts = |c: &[Citation]| c.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(texts(&cited), texts(&by_text));
}

#[test]
fn a_citation_read_back_is_shown_as_written() {
    let read: Citation = serde_json::from_value(serde_json::json!("nft.json: table ip x chain y")).unwrap();
    assert_eq!(read, Citation::Written("nft.json: table ip x chain y".into()));
    assert_eq!(
        serde_json::to_value(&read).unwrap(),
        serde_json::json!("nft.json: table ip x chain y")
    );
}
