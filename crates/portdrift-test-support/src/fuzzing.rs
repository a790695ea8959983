//! Fuzz targets: every reader of text another program wrote, as a function of raw
//! bytes, shared by `cargo fuzz`, `examples/fuzz.rs` and `tests/fuzz_regressions.rs`.
//! A target fails by panicking (a crash or a broken invariant); bad input itself is
//! never a failure: the readers must turn it into statuses, unparsed lines and errors.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, BufRead, Cursor};

use portdrift::decode::cilium::{
    MapKind, group_frontends, parse_backend_entry, parse_bpftool_dump, parse_rev_nat_entry,
    parse_service_entry,
};
use portdrift::decode::iptables::{SourceHint, parse_save};
use portdrift::decode::ipvs::{parse_ipvsadm, parse_proc_ip_vs};
use portdrift::decode::nftables::{parse_ruleset_json, parse_ruleset_text, table_views_json};
use portdrift::decode::sockets::{WordOrder, parse_proc_net_with};
use portdrift::heart::desired::{DesiredPort, DesiredState, FamilyEndpoints};
use portdrift::heart::detect::DetectConfig;
use portdrift::heart::finding::Kind;
use portdrift::heart::input::Input;
use portdrift::heart::ipvs::ipvs_findings;
use portdrift::heart::model::{Backend, Family, Protocol, ServicePortRef};
use portdrift::heart::outcome::{InputState, run_scan};
use portdrift::heart::repair::plan::{Op, PlanContext, RepairRulesets, plan};
use portdrift::heart::repair::ruleset::IptablesRuleset;
use portdrift::scan::input::read_input;
use portdrift::sources::source::{Fetched, Read, RuleAnswer, Source};

/// A fuzz target: raw bytes in; a panic is a finding.
pub type Target = fn(&[u8]);

/// Every target by name (the names of `fuzz/fuzz_targets/*.rs`).
pub const TARGETS: [(&str, Target); 7] = [
    ("iptables_save", iptables_save),
    ("nftables_json", nftables_json),
    ("nftables_text", nftables_text),
    ("proc_net", proc_net),
    ("bundle", bundle),
    ("cilium_maps", cilium_maps),
    ("ipvs", ipvs),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// The iptables-save parser (the scan's streaming one) and repair's whole-ruleset
/// reader, on the same bytes. Checks that every line either side reports exists, and
/// that a rule's delete command stays one line: what an `iptables-restore` script
/// holds is decided by its line breaks.
pub fn iptables_save(data: &[u8]) {
    let lines = data.split(|&b| b == b'\n').count() as u32;
    let source = parse_save(data, "fuzz", SourceHint::default()).expect("reading from memory cannot fail");
    for rule in &source.nodeports {
        assert!(
            rule.rule.line >= 1 && rule.rule.line <= lines,
            "rule line {} of {lines}",
            rule.rule.line
        );
        assert!(!rule.rule.text.contains('\n'), "a rule spans lines");
    }
    for u in &source.unparsed {
        assert!(u.line <= lines, "unparsed line {} of {lines}", u.line);
    }
    let text = String::from_utf8_lossy(data);
    let ruleset = IptablesRuleset::parse(&text);
    check_iptables_plan(&ruleset);
}

/// Plans the deletion of every rule and chain in `ruleset`, as if a finding named each
/// (against an empty cluster state, so that nothing is explained), and checks what
/// comes out: each action names objects that are in the ruleset, and each delete
/// command is exactly one line of the script.
fn check_iptables_plan(ruleset: &IptablesRuleset) {
    let mut rulesets = RepairRulesets::default();
    rulesets
        .iptables
        .insert((Backend::IptablesNft, Family::Ipv4), ruleset.clone());
    let desired = portdrift::heart::desired::DesiredState::default();
    let mut findings = Vec::new();
    for table in &ruleset.tables {
        for chain in &table.chains {
            findings.push(finding(
                portdrift::heart::finding::Kind::OrphanChain,
                &format!(":{}", chain.name),
            ));
            for rule in chain.rules.iter().take(64) {
                findings.push(finding(
                    portdrift::heart::finding::Kind::StaleNodeport,
                    &rule.line,
                ));
            }
        }
    }
    findings.truncate(512);
    let refs: Vec<&portdrift::heart::finding::Finding> = findings.iter().collect();
    let planned = plan(
        &refs,
        PlanContext {
            desired: &desired,
            rulesets: &rulesets,
            nudge: &BTreeSet::new(),
        },
    );
    if !ruleset.complete() {
        assert!(planned.actions.is_empty(), "an action on an incomplete read");
    }
    for action in &planned.actions {
        let script = action.script();
        match &action.op {
            Op::IptDeleteRule { table, chain, rule } => {
                assert!(
                    ruleset
                        .table(table)
                        .and_then(|t| t.chain(chain))
                        .is_some_and(|c| c.rules.iter().any(|r| &r.line == rule)),
                    "planned a rule that is not in the ruleset: {rule}"
                );
                assert_eq!(script.lines().count(), 3, "{script:?}");
            }
            Op::IptDeleteChain { table, chain, rules } => {
                let held = ruleset.table(table).and_then(|t| t.chain(chain));
                assert!(held.is_some(), "planned a chain that is not in the ruleset");
                assert_eq!(script.lines().count(), rules.len() + 3, "{script:?}");
            }
            _ => {}
        }
    }
}

fn finding(kind: portdrift::heart::finding::Kind, rule: &str) -> portdrift::heart::finding::Finding {
    let mut f =
        portdrift::heart::finding::Finding::new(kind, portdrift::heart::finding::Severity::Critical, "fuzz");
    f.backend = Some(Backend::IptablesNft);
    f.family = Some(Family::Ipv4);
    f.protocol = Some(Protocol::Tcp);
    f.port = Some(30080);
    f.rule = Some(rule.to_string());
    f
}

/// `nft -j list ruleset`: the scan's parser and repair's table view.
pub fn nftables_json(data: &[u8]) {
    let _ = parse_ruleset_json(data, "fuzz");
    if let Ok(views) = table_views_json(data, "fuzz") {
        for view in &views {
            let label = match view.family {
                Family::Ipv4 => "ip kube-proxy",
                Family::Ipv6 => "ip6 kube-proxy",
            };
            assert_eq!(view.table, label);
        }
    }
}

/// `nft list ruleset` text.
pub fn nftables_text(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(sources) = parse_ruleset_text(&text, "fuzz") {
        let lines = text.lines().count() as u32 + 1;
        for s in &sources {
            for r in &s.nodeports {
                assert!(r.rule.line <= lines, "rule line {} of {lines}", r.rule.line);
            }
        }
    }
}

/// `/proc/net/{tcp,tcp6,udp,udp6}`: the first byte picks the file and word order.
pub fn proc_net(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let protocol = if pick & 1 == 0 {
        Protocol::Tcp
    } else {
        Protocol::Udp
    };
    let v6 = pick & 2 != 0;
    let order = if pick & 4 == 0 {
        WordOrder::Little
    } else {
        WordOrder::Big
    };
    let (listeners, unparsed) = parse_proc_net_with(body, protocol, v6, "fuzz", order);
    let lines = body.split(|&b| b == b'\n').count();
    assert!(
        listeners.len() + unparsed.len() <= lines,
        "more entries than lines"
    );
    for l in &listeners {
        assert_eq!(l.protocol, protocol);
        assert_eq!(l.addr.is_ipv6(), v6, "{l:?}");
    }
}

/// IPVS tables: the same bytes read as `/proc/net/ip_vs` and as `ipvsadm -Ln`, and each
/// table checked against a small cluster. Every line lands at most once (a virtual
/// server, a real server or an unparsed line) at a line the input has, a real server
/// after its virtual server, and an unparsed line is cut to a readable length.
pub fn ipvs(data: &[u8]) {
    let lines = data.split(|&b| b == b'\n').count();
    let desired = ipvs_desired();
    for table in [parse_proc_ip_vs(data), parse_ipvsadm(data)] {
        let table = table.expect("reading from memory cannot fail");
        let mut seen = BTreeSet::new();
        for vs in &table.services {
            assert!(seen.insert(vs.line), "line {} read twice", vs.line);
            for r in &vs.reals {
                assert!(r.line > vs.line, "a real server before its virtual server");
                assert!(seen.insert(r.line), "line {} read twice", r.line);
            }
        }
        for u in &table.unparsed {
            assert!(seen.insert(u.line), "line {} read twice", u.line);
            assert!(
                u.text.len() <= 200,
                "an unparsed line kept whole: {} bytes",
                u.text.len()
            );
        }
        assert!(
            seen.iter().all(|&l| l >= 1 && l as usize <= lines),
            "a line number past the input's {lines} lines"
        );
        for f in ipvs_findings(&desired, &table, "fuzz", 30000..=32767) {
            assert!(
                matches!(
                    f.kind,
                    Kind::StaleNodeport | Kind::MissingRule | Kind::StaleEndpoint | Kind::MissingEndpoint
                ),
                "{:?}",
                f.kind
            );
            assert!(
                f.rule.as_deref().is_none_or(|r| !r.contains('\n')),
                "a rule spans lines"
            );
        }
    }
}

/// Two NodePort Services (tcp/30080 and tcp/30081) with one endpoint each, for [`ipvs`].
fn ipvs_desired() -> DesiredState {
    let port = |name: &str, node_port: u16, endpoint: [u8; 4]| {
        let addr = std::net::SocketAddr::from((endpoint, 8080));
        let eps = FamilyEndpoints {
            listed: [addr].into(),
            cluster: [addr].into(),
            local: [addr].into(),
            has_endpoints: true,
            has_external_endpoints: true,
            cluster_uncertain: false,
        };
        DesiredPort {
            service: ServicePortRef {
                namespace: "default".to_string(),
                name: name.to_string(),
                port_name: String::new(),
            },
            protocol: Protocol::Tcp,
            node_port,
            families: vec![Family::Ipv4],
            external_policy_local: false,
            internal_policy_local: false,
            health_check_node_port: None,
            endpoints: vec![(Family::Ipv4, eps)],
            uncertain: false,
            last_change: None,
            cilium: None,
        }
    };
    DesiredState {
        ports: vec![
            port("web", 30080, [10, 244, 1, 5]),
            port("api", 30081, [10, 244, 1, 6]),
        ],
        ..DesiredState::default()
    }
}

/// Seeds for [`ipvs`] in the kernel's form (the bundles hold `ipvsadm` output only):
/// NodePorts on two node addresses, a draining real server, IPv6, a persistent and a
/// mark service, as `ip_vs_info_seq_show` prints them.
fn ipvs_seeds() -> Vec<Vec<u8>> {
    let table = concat!(
        "IP Virtual Server version 1.2.1 (size=4096)\n",
        "Prot LocalAddress:Port Scheduler Flags\n",
        "  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n",
        "TCP  0A000115:7580 rr  \n",
        "  -> 0AF40105:1F90      Masq    1      2          1         \n",
        "  -> 0AF40209:1F90      Masq    0      1          3         \n",
        "TCP  0AF40100:7580 rr  \n",
        "  -> 0AF40105:1F90      Masq    1      0          0         \n",
        "TCP  0A000115:7581 rr  persistent 10800 FFFFFFFF\n",
        "  -> 0AF40106:1F90      Masq    1      0          0         \n",
        "TCP  [fd00:0000:0000:0000:0000:0000:0a00:0115]:7580 rr \n",
        "  -> [fd00:0010:0244:0001:0000:0000:0000:0005]:1F90      Masq    1      0          0         \n",
        "FWM  00000001 rr \n",
        "  -> 0AF40107:0050      Masq    1      0          0         \n",
    );
    vec![table.as_bytes().to_vec()]
}

/// Cilium's service maps: the first byte picks the map, the rest is `bpftool -j map
/// dump` JSON. Every entry is read or kept as a problem with its index, and grouping
/// keeps only slots a selection can reach. The raw bytes are also read as one entry of
/// each kind, which must fail cleanly on a wrong size.
pub fn cilium_maps(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let kind = MapKind::ALL[usize::from(pick) % MapKind::ALL.len()];
    for family in [Family::Ipv4, Family::Ipv6] {
        let half = body.len() / 2;
        let (key, value) = body.split_at(half);
        let _ = parse_service_entry(key, value, family);
        let _ = parse_backend_entry(key, value, family);
        let _ = parse_rev_nat_entry(key, value, family);
    }
    let Ok(dump) = parse_bpftool_dump(body, kind) else {
        return;
    };
    let read = dump.services.len() + dump.backends.len() + dump.rev_nats.len();
    assert_eq!(
        read + dump.problems.len(),
        dump.entries,
        "an entry was lost or counted twice"
    );
    for p in &dump.problems {
        assert!(
            p.index < dump.entries,
            "problem index {} of {}",
            p.index,
            dump.entries
        );
    }
    let (frontends, _) = group_frontends(&dump.services);
    for f in &frontends {
        let reachable = u32::from(f.count) + u32::from(f.qcount);
        assert!(f.slots.windows(2).all(|w| w[0].0 < w[1].0), "slots out of order");
        assert!(
            f.slots
                .iter()
                .all(|(slot, _)| *slot >= 1 && u32::from(*slot) <= reachable),
            "an unreachable slot was kept: {f:?}"
        );
    }
}

/// Seeds for [`cilium_maps`], built here: the bundles in `testdata/` hold no BPF maps.
/// The bytes are a NodePort master and slot, a backend and a rev-NAT entry as bpftool
/// prints them.
fn cilium_seeds() -> Vec<Vec<u8>> {
    let entry = |key: &[u8], value: &[u8]| {
        let hex = |b: &[u8]| {
            b.iter()
                .map(|x| format!("\"0x{x:02x}\""))
                .collect::<Vec<_>>()
                .join(",")
        };
        format!("{{\"key\":[{}],\"value\":[{}]}}", hex(key), hex(value))
    };
    let services = format!(
        "[{},{}]",
        entry(
            &[10, 0, 1, 21, 0x75, 0x80, 0, 0, 6, 0, 0, 0],
            &[0, 0, 0, 0, 1, 0, 0, 8, 0x42, 0, 0, 0]
        ),
        entry(
            &[10, 0, 1, 21, 0x75, 0x80, 1, 0, 6, 0, 0, 0],
            &[1, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0]
        ),
    );
    let backends = format!(
        "[{}]",
        entry(&[1, 0, 0, 0], &[10, 244, 1, 5, 0x1f, 0x90, 6, 0, 0, 0, 0, 0])
    );
    let rev_nat = format!("[{}]", entry(&[0, 8], &[10, 0, 1, 21, 0x75, 0x80]));
    [(0u8, services), (2, backends), (4, rev_nat)]
        .into_iter()
        .map(|(pick, json)| {
            let mut input = vec![pick];
            input.extend_from_slice(json.as_bytes());
            input
        })
        .collect()
}

/// A whole bundle: `==> NAME <==` header lines (as `head` prints several files)
/// followed by each file's bytes. Read as a scan reads a bundle, detected, rendered as
/// text and JSON, and planned for repair with the bundle's own iptables dumps.
pub fn bundle(data: &[u8]) {
    let files = split_bundle(data);
    let source = MemoryBundle { files: files.clone() };
    let Ok(input) = read_input(&source, None) else {
        return;
    };
    let desired = input.desired.clone();
    let report = run_scan(input, &DetectConfig::default());
    let _ = portdrift::heart::render::render_text(&report);
    serde_json::to_string(&report).expect("a report always serialises");
    let Some(desired) = desired else {
        return;
    };
    let mut rulesets = RepairRulesets::default();
    for dump in Input::IPTABLES {
        let Input::Iptables { family, .. } = dump else {
            continue;
        };
        if let Some(bytes) = files.get(dump.name()) {
            let backend = dump.iptables_backend().unwrap_or(Backend::IptablesNft);
            rulesets.iptables.insert(
                (backend, family),
                IptablesRuleset::parse(&String::from_utf8_lossy(bytes)),
            );
        }
    }
    let findings: Vec<&portdrift::heart::finding::Finding> = report.findings.iter().collect();
    let planned = plan(
        &findings,
        PlanContext {
            desired: &desired,
            rulesets: &rulesets,
            nudge: &BTreeSet::new(),
        },
    );
    for action in &planned.actions {
        if let Op::IptDeleteRule { rule, .. } = &action.op {
            let rs = &rulesets.iptables[&(action.backend, action.family)];
            assert!(rs.complete(), "an action on an incomplete read");
            assert!(
                rs.locate(rule).count() == 1,
                "planned a rule not in the ruleset: {rule}"
            );
        }
    }
}

/// Splits the bundle form of [`bundle`] into files by name.
pub fn split_bundle(data: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut current: Option<(String, Vec<u8>)> = None;
    for line in data.split_inclusive(|&b| b == b'\n') {
        let header = line
            .strip_suffix(b"\n")
            .and_then(|l| l.strip_prefix(b"==> "))
            .and_then(|l| l.strip_suffix(b" <=="));
        match header.and_then(|h| std::str::from_utf8(h).ok()) {
            Some(name) => {
                if let Some((n, c)) = current.take() {
                    files.insert(n, c);
                }
                current = Some((name.to_string(), Vec::new()));
            }
            None => {
                if let Some((_, c)) = current.as_mut() {
                    c.extend_from_slice(line);
                }
            }
        }
    }
    if let Some((n, c)) = current {
        files.insert(n, c);
    }
    files
}

/// Joins files into the bundle form of [`bundle`] (to seed the fuzzers from `testdata/`).
pub fn join_bundle(files: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, content) in files {
        out.extend_from_slice(format!("==> {name} <==\n").as_bytes());
        out.extend_from_slice(content);
        if !content.ends_with(b"\n") {
            out.push(b'\n');
        }
    }
    out
}

/// A bundle held in memory: name → bytes.
struct MemoryBundle {
    files: BTreeMap<String, Vec<u8>>,
}

impl Source for MemoryBundle {
    fn fetch<T, R, F>(&self, input: Input, consume: F) -> Fetched<Read<T, R>>
    where
        T: Send + 'static,
        R: RuleAnswer,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
    {
        let Some(content) = input.file_name().and_then(|name| self.files.get(name)) else {
            return Fetched::not_present();
        };
        let state = if content.is_empty() {
            InputState::Empty
        } else {
            InputState::Ok
        };
        Fetched {
            state: Some(state),
            value: Some(consume(&mut Cursor::new(content.clone())).map(Read::Bytes)),
            notes: Vec::new(),
            bytes: Some(content.len() as u64),
            elapsed: None,
        }
    }
}

/// Seeds for each target from a checkout's `testdata/`: target name → inputs.
pub fn seeds(testdata: &std::path::Path) -> io::Result<HashMap<&'static str, Vec<Vec<u8>>>> {
    let mut out: HashMap<&'static str, Vec<Vec<u8>>> = HashMap::new();
    let mut bundles: Vec<_> = std::fs::read_dir(testdata)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    bundles.sort();
    for dir in bundles {
        let mut files = BTreeMap::new();
        collect_files(&dir, &dir, &mut files)?;
        // A bundle's own records of how it was made (`source/`), its expectations and
        // notes are not inputs portdrift reads.
        files.retain(|name, _| {
            !name.starts_with("source/") && !name.ends_with("expected.json") && !name.ends_with(".md")
        });
        for (name, content) in &files {
            let base = name.rsplit('/').next().unwrap_or(name);
            let target = if base.ends_with("-save.txt") || base.ends_with(".iptables") {
                "iptables_save"
            } else if base == "ipvsadm.txt" {
                "ipvs"
            } else if base.ends_with(".json")
                && !matches!(base, "cluster.json" | "snapshot.json")
                && !base.starts_with("kube-proxy")
            {
                "nftables_json"
            } else if base.ends_with(".txt") || base.ends_with(".nft") {
                "nftables_text"
            } else if name.starts_with("proc/net/") {
                let pick = match base {
                    "tcp" => 0u8,
                    "udp" => 1,
                    "tcp6" => 2,
                    _ => 3,
                } | if cfg!(target_endian = "big") { 4 } else { 0 };
                let mut input = vec![pick];
                input.extend_from_slice(content);
                out.entry("proc_net").or_default().push(input);
                continue;
            } else {
                continue;
            };
            out.entry(target).or_default().push(content.clone());
        }
        if !files.is_empty() {
            out.entry("bundle").or_default().push(join_bundle(&files));
        }
    }
    out.entry("cilium_maps").or_default().extend(cilium_seeds());
    out.entry("ipvs").or_default().extend(ipvs_seeds());
    Ok(out)
}

fn collect_files(
    root: &std::path::Path,
    dir: &std::path::Path,
    out: &mut BTreeMap<String, Vec<u8>>,
) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.insert(rel.to_string_lossy().into_owned(), std::fs::read(&path)?);
        }
    }
    Ok(())
}
