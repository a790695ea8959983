//! The agent's incremental reads, on a real kernel. iptables-nft: a generated
//! node is loaded with the real `iptables-nft-restore` into a private network namespace,
//! read once whole, then changed by a burst of kube-proxy-like commits (KUBE-NODEPORTS
//! rewritten with a stale rule, endpoint chains created and deleted, a filter rule, an
//! IPv6 table created). Read again from the kernel's change notifications, only the
//! changed chains' blocks are read; the result must be identical to a fresh whole read:
//! the same text line for line, the same rule model, the same findings. A lost
//! notification must make the next read whole. kube-proxy's nftables tables: the same,
//! with a generated node loaded with `nft -f` and a burst of kube-proxy-like `nft -f`
//! transactions (NodePort map elements replaced and a stale one added, Service and
//! endpoint chains flushed and refilled, one with a new `numgen` map, an endpoint chain
//! added and one deleted).
//!
//! Needs root (CI runs as root and must not skip these). Nothing touches the host's own
//! network namespace.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use portdrift::heart::detect::DetectConfig;
use portdrift::heart::model::{Family, RuleDump};
use portdrift::heart::outcome::run_scan;
use portdrift::sources::netlink::NetlinkLimits;
use portdrift::sources::netlink::iptables::{
    ReadKind, read_rules_following, read_rules_netlink, render_save,
};
use portdrift::sources::netlink::kept::KeptFamily;
use portdrift::sources::netlink::nftables::{
    ConstantMaps, KeptNft, read_tables_following, read_tables_netlink,
};
use portdrift::sources::rule_changes::{ChangeJournal, RuleChanges};
use portdrift_test_support::synth::{ChainOrder, SynthConfig, generate, nft_script};

/// Where the inner test finds the generated node (set by the outer test).
const NODE_DIR: &str = "PORTDRIFT_CHURN_NODE";

#[test]
fn kept_tables_after_a_burst_of_changes_read_as_a_fresh_whole_read() {
    if !support::require_root("incremental rule reads")
        || !support::require_tool("iptables-nft-restore", "incremental rule reads")
        || !support::require_tool("nfacct", "incremental rule reads")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let node = SynthConfig {
        services: 400,
        endpoints_per_service: 3,
        chain_order: ChainOrder::Grouped,
        ..Default::default()
    };
    let generated = generate(&node);
    std::fs::write(dir.path().join("iptables-nft-save.txt"), &generated.iptables_save).unwrap();
    std::fs::write(dir.path().join("cluster.json"), &generated.cluster_json).unwrap();
    std::fs::write(dir.path().join("node"), "worker-1\n").unwrap();
    let load = format!(
        "for n in $(grep -o -- '--nfacct-name  *[^ ]*' {dump} | awk '{{print $2}}' | sort -u); do nfacct add $n; done; \
         iptables-nft-restore < {dump}",
        dump = dir.path().join("iptables-nft-save.txt").display(),
    );
    run_inside(dir.path(), &load, "read_after_a_burst_in_this_namespace");
}

/// Loads the node in `dir` into a fresh namespace with `load`, and runs the ignored
/// test `inner` there.
fn run_inside(dir: &Path, load: &str, inner: &str) {
    let shell = format!(
        "set -e; ip link set lo up; {load}; \
         {NODE_DIR}={dir} {me} --exact {inner} --ignored --test-threads=1 --nocapture",
        dir = dir.display(),
        me = std::env::current_exe().unwrap().display(),
    );
    support::run_in_fresh_netns(inner, &shell);
    assert!(dir.join("checked").is_file(), "the inner test did not run");
}

/// What an inner test starts from: the node's directory (None outside the namespace),
/// the notifications heard there (with the runtime they run on), and the read limits.
fn inside() -> Option<(PathBuf, tokio::runtime::Runtime, RuleChanges, NetlinkLimits)> {
    let dir = std::env::var_os(NODE_DIR).map(PathBuf::from)?;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let changes = runtime
        .block_on(async { RuleChanges::subscribe() })
        .expect("joins the notification group");
    let limits = NetlinkLimits {
        timeout: Duration::from_secs(30),
        max_bytes: 1 << 30,
    };
    Some((dir, runtime, changes, limits))
}

/// Run by the test above inside its namespace.
#[test]
#[ignore = "run inside a namespace by kept_tables_after_a_burst_of_changes_read_as_a_fresh_whole_read"]
fn read_after_a_burst_in_this_namespace() {
    let Some((dir, _runtime, changes, limits)) = inside() else {
        return;
    };
    let journal = changes.journal();
    let origin = "iptables-nft over netlink";
    let mut kept = None;
    // The agent's first scan asks for its periodic whole read too; nothing is kept yet,
    // and that is what the log is told.
    let mut whole = true;
    let (_, _, kind) =
        read_rules_following(Family::Ipv4, origin, limits, &journal, &mut kept, &mut whole).unwrap();
    assert!(
        matches!(&kind, ReadKind::Whole(why) if why.contains("no earlier")),
        "{kind:?}"
    );
    assert!(!whole, "a whole read done is no longer asked for");
    let (first, _, kind) =
        read_rules_following(Family::Ipv4, origin, limits, &journal, &mut kept, &mut false).unwrap();
    assert_eq!(
        kind,
        ReadKind::Changed {
            chains: 0,
            of: chain_count(&first)
        },
        "nothing changed, nothing read"
    );

    burst(&dir);

    let (kind, following, fresh) = read_matches_whole(&journal, &mut kept, limits);
    let ReadKind::Changed { chains, of } = kind else {
        panic!("the burst was not read from the notifications: {kind:?}")
    };
    assert!(
        chains > 0 && chains * 4 < of,
        "{chains} of {of} chains read again"
    );
    assert!(
        fresh.nodeports.iter().any(|r| r.port == 32700),
        "the burst's stale rule is in the fresh read"
    );
    // The same text, line for line, as the tables re-rendered from what was kept.
    let mut kept_text = Vec::new();
    kept.as_mut()
        .unwrap()
        .render_lines(Family::Ipv4, &mut |_, l| kept_text.push(l.to_string()))
        .unwrap();
    let mut whole_text = Vec::new();
    render_save(Family::Ipv4, limits, &mut |l| whole_text.push(l.to_string())).unwrap();
    assert_eq!(kept_text, whole_text);
    assert_eq!(
        findings(&dir, vec![following]),
        findings(&dir, vec![fresh]),
        "the same findings"
    );

    // The rewrites above filled datagram after datagram with KUBE-NODEPORTS's rules:
    // the listener's socket filter drops such datagrams once the journal names the
    // chain. The read took the chain, so the filter hears it again.
    assert_eq!(journal.filtered(), vec![], "nothing filtered once read");
    let dump = std::fs::read_to_string(dir.join("iptables-nft-save.txt")).unwrap();
    let start = journal.datagrams();
    restore(&dir, "iptables-nft-restore", &nodeports_rewrite(&dump, false));
    let first = settled_with_nodeports_filtered(&journal) - start;
    restore(&dir, "iptables-nft-restore", &nodeports_rewrite(&dump, true));
    let (kind, _, fresh) = read_matches_whole(&journal, &mut kept, limits);
    assert!(
        matches!(kind, ReadKind::Changed { chains, .. } if chains > 0),
        "{kind:?}"
    );
    let second = journal.datagrams() - start - first;
    assert!(
        first >= 20 && second * 10 <= first,
        "a rewrite heard in {first} datagrams, the next (filtered) in {second}"
    );
    assert!(
        fresh.nodeports.iter().any(|r| r.port == 32700),
        "the filtered rewrite was read"
    );
    // Heard again after the read: the stale rule's removal is read too.
    restore(&dir, "iptables-nft-restore", &nodeports_rewrite(&dump, false));
    let (kind, _, fresh) = read_matches_whole(&journal, &mut kept, limits);
    assert!(
        matches!(kind, ReadKind::Changed { chains, .. } if chains > 0),
        "{kind:?}"
    );
    assert!(
        !fresh.nodeports.iter().any(|r| r.port == 32700),
        "the rewrite after the read was read"
    );

    // IPv6: a table created since the last read is read whole.
    let mut kept6 = None;
    read_rules_following(Family::Ipv6, origin, limits, &journal, &mut kept6, &mut false).unwrap();
    restore(
        &dir,
        "ip6tables-nft-restore",
        "*nat\n:KUBE-NODEPORTS - [0:0]\n-A KUBE-NODEPORTS -p tcp -m tcp --dport 30999 -j RETURN\nCOMMIT\n",
    );
    let (v6, _, kind) =
        read_rules_following(Family::Ipv6, origin, limits, &journal, &mut kept6, &mut false).unwrap();
    assert!(
        matches!(&kind, ReadKind::Whole(why) if why.contains("created")),
        "{kind:?}"
    );
    assert!(v6.unwrap().kube_rule_count > 0);

    // A lost notification: the next read is whole, and says why.
    restore(
        &dir,
        "iptables-nft-restore",
        "*filter\n:KUBE-FIREWALL - [0:0]\n-A KUBE-FIREWALL -j RETURN\nCOMMIT\n",
    );
    journal.note_lost();
    let (_, _, kind) =
        read_rules_following(Family::Ipv4, origin, limits, &journal, &mut kept, &mut false).unwrap();
    assert!(
        matches!(&kind, ReadKind::Whole(why) if why.contains("lost")),
        "{kind:?}"
    );
    let (_, _, kind) =
        read_rules_following(Family::Ipv4, origin, limits, &journal, &mut kept, &mut false).unwrap();
    assert!(matches!(kind, ReadKind::Changed { .. }), "{kind:?}");
    drop(changes);
    std::fs::write(dir.join("checked"), "").unwrap();
}

fn chain_count(source: &Option<RuleDump>) -> usize {
    // Not in the model: counted from the text the tool would print.
    let _ = source;
    let mut n = 0;
    render_save(
        Family::Ipv4,
        NetlinkLimits {
            timeout: Duration::from_secs(30),
            max_bytes: 1 << 30,
        },
        &mut |l| n += usize::from(l.starts_with(':')),
    )
    .unwrap();
    n
}

fn restore(dir: &Path, tool: &str, script: &str) {
    let path = dir.join("step.txt");
    std::fs::write(&path, script).unwrap();
    let run = Command::new("sh")
        .arg("-c")
        .arg(format!("{tool} --noflush < {}", path.display()))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{tool}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// A burst of commits as kube-proxy's syncs make them when endpoints move and a Service
/// goes: KUBE-NODEPORTS rewritten (its first rule dropped, a stale rule added), a new
/// endpoint chain and its Service chain rewritten to use it, an old endpoint chain
/// deleted, and a filter-table rule.
fn burst(dir: &Path) {
    let dump = std::fs::read_to_string(dir.join("iptables-nft-save.txt")).unwrap();
    let rewrite = nodeports_rewrite(&dump, true);
    // The first Service chain with a single endpoint chain: its endpoint moves.
    let svc_line = dump
        .lines()
        .find(|l| l.starts_with("-A KUBE-SVC-") && l.contains(" -j KUBE-SEP-") && !l.contains("statistic"))
        .expect("a Service chain with one endpoint");
    let svc = svc_line.split_whitespace().nth(1).unwrap();
    let old_sep = svc_line.rsplit(' ').next().unwrap();
    let svc_rules: Vec<&str> = dump
        .lines()
        .filter(|l| l.starts_with(&format!("-A {svc} ")))
        .collect();
    let mut endpoint = format!(
        "*nat\n:KUBE-SEP-MOVEDMOVEDMOVED1 - [0:0]\n:{svc} - [0:0]\n-A KUBE-SEP-MOVEDMOVEDMOVED1 -p tcp -m tcp -j DNAT --to-destination 10.250.0.9:8080\n"
    );
    for rule in svc_rules {
        endpoint.push_str(&rule.replace(old_sep, "KUBE-SEP-MOVEDMOVEDMOVED1"));
        endpoint.push('\n');
    }
    endpoint.push_str(&format!(":{old_sep} - [0:0]\n-X {old_sep}\nCOMMIT\n"));
    let filter = "*filter\n:KUBE-EXTERNAL-SERVICES - [0:0]\n-A KUBE-EXTERNAL-SERVICES -p tcp -m addrtype --dst-type LOCAL -m tcp --dport 32701 -j REJECT --reject-with icmp-port-unreachable\nCOMMIT\n";
    for _ in 0..3 {
        restore(dir, "iptables-nft-restore", &rewrite);
    }
    restore(dir, "iptables-nft-restore", &endpoint);
    restore(dir, "iptables-nft-restore", filter);
    restore(dir, "iptables-nft-restore", &rewrite);
}

/// A sync's rewrite of nat KUBE-NODEPORTS: its first rule dropped, and with `stale` a
/// rule for a Service that does not exist (port 32700).
fn nodeports_rewrite(dump: &str, stale: bool) -> String {
    let nodeports: Vec<&str> = dump
        .lines()
        .filter(|l| l.starts_with("-A KUBE-NODEPORTS "))
        .collect();
    let target = dump
        .lines()
        .find_map(|l| l.split(" -j ").nth(1).filter(|t| t.starts_with("KUBE-EXT-")))
        .unwrap();
    let mut rewrite = String::from("*nat\n:KUBE-NODEPORTS - [0:0]\n");
    for line in &nodeports[1..] {
        rewrite.push_str(line);
        rewrite.push('\n');
    }
    if stale {
        rewrite.push_str(&format!(
            "-A KUBE-NODEPORTS -p tcp -m comment --comment \"gone/deleted:http\" -m tcp --dport 32700 -j {target}\n"
        ));
    }
    rewrite.push_str("COMMIT\n");
    rewrite
}

/// Reads IPv4's tables following the notifications and checks the result against a
/// fresh whole read: the same rule model. Returns how it read, and both models.
fn read_matches_whole(
    journal: &ChangeJournal,
    kept: &mut Option<KeptFamily>,
    limits: NetlinkLimits,
) -> (ReadKind, RuleDump, RuleDump) {
    let origin = "iptables-nft over netlink";
    let (following, _, kind) =
        read_rules_following(Family::Ipv4, origin, limits, journal, kept, &mut false).unwrap();
    let (fresh, _) = read_rules_netlink(Family::Ipv4, origin, limits).unwrap();
    let (following, fresh) = (following.unwrap(), fresh.unwrap());
    assert_eq!(
        format!("{following:#?}"),
        format!("{fresh:#?}"),
        "the same rule model"
    );
    (kind, following, fresh)
}

/// Waits until the listener filters nat KUBE-NODEPORTS and has received everything
/// sent so far; returns the datagrams it received.
fn settled_with_nodeports_filtered(journal: &ChangeJournal) -> u64 {
    let nodeports = (2, "nat".to_string(), "KUBE-NODEPORTS".to_string());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut last = journal.datagrams();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = journal.datagrams();
        if now == last && journal.filtered().contains(&nodeports) {
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "KUBE-NODEPORTS not filtered: {:?}",
            journal.filtered()
        );
        last = now;
    }
}

/// The findings of a scan of `rules` against the generated cluster.
fn findings(dir: &Path, rules: Vec<RuleDump>) -> serde_json::Value {
    let cluster = tempfile::tempdir().unwrap();
    for file in ["cluster.json", "node"] {
        std::fs::copy(dir.join(file), cluster.path().join(file)).unwrap();
    }
    let mut input = portdrift::scan::input::read_bundle(cluster.path(), None).unwrap();
    input.observed.dumps.extend(rules);
    let config = DetectConfig {
        nodeport_range: 20000..=32767,
        grace: None,
        cluster_state_stale: false,
        acceptances: None,
    };
    let report = run_scan(input, &config);
    assert!(!report.findings.is_empty(), "the stale rule is found");
    serde_json::to_value(&report.findings).unwrap()
}

#[test]
fn kept_nft_tables_after_a_burst_of_changes_read_as_a_fresh_whole_read() {
    if !support::require_root("incremental nftables reads")
        || !support::require_tool("nft", "incremental nftables reads")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // PORTDRIFT_CHURN_SERVICES=10000 measures what is kept at scale (printed).
    let services = std::env::var("PORTDRIFT_CHURN_SERVICES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    let node = SynthConfig {
        services,
        endpoints_per_service: 3,
        ..Default::default()
    };
    std::fs::write(dir.path().join("kube-proxy.nft"), nft_script(&node)).unwrap();
    std::fs::write(dir.path().join("cluster.json"), generate(&node).cluster_json).unwrap();
    std::fs::write(dir.path().join("node"), "worker-1\n").unwrap();
    let load = format!("nft -f {}", dir.path().join("kube-proxy.nft").display());
    run_inside(dir.path(), &load, "nft_read_after_a_burst_in_this_namespace");
}

/// Run by the test above inside its namespace.
#[test]
#[ignore = "run inside a namespace by kept_nft_tables_after_a_burst_of_changes_read_as_a_fresh_whole_read"]
fn nft_read_after_a_burst_in_this_namespace() {
    let Some((dir, _runtime, changes, limits)) = inside() else {
        return;
    };
    let journal = changes.journal();
    let origin = "nftables over netlink";
    let (mut kept, mut maps) = (None, ConstantMaps::default());
    let read = |kept: &mut Option<KeptNft>, maps: &mut ConstantMaps, whole: bool| {
        read_tables_following(origin, limits, &journal, kept, maps, &mut { whole }).unwrap()
    };
    let (_, _, kind) = read(&mut kept, &mut maps, false);
    assert!(matches!(kind, ReadKind::Whole(_)), "{kind:?}");
    eprintln!(
        "kept after a whole read: {} bytes, VmRSS {}",
        kept_bytes(&kept),
        vm_rss()
    );
    let (_, _, kind) = read(&mut kept, &mut maps, false);
    let ReadKind::Changed { chains: 0, of } = kind else {
        panic!("nothing changed, yet {kind:?}")
    };
    assert!(of > 1000, "{of} chains");

    nft_burst(&dir);

    let (following, _, kind) = read(&mut kept, &mut maps, false);
    let ReadKind::Changed { chains, of } = kind else {
        panic!("the burst was not read from the notifications: {kind:?}")
    };
    eprintln!(
        "after the burst: {chains} of {of} chains read; kept {} bytes, VmRSS {}",
        kept_bytes(&kept),
        vm_rss()
    );
    assert!(
        chains >= 4 && chains * 20 < of,
        "{chains} of {of} chains read again"
    );
    let (fresh, _) = read_tables_netlink(origin, limits).unwrap();
    assert_eq!(
        format!("{following:#?}"),
        format!("{fresh:#?}"),
        "the same rule model"
    );
    let model = format!("{fresh:#?}");
    for changed in ["10.250.0.9:8080", "10.250.1.1:8080"] {
        assert!(
            model.contains(changed),
            "the burst's {changed} is in the fresh read"
        );
    }
    assert!(
        fresh[0].nodeports.iter().any(|r| r.port == 32700),
        "the burst's stale element is in the fresh read"
    );
    assert_eq!(
        findings(&dir, following),
        findings(&dir, fresh),
        "the same findings"
    );

    // The periodic safety net, then a lost notification: whole, and saying why.
    let (_, _, kind) = read(&mut kept, &mut maps, true);
    assert!(
        matches!(&kind, ReadKind::Whole(why) if why.contains("periodic")),
        "{kind:?}"
    );
    nft(&dir, "add element ip kube-proxy cluster-ips { 10.96.255.254 }\n");
    journal.note_lost();
    let (_, _, kind) = read(&mut kept, &mut maps, false);
    assert!(
        matches!(&kind, ReadKind::Whole(why) if why.contains("lost")),
        "{kind:?}"
    );
    let (_, _, kind) = read(&mut kept, &mut maps, false);
    assert!(matches!(kind, ReadKind::Changed { chains: 0, .. }), "{kind:?}");

    // A chain added is read; renamed, it is whole (rules kept would name the old one).
    nft(
        &dir,
        "add chain ip kube-proxy spare\nadd rule ip kube-proxy spare return\n",
    );
    let (_, _, kind) = read(&mut kept, &mut maps, false);
    assert!(matches!(kind, ReadKind::Changed { chains: 1, .. }), "{kind:?}");
    nft(&dir, "rename chain ip kube-proxy spare spare-renamed\n");
    let (_, _, kind) = read(&mut kept, &mut maps, false);
    assert!(
        matches!(&kind, ReadKind::Whole(why) if why.contains("renamed")),
        "{kind:?}"
    );
    // A table created since the last read: whole.
    nft(
        &dir,
        "add table ip6 kube-proxy\nadd chain ip6 kube-proxy services\n",
    );
    let (sources, _, kind) = read(&mut kept, &mut maps, false);
    assert!(
        matches!(&kind, ReadKind::Whole(why) if why.contains("created")),
        "{kind:?}"
    );
    assert_eq!(sources.len(), 2, "both tables read");
    drop(changes);
    std::fs::write(dir.join("checked"), "").unwrap();
}

fn kept_bytes(kept: &Option<KeptNft>) -> usize {
    kept.as_ref().map_or(0, KeptNft::kept_bytes)
}

fn vm_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().to_string()))
        .unwrap_or_default()
}

fn nft(dir: &Path, script: &str) {
    let path = dir.join("step.nft");
    std::fs::write(&path, script).unwrap();
    let run = Command::new("nft").arg("-f").arg(&path).output().unwrap();
    assert!(
        run.status.success(),
        "nft -f: {}\n{script}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// A burst of transactions as kube-proxy's nftables syncs make them: NodePort elements
/// replaced and a stale one added; a Service chain refilled as it was (its `numgen`
/// map made anew); a Service's endpoint moved to a new endpoint chain, its old one
/// deleted; an endpoint chain refilled with a new address.
fn nft_burst(dir: &Path) {
    const T: &str = "ip kube-proxy";
    let script = std::fs::read_to_string(dir.join("kube-proxy.nft")).unwrap();
    let rules_of = |chain: &str| -> Vec<String> {
        let prefix = format!("add rule {T} {chain} ");
        script
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix).map(str::to_string))
            .collect()
    };
    // (Service chain, its endpoint chains) of each Service's dispatch.
    let dispatch: Vec<(String, Vec<String>)> = script
        .lines()
        .filter(|l| l.contains(" numgen random mod ") && l.contains(" service-"))
        .map(|l| {
            let chain = l.split_whitespace().nth(4).unwrap().to_string();
            let arms = l
                .split("goto ")
                .skip(1)
                .map(|a| a.split([',', ' ']).next().unwrap().to_string())
                .collect();
            (chain, arms)
        })
        .collect();
    // Endpoints only their Service's dispatch reaches, so one can be deleted.
    let only_here = |chain: &str| script.matches(&format!("goto {chain}")).count() == 1;
    let mut picks = dispatch
        .iter()
        .filter(|(_, arms)| arms.len() > 1 && only_here(&arms[0]));
    let (s1, s2, s3) = (
        picks.next().unwrap(),
        picks.next().unwrap(),
        picks.next().unwrap(),
    );
    // As a sync after endpoints moved: many elements deleted and added again, one of
    // them changed (its first dropped), and the stale one added.
    let elements: Vec<String> = script
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("add element {T} service-nodeports {{ ")))
        .flat_map(|l| l.trim_end_matches(" }").split(", "))
        .take(60)
        .map(str::to_string)
        .collect();
    let keys: Vec<&str> = elements.iter().map(|e| e.split(" : ").next().unwrap()).collect();
    let nodeports = |deleted: &[&str]| {
        format!(
            "delete element {T} service-nodeports {{ {} }}\n\
             add element {T} service-nodeports {{ {}, tcp . 32700 : goto {} }}\n",
            deleted.join(", "),
            elements[1..].join(", "),
            s3.0
        )
    };
    let mut again = keys[1..].to_vec();
    again.push("tcp . 32700");
    let (nodeports, nodeports_again) = (nodeports(&keys), nodeports(&again));
    let refill = |chain: &str, rules: &[String]| {
        let mut out = format!("flush chain {T} {chain}\n");
        for rule in rules {
            out += &format!("add rule {T} {chain} {rule}\n");
        }
        out
    };
    // The same rules: a new rule and a new anonymous map, the same model.
    let same = refill(&s1.0, &rules_of(&s1.0));
    let moved = s2.1[0].replacen("endpoint-", "endpoint-moved-", 1);
    let s2_rules: Vec<String> = rules_of(&s2.0)
        .into_iter()
        .map(|r| match r.contains("numgen") {
            true => format!(
                "numgen random mod {} vmap {{ 0 : goto {moved}, {} }}",
                s2.1.len(),
                (1..s2.1.len())
                    .map(|i| format!("{i} : goto {}", s2.1[i]))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            false => r,
        })
        .collect();
    let endpoint_moved = format!(
        "add chain {T} {moved}\n\
         add rule {T} {moved} ip saddr 10.250.0.9 jump mark-for-masquerade\n\
         add rule {T} {moved} meta l4proto tcp dnat to 10.250.0.9:8080\n{}\
         flush chain {T} {old}\ndelete chain {T} {old}\n",
        refill(&s2.0, &s2_rules),
        old = s2.1[0],
    );
    let endpoint_refilled = refill(
        &s3.1[0],
        &[
            "ip saddr 10.250.1.1 jump mark-for-masquerade".to_string(),
            "meta l4proto tcp dnat to 10.250.1.1:8080".to_string(),
        ],
    );
    for step in [
        &nodeports,
        &same,
        &endpoint_moved,
        &endpoint_refilled,
        &nodeports_again,
    ] {
        nft(dir, step);
    }
}
