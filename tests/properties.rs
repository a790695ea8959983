//! Properties over generated nodes: random Services (names, ports, endpoints, traffic
//! policies) rendered into rules the way kube-proxy writes them (`portdrift_test_support::synth`),
//! with random drift added on top.
//!
//! - the iptables-save parser gives back what kube-proxy wrote: every Service's
//!   NodePort, its chains and exactly its endpoints;
//! - the detector never reports a rule the desired state explains, whatever drift
//!   sits next to it;
//! - repair plans never touch such a rule, even when findings (from a detector gone
//!   wrong) name every one of them.
//!
//! Case counts are modest to keep CI fast; `PROPTEST_CASES` raises them.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::SocketAddr;

use portdrift::decode::iptables::{SourceHint, parse_save_str};
use portdrift::heart::detect::DetectConfig;
use portdrift::heart::finding::{Finding, Kind, Severity};
use portdrift::heart::kube_proxy;
use portdrift::heart::kube_proxy::Naming;
use portdrift::heart::model::{Backend, Family, Protocol, ServicePortRef, Verdict};
use portdrift::heart::repair::plan::{Op, PlanContext, RepairRulesets, plan};
use portdrift::heart::repair::ruleset::IptablesRuleset;
use portdrift_test_support::synth::{Release, SynthConfig, generate};
use proptest::prelude::*;
use serde_json::Value;

const NODE: &str = "worker-1";

/// A DNS label, as Service and namespace names are.
fn label() -> impl Strategy<Value = String> {
    "[a-z]([a-z0-9-]{0,14}[a-z0-9])?"
}

fn node_config() -> impl Strategy<Value = SynthConfig> {
    (
        prop::collection::vec((label(), label(), prop::option::of("[a-z]{1,8}")), 1..24),
        0usize..5,
        30000u16..32000,
        1usize..4,
    )
        .prop_map(|(names, endpoints, first, nodes)| {
            // Names must be distinct Service ports; duplicates get a suffix.
            let mut seen = HashSet::new();
            let names: Vec<ServicePortRef> = names
                .into_iter()
                .enumerate()
                .map(|(i, (ns, name, port))| {
                    let mut svc = ServicePortRef {
                        namespace: ns,
                        name,
                        port_name: port.unwrap_or_default(),
                    };
                    if !seen.insert((svc.namespace.clone(), svc.name.clone())) {
                        svc.name = format!("{}-{i}", svc.name);
                        seen.insert((svc.namespace.clone(), svc.name.clone()));
                    }
                    svc
                })
                .collect();
            SynthConfig {
                services: names.len(),
                endpoints_per_service: endpoints,
                first_node_port: first,
                node: NODE.into(),
                nodes,
                names,
                stale: 0,
                // Both orders a kernel can hold the chains in; what is read must not
                // depend on it.
                chain_order: if nodes % 2 == 0 {
                    portdrift_test_support::synth::ChainOrder::Grouped
                } else {
                    portdrift_test_support::synth::ChainOrder::Sorted
                },
                ..SynthConfig::default()
            }
        })
}

/// A node as any kube-proxy release since v1.10 programs it: today's layout, or the one
/// before v1.24 (`KUBE-SVC-*`/`KUBE-XLB-*`) with either spelling of unnamed ports in
/// chain names and comments; some Services UDP.
fn any_release_config() -> impl Strategy<Value = SynthConfig> {
    let release = prop_oneof![
        Just(Release::Current),
        Just(Release::BeforeExt(Naming::Current)),
        Just(Release::BeforeExt(Naming::TrailingColon)),
    ];
    (node_config(), release, 0usize..4).prop_map(|(config, release, udp_every)| SynthConfig {
        release,
        udp_every,
        ..config
    })
}

/// A Service port as the cluster state has it, read from the generated JSON.
#[derive(Debug, Clone)]
struct Svc {
    port: ServicePortRef,
    node_port: u16,
    endpoints: BTreeSet<SocketAddr>,
}

fn services(cluster_json: &str) -> Vec<Svc> {
    let list: Value = serde_json::from_str(cluster_json).unwrap();
    let items = list["items"].as_array().unwrap();
    let mut out = Vec::new();
    for svc in items.iter().filter(|i| i["kind"] == "Service") {
        let (ns, name) = (
            svc["metadata"]["namespace"].as_str().unwrap(),
            svc["metadata"]["name"].as_str().unwrap(),
        );
        let p = &svc["spec"]["ports"][0];
        // The API server's Service has no nodePort.
        let Some(node_port) = p["nodePort"].as_u64() else {
            continue;
        };
        let mut endpoints = BTreeSet::new();
        for slice in items.iter().filter(|i| {
            i["kind"] == "EndpointSlice"
                && i["metadata"]["namespace"] == ns
                && i["metadata"]["labels"]["kubernetes.io/service-name"] == name
        }) {
            let port = slice["ports"][0]["port"].as_u64().unwrap();
            for e in slice["endpoints"].as_array().unwrap() {
                for a in e["addresses"].as_array().unwrap() {
                    endpoints.insert(format!("{}:{port}", a.as_str().unwrap()).parse().unwrap());
                }
            }
        }
        out.push(Svc {
            port: ServicePortRef {
                namespace: ns.into(),
                name: name.into(),
                port_name: p["name"].as_str().unwrap_or("").into(),
            },
            node_port: node_port as u16,
            endpoints,
        });
    }
    out
}

/// Drift an operator or an old kube-proxy leaves in nat's KUBE-NODEPORTS: a DNAT for
/// `port` to an address no Service lists, before or after kube-proxy's rules.
#[derive(Debug, Clone)]
struct Noise {
    port: u16,
    to: SocketAddr,
    before: bool,
}

fn noise() -> impl Strategy<Value = Noise> {
    let to = (1u8..250, 1u16..65535).prop_map(|(x, p)| SocketAddr::from(([10, 99, 7, x], p)));
    (30000u16..32767, to, any::<bool>()).prop_map(|(port, to, before)| Noise { port, to, before })
}

/// Inserts `noise` into nat's KUBE-NODEPORTS of `dump`.
fn with_noise(dump: &str, noise: &[Noise]) -> String {
    let lines: Vec<&str> = dump.lines().collect();
    let nat = lines.iter().position(|l| *l == "*nat").unwrap();
    let first = (nat..lines.len())
        .find(|&i| lines[i].starts_with("-A KUBE-NODEPORTS "))
        .unwrap_or_else(|| (nat..lines.len()).find(|&i| lines[i] == "COMMIT").unwrap());
    let commit = (nat..lines.len()).find(|&i| lines[i] == "COMMIT").unwrap();
    let rule = |port: u16, to: &SocketAddr, n: usize| {
        format!(
            "-A KUBE-NODEPORTS -p tcp -m comment --comment \"hotfix {n}\" -m tcp --dport {port} -j DNAT --to-destination {to}"
        )
    };
    let placed = |before: bool| -> Vec<String> {
        noise
            .iter()
            .enumerate()
            .filter(|(_, x)| x.before == before)
            .map(|(n, x)| rule(x.port, &x.to, n))
            .collect()
    };
    let (before, after) = (placed(true), placed(false));
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if i == first {
            out.extend(before.iter().cloned());
        }
        if i == commit {
            out.extend(after.iter().cloned());
        }
        out.push(l.to_string());
    }
    out.join("\n") + "\n"
}

fn scan(dump: &str, cluster_json: &str) -> (Vec<Finding>, portdrift::heart::desired::DesiredState) {
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::write(dir.path().join("iptables-nft-save.txt"), dump).unwrap();
    std::fs::write(dir.path().join("cluster.json"), cluster_json).unwrap();
    std::fs::write(dir.path().join("node"), NODE).unwrap();
    let input = portdrift::scan::input::read_bundle(dir.path(), None).unwrap();
    let desired = input.desired.clone().unwrap();
    let report = portdrift::heart::outcome::run_scan(input, &DetectConfig::default());
    (report.findings, desired)
}

/// Every line of a dump inside a table (rules and chain declarations).
fn rule_lines(dump: &str) -> HashSet<String> {
    dump.lines()
        .filter(|l| l.starts_with("-A "))
        .map(str::to_string)
        .collect()
}

/// A made-up finding about `rule`, of the rule's own protocol and port.
fn finding(kind: Kind, (protocol, port): (Protocol, u16), rule: &str, target: Option<String>) -> Finding {
    let mut f = Finding::new(kind, Severity::Critical, "made up");
    f.backend = Some(Backend::IptablesNft);
    f.family = Some(Family::Ipv4);
    f.protocol = Some(protocol);
    f.port = Some(port);
    f.rule = Some(rule.to_string());
    f.target = target;
    f
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_parser_gives_back_what_kube_proxy_wrote(config in node_config()) {
        let node = generate(&config);
        let source = parse_save_str(&node.iptables_save, "gen", SourceHint::default());
        prop_assert!(source.complete && source.unparsed.is_empty(), "{:?}", source.unparsed);
        prop_assert!(source.has_kube_proxy && source.has_canary);
        for svc in services(&node.cluster_json) {
            let rules: Vec<_> = source.nodeports.iter().filter(|r| r.port == svc.node_port).collect();
            prop_assert!(!rules.is_empty(), "no rule for {} ({})", svc.port, svc.node_port);
            for r in &rules {
                prop_assert_eq!(r.protocol, Protocol::Tcp);
                match r.verdict {
                    Verdict::Forward => {
                        let hash = kube_proxy::service_chain_hash(&svc.port, Protocol::Tcp);
                        prop_assert_eq!(r.chain_hash.as_deref(), Some(hash.as_str()), "{}", r.rule.text);
                        let targets: BTreeSet<SocketAddr> = r.targets.iter().map(|t| t.addr).collect();
                        prop_assert_eq!(&targets, &svc.endpoints, "{}", r.rule.text);
                    }
                    // kube-proxy's filter rules: no endpoints (REJECT), no local ones
                    // (DROP), the health-check port (ACCEPT, another port).
                    Verdict::Reject | Verdict::Drop | Verdict::HealthCheckAccept => {
                        prop_assert_eq!(r.comment_service.as_ref(), Some(&svc.port), "{}", r.rule.text);
                    }
                }
            }
        }
    }

    #[test]
    fn the_detector_never_reports_a_rule_the_desired_state_explains(
        config in node_config(),
        noise in prop::collection::vec(noise(), 0..6),
    ) {
        let node = generate(&config);
        let explained = rule_lines(&node.iptables_save);
        let (clean, _) = scan(&node.iptables_save, &node.cluster_json);
        let loud: Vec<_> = clean.iter().filter(|f| f.severity != Severity::Info).collect();
        prop_assert!(loud.is_empty(), "a clean node has findings: {:#?}", loud);
        let dump = with_noise(&node.iptables_save, &noise);
        let (findings, _) = scan(&dump, &node.cluster_json);
        for f in &findings {
            if let Some(rule) = &f.rule {
                prop_assert!(!explained.contains(rule), "{} names kube-proxy's rule {rule}", f.kind);
            }
        }
        // And the drift is seen: every noise rule is named by some finding.
        let named: HashSet<&str> = findings.iter().filter_map(|f| f.rule.as_deref()).collect();
        for line in rule_lines(&dump).difference(&explained) {
            prop_assert!(named.contains(line.as_str()), "drift not reported: {line}\n{findings:#?}");
        }
    }

    /// Attribution holds across kube-proxy's releases: whatever a release hashed for
    /// its chain names (an unnamed port was `ns/name:` in the older ones) and whichever
    /// chains lead from `KUBE-NODEPORTS`, a node as it programmed it is clean.
    #[test]
    fn every_releases_chain_names_are_attributed_to_their_service(config in any_release_config()) {
        let node = generate(&config);
        let (findings, _) = scan(&node.iptables_save, &node.cluster_json);
        prop_assert!(findings.is_empty(), "{:?} has findings: {:#?}", config.release, findings);
        // The rules read are the Services': none is left unattributed or unread.
        let source = parse_save_str(&node.iptables_save, "gen", SourceHint::default());
        prop_assert!(source.complete && source.unparsed.is_empty(), "{:?}", source.unparsed);
        for svc in services(&node.cluster_json) {
            prop_assert!(
                source.nodeports.iter().any(|r| r.port == svc.node_port),
                "no rule for {} ({})", svc.port, svc.node_port
            );
        }
    }

    #[test]
    fn repair_never_plans_to_touch_a_rule_the_desired_state_explains(
        config in any_release_config(),
        noise in prop::collection::vec(noise(), 0..6),
    ) {
        let node = generate(&config);
        let explained = rule_lines(&node.iptables_save);
        let dump = with_noise(&node.iptables_save, &noise);
        let (mut findings, desired) = scan(&dump, &node.cluster_json);
        // A detector gone wrong: every kube-proxy NodePort rule, every DNAT behind it
        // and every chain named as drift, each of every repairable kind.
        let source = parse_save_str(&node.iptables_save, "gen", SourceHint::default());
        for r in &source.nodeports {
            for kind in [Kind::StaleNodeport, Kind::DuplicateRule, Kind::BackendSplit] {
                findings.push(finding(kind, (r.protocol, r.port), &r.rule.text, None));
            }
            for t in r.targets.iter() {
                findings.push(finding(Kind::StaleEndpoint, (r.protocol, r.port), &t.rule.text, Some(t.addr.to_string())));
            }
        }
        let ruleset = IptablesRuleset::parse(&dump);
        for chain in ruleset.tables.iter().flat_map(|t| &t.chains) {
            findings.push(finding(Kind::OrphanChain, (Protocol::Tcp, 0), &format!(":{}", chain.name), None));
        }
        let mut rulesets = RepairRulesets::default();
        rulesets.iptables.insert((Backend::IptablesNft, Family::Ipv4), ruleset);
        let refs: Vec<&Finding> = findings.iter().collect();
        let planned = plan(&refs, PlanContext { desired: &desired, rulesets: &rulesets, nudge: &BTreeSet::new() });
        let kube_chains: BTreeMap<String, ()> = node
            .iptables_save
            .lines()
            .filter_map(|l| l.strip_prefix(':'))
            .map(|l| (l.split(' ').next().unwrap().to_string(), ()))
            .collect();
        for action in &planned.actions {
            match &action.op {
                Op::IptDeleteRule { rule, .. } => {
                    prop_assert!(!explained.contains(rule), "plans to delete kube-proxy's {rule}");
                }
                Op::IptDeleteChain { chain, rules, .. } => {
                    prop_assert!(!kube_chains.contains_key(chain), "plans to delete kube-proxy's chain {chain}");
                    for rule in rules {
                        prop_assert!(!explained.contains(rule), "plans to delete kube-proxy's {rule}");
                    }
                }
                other => prop_assert!(false, "unexpected action {other:?}"),
            }
        }
    }
}
