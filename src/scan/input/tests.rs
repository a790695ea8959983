//! The reading path on a scripted source, and the round trip source → snapshot →
//! bundle directory → the same scan input.

use std::collections::HashMap;
use std::io::{self, BufRead, Cursor};
use std::path::Path;

use super::*;
use crate::heart::detect::DetectConfig;
use crate::heart::model::{Backend, Family};
use crate::heart::observed::NodeSysctls;
use crate::heart::outcome::run_scan;
use crate::scan::bundle_error::SnapshotError;
use crate::scan::capture::{SnapshotOptions, write_snapshot};
use crate::sources::rule_changes::NF_TABLES_DUMPS;
use crate::sources::source::{Read, RuleAnswer};

const HEALTHZ_FILE: &str = "kube-proxy-healthz.json";
const LOCAL_PORT_RANGE_FILE: &str = "proc/sys/net/ipv4/ip_local_port_range";
const RESERVED_PORTS_FILE: &str = "proc/sys/net/ipv4/ip_local_reserved_ports";
const MANIFEST_FILE: &str = "snapshot.json";

/// A source that answers from a table: name → (state, content, notes).
#[derive(Default)]
struct Scripted {
    answers: HashMap<&'static str, (InputState, Vec<u8>, Vec<String>)>,
}

impl Scripted {
    fn with(mut self, name: &'static str, state: InputState, content: &[u8]) -> Self {
        self.answers.insert(name, (state, content.to_vec(), Vec::new()));
        self
    }

    fn note(mut self, name: &'static str, note: &str) -> Self {
        self.answers.get_mut(name).unwrap().2.push(note.into());
        self
    }
}

impl Source for Scripted {
    fn fetch<T, R, F>(&self, input: Input, consume: F) -> Fetched<Read<T, R>>
    where
        T: Send + 'static,
        R: RuleAnswer,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
    {
        let Some((state, content, notes)) = self.answers.get(input.name()).cloned() else {
            return Fetched::not_present();
        };
        let value = (state != InputState::Absent)
            .then(|| consume(&mut Cursor::new(content.clone())).map(Read::Bytes));
        Fetched {
            state: Some(state),
            value,
            notes,
            bytes: Some(content.len() as u64),
            elapsed: None,
        }
    }

    fn label(&self, input: Input) -> String {
        format!("live:{input}")
    }
}

fn testdata(bundle: &str, file: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata")
            .join(bundle)
            .join(file),
    )
    .unwrap()
}

fn status<'a>(input: &'a ScanInput, name: &str) -> &'a InputStatus {
    input
        .sources
        .iter()
        .find(|s| s.source.name() == name)
        .unwrap_or_else(|| panic!("no status for {name}: {:#?}", input.sources))
}

fn split_node() -> Scripted {
    let b = "iptables-backend-split";
    Scripted::default()
        .with("iptables-nft-save.txt", InputState::Ok, &testdata(b, "iptables-nft-save.txt"))
        .note(
            "iptables-nft-save.txt",
            "the tool says: iptables-legacy tables present, use iptables-legacy-save to see them",
        )
        .with(
            "iptables-legacy-save.txt",
            InputState::Ok,
            &testdata(b, "iptables-legacy-save.txt"),
        )
        .with("ip6tables-nft-save.txt", InputState::Empty, b"")
        .with("ip6tables-legacy-save.txt", InputState::Absent, b"")
        .note("ip6tables-legacy-save.txt", "ip6tables-legacy-save is not on PATH")
        .with(
            "nft.json",
            InputState::Ok,
            br#"{"nftables": [{"metainfo": {"version": "1.0.6"}}]}"#,
        )
        .with("proc/net/tcp", InputState::Ok, &testdata(b, "proc/net/tcp"))
        .with("proc/net/tcp6", InputState::Ok, &testdata(b, "proc/net/tcp6"))
        .with("proc/net/udp", InputState::Ok, &testdata(b, "proc/net/udp"))
        .with("proc/net/udp6", InputState::Absent, b"")
        .with(LOCAL_PORT_RANGE_FILE, InputState::Ok, b"32768\t60999\n")
        .with(RESERVED_PORTS_FILE, InputState::Ok, b"\n")
        .with(
            HEALTHZ_FILE,
            InputState::Failed,
            br#"{"lastUpdated": "2025-11-30 10:00:00 +0000 UTC","currentTime": "2025-11-30 10:05:00 +0000 UTC"}"#,
        )
        .note(HEALTHZ_FILE, "kube-proxy answered HTTP 503 Service Unavailable")
        .with("cluster.json", InputState::Ok, &testdata(b, "cluster.json"))
        .with("node", InputState::Ok, b"worker-4\n")
}

/// The split node, where a rule dump, a socket table and the cluster state each wait,
/// while they are read, until the other two are being read as well. Read one after
/// another they never meet, and each read fails with "read alone".
struct Meeting {
    node: Scripted,
    arrived: std::sync::Mutex<usize>,
    all_there: std::sync::Condvar,
}

const MEETING: [&str; 3] = ["iptables-nft-save.txt", "proc/net/tcp", "cluster.json"];

impl Source for Meeting {
    fn fetch<T, R, F>(&self, input: Input, consume: F) -> Fetched<Read<T, R>>
    where
        T: Send + 'static,
        R: RuleAnswer,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
    {
        let name = input.name();
        if MEETING.contains(&name) {
            let mut arrived = self.arrived.lock().unwrap();
            *arrived += 1;
            self.all_there.notify_all();
            let (arrived, wait) = self
                .all_there
                .wait_timeout_while(arrived, std::time::Duration::from_secs(10), |n| {
                    *n < MEETING.len()
                })
                .unwrap();
            drop(arrived);
            if wait.timed_out() {
                return Fetched {
                    state: Some(InputState::Error),
                    value: Some(Err(io::Error::other(format!("{name} read alone")))),
                    ..Fetched::not_present()
                };
            }
        }
        self.node.fetch(input, consume)
    }
}

#[test]
fn the_rules_the_node_and_the_cluster_state_are_read_at_once() {
    let meeting = Meeting {
        node: split_node(),
        arrived: std::sync::Mutex::new(0),
        all_there: std::sync::Condvar::new(),
    };
    let input = read_input(&meeting, None).expect("the cluster state was read alongside the rest");
    for name in MEETING.into_iter().filter(|name| *name != "cluster.json") {
        assert_eq!(
            status(&input, name).status,
            InputState::Ok,
            "{name}: {:?}",
            status(&input, name)
        );
    }
    assert!(input.desired.is_some());
    // Put together in one order whatever finished first: rules, the node, the cluster.
    let order: Vec<&str> = input.sources.iter().map(|s| s.source.name()).collect();
    let at = |name: &str| order.iter().position(|n| *n == name).unwrap();
    assert!(at("nft.json") < at("proc/net/tcp"), "{order:?}");
    assert!(at(HEALTHZ_FILE) < at("cluster.json"), "{order:?}");
    assert_eq!(order.last(), Some(&"cluster.json"), "{order:?}");
}

#[test]
fn every_source_state_is_reported_and_only_good_content_is_used() {
    let input = read_input(&split_node(), None).unwrap();
    assert_eq!(input.node.as_deref(), Some("worker-4"));
    let s = status(&input, "iptables-nft-save.txt");
    assert_eq!(s.status, InputState::Ok);
    assert_eq!(s.origin.as_deref(), Some("live:iptables-nft-save.txt"));
    assert!(s.notes[0].contains("legacy tables present"), "{:?}", s.notes);
    assert_eq!(status(&input, "ip6tables-nft-save.txt").status, InputState::Empty);
    let absent = status(&input, "ip6tables-legacy-save.txt");
    assert_eq!(absent.status, InputState::Absent);
    assert_eq!(absent.family, Some(Family::Ipv6));
    assert_eq!(status(&input, "nft.json").status, InputState::Empty);
    assert_eq!(status(&input, "proc/net/udp6").status, InputState::Absent);
    assert_eq!(input.observed.dumps.len(), 2, "only the two dumps with tables");
    assert_eq!(
        input.observed.dumps[0].origin, "live:iptables-nft-save.txt",
        "findings name the live tool"
    );
    assert_eq!(
        input.observed.sysctls,
        Some(NodeSysctls {
            local_port_range: Some(32768..=60999),
            reserved_ports: vec![],
        })
    );
    let health = input.observed.kube_proxy_health.as_ref().unwrap();
    assert!(!health.healthy);
    assert_eq!(
        health.since_last_update,
        Some(std::time::Duration::from_secs(300))
    );
    assert_eq!(status(&input, HEALTHZ_FILE).status, InputState::Failed);
    assert_eq!(status(&input, "cluster.json").status, InputState::Ok);
}

#[test]
fn a_dump_cut_by_a_failure_or_deadline_is_read_but_not_trusted() {
    let dump = testdata("duplicate-dnat-30080", "iptables-nft-save.txt");
    for state in [InputState::Failed, InputState::TimedOut] {
        let src = Scripted::default().with("iptables-nft-save.txt", state, &dump);
        let input = read_input(&src, None).unwrap();
        assert_eq!(status(&input, "iptables-nft-save.txt").status, state);
        assert_eq!(input.observed.dumps.len(), 1);
        assert!(!input.observed.dumps[0].complete, "{state}");
    }
    let src = Scripted::default().with("iptables-nft-save.txt", InputState::TooLarge, &dump);
    let input = read_input(&src, None).unwrap();
    assert_eq!(
        status(&input, "iptables-nft-save.txt").status,
        InputState::TooLarge
    );
    assert!(
        input.observed.dumps.is_empty(),
        "a dump cut by the size limit is not used"
    );
}

#[test]
fn garbled_health_answers_and_sysctls_are_statuses_not_failures() {
    let src = Scripted::default()
        .with(HEALTHZ_FILE, InputState::Ok, b"<html>hello</html>")
        .with(LOCAL_PORT_RANGE_FILE, InputState::Ok, b"nonsense")
        .with(RESERVED_PORTS_FILE, InputState::Ok, b"30000-32767,x");
    let input = read_input(&src, None).unwrap();
    assert_eq!(status(&input, HEALTHZ_FILE).status, InputState::Error);
    assert_eq!(status(&input, LOCAL_PORT_RANGE_FILE).status, InputState::Error);
    let reserved = status(&input, RESERVED_PORTS_FILE);
    assert_eq!(reserved.status, InputState::Partial);
    assert_eq!(reserved.unparsed, 1);
    let sysctls = input.observed.sysctls.unwrap();
    assert_eq!(sysctls.local_port_range, None);
    assert_eq!(sysctls.reserved_ports, vec![30000..=32767]);
}

#[test]
fn an_unreadable_cluster_state_fails_the_scan() {
    let src = Scripted::default().with(
        "cluster.json",
        InputState::Ok,
        b"{\"kind\": \"List\", \"items\": [",
    );
    assert!(matches!(
        read_input(&src, None),
        Err(SnapshotError::ClusterState { .. })
    ));
}

fn findings_of(input: ScanInput) -> Vec<String> {
    let report = run_scan(input, &DetectConfig::default());
    let mut f: Vec<String> = report
        .findings
        .iter()
        .map(|f| {
            format!(
                "{:?} {:?} {:?} {:?} {:?}",
                f.kind, f.severity, f.port, f.backend, f.target
            )
        })
        .collect();
    f.sort();
    f
}

fn states(input: &ScanInput) -> Vec<(String, InputState)> {
    input
        .sources
        .iter()
        .map(|s| (s.source.to_string(), s.status))
        .collect()
}

#[test]
fn a_snapshot_reads_back_as_the_source_it_captured() {
    let dir = tempfile::TempDir::new().unwrap();
    let out = dir.path().join("bundle");
    let manifest = write_snapshot(&split_node(), &out, &SnapshotOptions::default()).unwrap();
    assert_eq!(manifest.node.as_deref(), Some("worker-4"));
    // Only what printed something is a file; the manifest has every source.
    assert!(out.join("iptables-nft-save.txt").is_file());
    assert!(!out.join("ip6tables-nft-save.txt").exists());
    assert!(
        !out.join("nft.json").exists(),
        "a ruleset without tables is not kept"
    );
    assert!(out.join(LOCAL_PORT_RANGE_FILE).is_file());
    assert!(out.join(HEALTHZ_FILE).is_file());
    assert_eq!(std::fs::read_to_string(out.join("node")).unwrap(), "worker-4\n");
    assert_eq!(
        std::fs::read(out.join("iptables-legacy-save.txt")).unwrap(),
        testdata("iptables-backend-split", "iptables-legacy-save.txt"),
        "dumps are kept exactly as printed"
    );
    let entry = |n: &str| manifest.sources.iter().find(|e| e.source == n).unwrap().clone();
    assert_eq!(entry("ip6tables-legacy-save.txt").status, InputState::Absent);
    assert_eq!(entry("nft.json").status, InputState::Empty);
    assert!(!entry("nft.json").file);
    assert_eq!(entry(HEALTHZ_FILE).status, InputState::Failed);
    assert!(out.join("snapshot.json").is_file());
    // No temporary files are left behind.
    let leftovers: Vec<_> = walk(&out)
        .into_iter()
        .filter(|p| p.contains(".partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let live = read_input(&split_node(), None).unwrap();
    let offline = read_bundle(&out, None).unwrap();
    assert_eq!(states(&live), states(&offline));
    assert_eq!(live.observed.sysctls, offline.observed.sysctls);
    assert_eq!(
        live.observed.kube_proxy_health,
        offline.observed.kube_proxy_health
    );
    let ip6 = offline
        .sources
        .iter()
        .find(|s| s.source.name() == "ip6tables-legacy-save.txt")
        .unwrap();
    assert_eq!(
        ip6.notes,
        vec!["ip6tables-legacy-save is not on PATH".to_string()]
    );
    let live_findings = findings_of(live);
    assert!(!live_findings.is_empty());
    assert_eq!(live_findings, findings_of(offline));
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path().display().to_string());
        }
    }
    out
}

#[test]
fn a_failed_capture_stays_untrusted_in_the_bundle() {
    let dump = testdata("duplicate-dnat-30080", "iptables-nft-save.txt");
    let src = Scripted::default()
        .with(
            "iptables-nft-save.txt",
            InputState::TimedOut,
            &dump[..dump.len() / 2],
        )
        .note(
            "iptables-nft-save.txt",
            "iptables-nft-save did not finish within 10s and was killed",
        );
    let dir = tempfile::TempDir::new().unwrap();
    write_snapshot(&src, dir.path(), &SnapshotOptions::default()).unwrap();
    let input = read_bundle(dir.path(), None).unwrap();
    let s = status(&input, "iptables-nft-save.txt");
    assert_eq!(s.status, InputState::TimedOut);
    assert!(s.notes[0].contains("did not finish"), "{:?}", s.notes);
    assert!(!input.observed.dumps[0].complete);
}

#[test]
fn a_snapshot_does_not_overwrite_without_force() {
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::write(dir.path().join("nft.txt"), "table ip kube-proxy {\n}\n").unwrap();
    std::fs::write(dir.path().join("notes.md"), "mine").unwrap();
    let src = || {
        Scripted::default().with(
            "proc/net/tcp",
            InputState::Ok,
            &testdata("haproxy-squatter", "proc/net/tcp"),
        )
    };
    assert!(matches!(
        write_snapshot(&src(), dir.path(), &SnapshotOptions::default()),
        Err(SnapshotError::NotEmpty(_))
    ));
    let force = SnapshotOptions {
        force: true,
        ..Default::default()
    };
    write_snapshot(&src(), dir.path(), &force).unwrap();
    assert!(
        !dir.path().join("nft.txt").exists(),
        "an older capture's file is removed"
    );
    assert!(dir.path().join("notes.md").exists(), "other files are left alone");
    assert!(dir.path().join("proc/net/tcp").is_file());
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    assert!(write_snapshot(&src(), &file, &force).is_err());
}

#[test]
fn a_bundle_manifest_is_applied_and_a_bad_one_is_reported() {
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::create_dir_all(dir.path().join("proc/net")).unwrap();
    std::fs::write(
        dir.path().join("proc/net/tcp"),
        testdata("haproxy-squatter", "proc/net/tcp"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join(MANIFEST_FILE),
        r#"{"version": 1, "portdrift": "0.1.0", "captured_at": "2025-11-30T00:00:00Z", "node": null, "sources": [
            {"source": "iptables-legacy-save.txt", "status": "failed", "notes": ["exit status 1", "stderr: boom"]},
            {"source": "iptables-nft-save.txt", "status": "ok", "file": true},
            {"source": "proc/net/tcp", "status": "ok", "file": true}
        ]}"#,
    )
    .unwrap();
    let input = read_bundle(dir.path(), None).unwrap();
    let legacy = status(&input, "iptables-legacy-save.txt");
    assert_eq!(legacy.status, InputState::Failed);
    assert_eq!(
        legacy.notes,
        vec!["exit status 1".to_string(), "stderr: boom".into()]
    );
    let missing = status(&input, "iptables-nft-save.txt");
    assert_eq!(missing.status, InputState::Error);
    assert_eq!(status(&input, "proc/net/tcp").status, InputState::Ok);

    std::fs::write(dir.path().join(MANIFEST_FILE), "{not json").unwrap();
    let input = read_bundle(dir.path(), None).unwrap();
    assert_eq!(status(&input, MANIFEST_FILE).status, InputState::Error);
    assert!(
        input
            .sources
            .iter()
            .all(|s| s.source.name() != "iptables-legacy-save.txt")
    );
}

#[test]
fn the_bundle_sysctl_files_are_read() {
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::create_dir_all(dir.path().join("proc/sys/net/ipv4")).unwrap();
    std::fs::write(dir.path().join(LOCAL_PORT_RANGE_FILE), "1024 65000\n").unwrap();
    std::fs::write(dir.path().join(RESERVED_PORTS_FILE), "30000-32767\n").unwrap();
    let input = read_bundle(dir.path(), None).unwrap();
    assert_eq!(
        input.observed.sysctls,
        Some(NodeSysctls {
            local_port_range: Some(1024..=65000),
            reserved_ports: vec![30000..=32767],
        })
    );
}

#[test]
fn the_rule_cache_replays_only_what_it_is_allowed_to() {
    let b = "iptables-backend-split";
    let node = || {
        Scripted::default()
            .with(
                "iptables-nft-save.txt",
                InputState::Ok,
                &testdata(b, "iptables-nft-save.txt"),
            )
            .with(
                "iptables-legacy-save.txt",
                InputState::Ok,
                &testdata(b, "iptables-legacy-save.txt"),
            )
    };
    let nodeports = |input: &ScanInput, backend: Backend| {
        input
            .observed
            .dumps
            .iter()
            .filter(|s| s.backend == backend)
            .map(|s| s.nodeports.len())
            .sum::<usize>()
    };
    let mut cache = RuleCache::keeping(&NF_TABLES_DUMPS);
    let first = read_input_cached(&node(), None, &mut cache).unwrap();
    let nft = nodeports(&first, Backend::IptablesNft);
    let legacy = nodeports(&first, Backend::IptablesLegacy);
    assert!(nft > 0 && legacy > 0);
    // A read that was never given back (a scan that failed) is not replayed.
    cache.allow_reuse(&NF_TABLES_DUMPS);
    let mut lost = read_input_cached(&node(), None, &mut cache).unwrap();
    assert!(
        !status(&lost, "iptables-nft-save.txt")
            .notes
            .iter()
            .any(|n| n.contains("not read again"))
    );
    // The scan hands the rules back: they are kept, not copied.
    cache.keep(std::mem::take(&mut lost.observed.dumps));

    // Both dumps are now empty on the node; only the nf_tables one may be reused.
    let emptied = || {
        Scripted::default()
            .with("iptables-nft-save.txt", InputState::Empty, b"")
            .with("iptables-legacy-save.txt", InputState::Empty, b"")
    };
    cache.allow_reuse(&NF_TABLES_DUMPS);
    let second = read_input_cached(&emptied(), None, &mut cache).unwrap();
    assert_eq!(
        nodeports(&second, Backend::IptablesNft),
        nft,
        "the nft dump was replayed"
    );
    assert_eq!(
        nodeports(&second, Backend::IptablesLegacy),
        0,
        "legacy is always read"
    );
    assert!(
        status(&second, "iptables-nft-save.txt")
            .notes
            .iter()
            .any(|n| n.contains("not read again")),
        "a replay says so: {:#?}",
        second.sources
    );
    let mut second = second;
    cache.keep(std::mem::take(&mut second.observed.dumps));

    // Without permission the dump is read, and what it says now is what counts.
    cache.allow_reuse(&[]);
    let third = read_input_cached(&emptied(), None, &mut cache).unwrap();
    assert_eq!(nodeports(&third, Backend::IptablesNft), 0);
}

#[test]
fn a_dump_not_read_whole_is_never_replayed() {
    let b = "duplicate-dnat-30080";
    let mut cache = RuleCache::keeping(&NF_TABLES_DUMPS);
    let timed_out = Scripted::default().with(
        "iptables-nft-save.txt",
        InputState::TimedOut,
        &testdata(b, "iptables-nft-save.txt"),
    );
    if let Ok(mut read) = read_input_cached(&timed_out, None, &mut cache) {
        cache.keep(std::mem::take(&mut read.observed.dumps));
    }
    cache.allow_reuse(&NF_TABLES_DUMPS);
    let now_fine = Scripted::default().with(
        "iptables-nft-save.txt",
        InputState::Ok,
        &testdata(b, "iptables-nft-save.txt"),
    );
    let again = read_input_cached(&now_fine, None, &mut cache).unwrap();
    assert_eq!(status(&again, "iptables-nft-save.txt").status, InputState::Ok);
    assert!(
        !status(&again, "iptables-nft-save.txt")
            .notes
            .iter()
            .any(|n| n.contains("not read again"))
    );
}

/// The live node's kube-proxy endpoints alone; every other file is not there.
struct KubeProxyOnly(crate::sources::live::LiveNode);

impl Source for KubeProxyOnly {
    fn fetch<T, R, F>(&self, input: Input, consume: F) -> Fetched<Read<T, R>>
    where
        T: Send + 'static,
        R: RuleAnswer,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
    {
        if matches!(input, Input::KubeProxyHealthz | Input::KubeProxyMode) {
            self.0.fetch(input, consume)
        } else {
            Fetched::not_present()
        }
    }

    fn label(&self, input: Input) -> String {
        self.0.label(input)
    }
}

/// A loopback port that answers every request with `status` and an empty JSON body.
fn answering(status: &'static str) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
            );
        }
    });
    addr
}

/// A loopback port where nothing listens (free a moment ago: connections are refused).
fn silent() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Over real loopback HTTP: a kube-proxy that is down answers neither endpoint, which is
/// said as such (not as an unknown); one that answers 503 answered, unhealthy; an
/// endpoint turned off is not asked.
#[test]
fn kube_proxys_endpoints_are_answered_unanswered_or_not_asked() {
    use crate::heart::observed::KubeProxyAnswered;
    use crate::sources::live::{LiveConfig, LiveNode};
    let read = |healthz, metrics| {
        let config = LiveConfig {
            kube_proxy_healthz: healthz,
            kube_proxy_metrics: metrics,
            ..LiveConfig::default()
        };
        read_input(&KubeProxyOnly(LiveNode::new(config)), None).unwrap()
    };

    let down = read(Some(silent()), Some(silent()));
    assert_eq!(
        down.observed.kube_proxy_answered,
        KubeProxyAnswered {
            healthz: Some(false),
            proxy_mode: Some(false)
        }
    );
    assert_eq!(down.observed.kube_proxy_health, None);
    assert_eq!(status(&down, HEALTHZ_FILE).status, InputState::Error);

    let unhealthy = read(Some(answering("503 Service Unavailable")), None);
    assert_eq!(
        unhealthy.observed.kube_proxy_answered,
        KubeProxyAnswered {
            healthz: Some(true),
            proxy_mode: None
        }
    );
    assert!(!unhealthy.observed.kube_proxy_health.unwrap().healthy);

    let off = read(None, Some(silent()));
    assert_eq!(
        off.observed.kube_proxy_answered,
        KubeProxyAnswered {
            healthz: None,
            proxy_mode: Some(false)
        }
    );
}

#[test]
fn a_bundle_that_does_not_exist_is_said_so_and_a_file_is_not_a_directory() {
    let err = read_bundle(std::path::Path::new("/nonexistent/bundle"), None).unwrap_err();
    assert!(matches!(err, SnapshotError::NotFound(_)), "{err}");
    assert!(err.to_string().contains("does not exist"), "{err}");
    let file = tempfile::NamedTempFile::new().unwrap();
    let err = read_bundle(file.path(), None).unwrap_err();
    assert!(matches!(err, SnapshotError::NotADirectory(_)), "{err}");
}
