//! The live scan, on real kernels: every incident bundle's node is built live in a
//! private network namespace (real iptables-restore / nft / listening sockets, by
//! `scripts/capture-testdata.sh --exec`), and `portdrift scan` there, reading the node
//! as a hostNetwork pod would, gives the bundle's expected findings; `snapshot --out`
//! of the same namespace, scanned offline, gives the same again. Then the ways a tool
//! goes wrong: missing, hung, failing, too talkative. None of them fails the scan.
//!
//! Needs root (CI runs as root and must not skip these). Nothing touches the host's
//! own network namespace.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use support::source;

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

const PORTDRIFT: &str = env!("CARGO_BIN_EXE_portdrift");

/// The dump tools portdrift runs.
const TOOLS: [&str; 5] = [
    "iptables-nft-save",
    "iptables-legacy-save",
    "ip6tables-nft-save",
    "ip6tables-legacy-save",
    "nft",
];

/// Runs `cmd` inside the namespaces built from `bundle`'s sources.
fn in_bundle_node(bundle: &str, cmd: &[&str]) -> Output {
    let out = Command::new("bash")
        .arg(support::root().join("scripts/capture-testdata.sh"))
        .args(["--exec", bundle, "--"])
        .args(cmd)
        .output()
        .expect("the capture script runs");
    // Status 0 or 1 are portdrift's; anything else is the setup failing (or a crash).
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{bundle}: {cmd:?} exited {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs portdrift in a fresh, empty network namespace.
fn in_empty_node(path: &Path, args: &[&str]) -> Output {
    Command::new("unshare")
        .arg("-n")
        .arg("env")
        .arg(format!("PATH={}", path.display()))
        .arg(PORTDRIFT)
        .args(args)
        .output()
        .expect("unshare runs")
}

fn json(text: &[u8], what: &str) -> Value {
    serde_json::from_slice(text)
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {}", String::from_utf8_lossy(text)))
}

fn bundle_node(bundle: &str) -> String {
    std::fs::read_to_string(support::root().join("testdata").join(bundle).join("node"))
        .unwrap()
        .trim()
        .to_string()
}

fn findings(report: &Value) -> std::collections::BTreeMap<support::FindingKey, usize> {
    support::finding_multiset(report["findings"].as_array().map(Vec::as_slice).unwrap_or(&[]))
}

fn actionable(report: &Value) -> bool {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["severity"] == "critical" || f["severity"] == "warning")
}

/// A directory of symlinks to the real dump tools, less `without`, plus `fakes`
/// (name → shell script).
fn tool_dir(without: &[&str], fakes: &[(&str, &str)]) -> TempDir {
    let dir = TempDir::new().unwrap();
    for tool in TOOLS {
        if without.contains(&tool) || fakes.iter().any(|(n, _)| *n == tool) {
            continue;
        }
        let real = which(tool).unwrap_or_else(|| panic!("{tool} is not installed"));
        symlink(real, dir.path().join(tool)).unwrap();
    }
    for (name, script) in fakes {
        let path = dir.path().join(name);
        // portdrift runs it with the test's bare PATH: the script brings its own.
        std::fs::write(&path, format!("#!/bin/sh\nPATH=/usr/bin:/bin\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// The sh script that runs $PD_BEFORE in the prepared node when set (its failure is
/// exit status 9, the setup's), scans the node (JSON to $1, exit status to $1.code),
/// then snapshots it into $2. Extra scan flags follow (and `--bpf-root` when the bundle's
/// node has Cilium's maps).
const SCAN_AND_SNAPSHOT: &str = r#"
pd=$0 out=$1 snap=$2; shift 2
if [ -n "${PD_BEFORE:-}" ]; then sh -ec "$PD_BEFORE" || exit 9; fi
node=$(cat "$BUNDLE/node")
if [ -n "${PD_PATH:-}" ]; then pd="env PATH=$PD_PATH $pd"; fi
if [ -n "${BPF_ROOT:-}" ]; then set -- --bpf-root "$BPF_ROOT" "$@"; fi
$pd scan --cluster-state "$BUNDLE/cluster.json" --node "$node" --format json "$@" >"$out"
echo $? >"$out.code"
$pd snapshot --out "$snap" --cluster-state "$BUNDLE/cluster.json" --node "$node" "$@" >"$snap.log" 2>&1
echo $? >"$snap.code"
"#;

struct Scanned {
    live: Value,
    live_code: i32,
    snapshot: PathBuf,
    elapsed: Duration,
    _scratch: TempDir,
}

/// Builds `bundle`'s node, scans it live and snapshots it; with `path` as PATH when given.
fn scan_live(bundle: &str, path: Option<&Path>, extra: &[&str]) -> Scanned {
    scan_live_after(bundle, "", path, extra)
}

/// [`scan_live`], once the shell commands `before` have run in the node.
fn scan_live_after(bundle: &str, before: &str, path: Option<&Path>, extra: &[&str]) -> Scanned {
    let scratch = TempDir::new().unwrap();
    let out = scratch.path().join("live.json");
    let snap = scratch.path().join("snapshot");
    // PD_PATH: the PATH portdrift alone runs with (the script needs its own).
    let mut cmd: Vec<String> = vec![
        "env".into(),
        format!(
            "PD_PATH={}",
            path.map(|p| p.display().to_string()).unwrap_or_default()
        ),
        format!("PD_BEFORE={before}"),
    ];
    cmd.extend([
        "/bin/sh".into(),
        "-c".into(),
        SCAN_AND_SNAPSHOT.into(),
        PORTDRIFT.into(),
    ]);
    cmd.push(out.display().to_string());
    cmd.push(snap.display().to_string());
    cmd.extend(extra.iter().map(|s| s.to_string()));
    let start = Instant::now();
    let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
    in_bundle_node(bundle, &args);
    let elapsed = start.elapsed();
    let code = |p: &Path| -> i32 {
        std::fs::read_to_string(p)
            .unwrap_or_else(|e| panic!("{bundle}: {}: {e}", p.display()))
            .trim()
            .parse()
            .unwrap()
    };
    let snap_code = code(&scratch.path().join("snapshot.code"));
    assert_eq!(
        snap_code,
        0,
        "{bundle}: snapshot failed: {}",
        std::fs::read_to_string(scratch.path().join("snapshot.log")).unwrap_or_default()
    );
    Scanned {
        live: json(&std::fs::read(&out).unwrap(), bundle),
        live_code: code(&scratch.path().join("live.json.code")),
        snapshot: snap,
        elapsed,
        _scratch: scratch,
    }
}

fn bundles_with_sources() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(support::root().join("testdata"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| support::built_from_sources(p))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Checks one bundle: the live scan gives the expected findings, the exit status
/// follows them, and the snapshot scanned offline gives the same findings.
fn check_bundle(bundle: &str) -> Result<Duration, String> {
    let s = scan_live(bundle, None, &[]);
    let dir = support::root().join("testdata").join(bundle);
    support::compare_with_expected(&dir, &s.live).map_err(|e| format!("live scan: {e}"))?;
    if s.live_code != i32::from(actionable(&s.live)) {
        return Err(format!("{bundle}: live scan exited {}", s.live_code));
    }
    if s.live["node"] != bundle_node(bundle) {
        return Err(format!("{bundle}: node {}", s.live["node"]));
    }
    let nft = source(&s.live, "iptables-nft-save.txt");
    // Read over netlink by default (the tool is the fallback; tests/iptables_netlink.rs
    // shows both give the same).
    if nft["origin"] != "netlink: nf_tables ip (iptables-nft)" || nft["status"] != "ok" {
        return Err(format!("{bundle}: iptables-nft-save status {nft}"));
    }
    let (code, offline) = support::scan_json(&s.snapshot, &[]);
    if findings(&offline) != findings(&s.live) || code != s.live_code {
        return Err(format!(
            "{bundle}: the snapshot's findings differ from the live scan's:\n  live: {:#?}\n  snapshot: {:#?}",
            findings(&s.live),
            findings(&offline)
        ));
    }
    // Each source read the same way, live and from the snapshot (which records no
    // processes: socket owners are a live-only source).
    let states = |r: &Value| -> Vec<(String, String)> {
        r["sources"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["source"] != "socket owners")
            .map(|s| (s["source"].to_string(), s["status"].to_string()))
            .collect()
    };
    if states(&offline) != states(&s.live) {
        return Err(format!(
            "{bundle}: source states differ:\n  live: {:?}\n  snapshot: {:?}",
            states(&s.live),
            states(&offline)
        ));
    }
    Ok(s.elapsed)
}

#[test]
fn every_bundle_built_live_gives_its_expected_findings_and_so_does_its_snapshot() {
    if !support::require_root("live scans of the bundles") {
        return;
    }
    let bundles = bundles_with_sources();
    assert!(
        bundles.len() >= 11,
        "found {} bundles with sources",
        bundles.len()
    );
    // One namespace per bundle, so they run side by side.
    let results: Vec<(String, Result<Duration, String>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = bundles
            .iter()
            .map(|b| (b.clone(), scope.spawn(move || check_bundle(b))))
            .collect();
        handles
            .into_iter()
            .map(|(b, h)| (b, h.join().unwrap_or_else(|_| Err("panicked".into()))))
            .collect()
    });
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(b, r)| r.as_ref().err().map(|e| format!("{b}: {e}")))
        .collect();
    for (b, r) in &results {
        if let Ok(d) = r {
            eprintln!("{b}: built, scanned and snapshotted in {d:.1?}");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_missing_tool_is_absent_and_the_scan_goes_on() {
    if !support::require_root("live scan without iptables-legacy-save") {
        return;
    }
    let tools = tool_dir(&["iptables-legacy-save"], &[]);
    let s = scan_live("duplicate-dnat-30080", Some(tools.path()), &[]);
    support::compare_with_expected(&support::root().join("testdata/duplicate-dnat-30080"), &s.live).unwrap();
    assert_eq!(s.live_code, 1);
    let legacy = source(&s.live, "iptables-legacy-save.txt");
    assert_eq!(legacy["status"], "absent", "{legacy}");
    assert_eq!(legacy["backend"], "iptables-legacy");
    assert!(
        legacy["notes"][0].as_str().unwrap().contains("not on PATH"),
        "{legacy}"
    );
    // The bundle records it, and its scan reports it the same way.
    let manifest = json(
        &std::fs::read(s.snapshot.join("snapshot.json")).unwrap(),
        "manifest",
    );
    let entry = manifest["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["source"] == "iptables-legacy-save.txt")
        .unwrap();
    assert_eq!(entry["status"], "absent");
    assert_eq!(entry["file"], false);
    let (_, offline) = support::scan_json(&s.snapshot, &[]);
    assert_eq!(source(&offline, "iptables-legacy-save.txt")["status"], "absent");
}

#[test]
fn a_hung_tool_times_out_and_changes_nothing_else() {
    if !support::require_root("live scan with a hung tool") {
        return;
    }
    // A tool that prints a header and hangs in a child process: the watchdog must kill
    // the whole process group, or the child would hold the pipe open.
    let tools = tool_dir(
        &[],
        &[(
            "ip6tables-nft-save",
            "echo '# Generated by ip6tables-nft-save v1.8.9 (nf_tables)'; sleep 30; echo done",
        )],
    );
    // The tools, not the netlink reader: the faults are the tools'.
    let s = scan_live(
        "duplicate-dnat-30080",
        Some(tools.path()),
        &["--tool-timeout", "400ms", "--iptables-via", "save"],
    );
    support::compare_with_expected(&support::root().join("testdata/duplicate-dnat-30080"), &s.live).unwrap();
    assert_eq!(s.live_code, 1, "the exit status follows the findings only");
    let hung = source(&s.live, "ip6tables-nft-save.txt");
    assert_eq!(hung["status"], "timed-out", "{hung}");
    assert!(hung["notes"][0].as_str().unwrap().contains("400ms"), "{hung}");
    // Scan and snapshot each waited 0.4 s for it, plus setup: far from the 30 s the tool
    // would hang, with room for a loaded machine.
    assert!(s.elapsed < Duration::from_secs(20), "took {:?}", s.elapsed);

    // On an empty node: nothing found, but the hung tool's backend was not read: exit 3,
    // and the coverage says which.
    let tools = tool_dir(&[], &[("iptables-nft-save", "sleep 30")]);
    let start = Instant::now();
    let out = in_empty_node(
        tools.path(),
        &[
            "scan",
            "--format",
            "json",
            "--tool-timeout",
            "300ms",
            "--iptables-via",
            "save",
        ],
    );
    let elapsed = start.elapsed();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&out.stdout, "empty node");
    assert_eq!(report["coverage"]["complete"], false);
    let not_checked = report["coverage"]["not_checked"].to_string();
    assert!(
        not_checked.contains("iptables-nft-save could not be read (timed-out"),
        "{not_checked}"
    );
    assert_eq!(source(&report, "iptables-nft-save.txt")["status"], "timed-out");
    assert_eq!(source(&report, "iptables-legacy-save.txt")["status"], "empty");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
}

#[test]
fn a_failing_tool_is_reported_with_its_complaint() {
    if !support::require_root("live scan with a failing tool") {
        return;
    }
    let complaint = "iptables-legacy-save v1.8.9 (legacy): Could not fetch rule set generation id: Permission denied (you must be root)";
    let tools = tool_dir(
        &[],
        &[("iptables-legacy-save", &format!("echo '{complaint}' >&2; exit 1"))],
    );
    let s = scan_live("duplicate-dnat-30080", Some(tools.path()), &[]);
    support::compare_with_expected(&support::root().join("testdata/duplicate-dnat-30080"), &s.live).unwrap();
    let failed = source(&s.live, "iptables-legacy-save.txt");
    assert_eq!(failed["status"], "failed", "{failed}");
    let notes = failed["notes"].to_string();
    assert!(notes.contains("exit status 1"), "{notes}");
    assert!(
        notes.contains("Could not fetch rule set generation id"),
        "{notes}"
    );
    let (_, offline) = support::scan_json(&s.snapshot, &[]);
    assert_eq!(
        source(&offline, "iptables-legacy-save.txt")["notes"],
        failed["notes"]
    );
}

#[test]
fn a_dump_over_the_output_limit_is_too_large() {
    if !support::require_root("live scan with a small output limit") {
        return;
    }
    let s = scan_live("duplicate-dnat-30080", None, &["--tool-max-output", "2K"]);
    let nft = source(&s.live, "iptables-nft-save.txt");
    assert_eq!(nft["status"], "too-large", "{nft}");
    // Without a dump it can trust, nothing is concluded about its rules.
    assert!(
        s.live["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["kind"] != "missing-rule"),
        "{:#}",
        s.live["findings"]
    );
    let captured = std::fs::metadata(s.snapshot.join("iptables-nft-save.txt"))
        .unwrap()
        .len();
    assert_eq!(
        captured, 2048,
        "the snapshot keeps what was printed up to the limit"
    );
    let (code, offline) = support::scan_json(&s.snapshot, &[]);
    assert_eq!(source(&offline, "iptables-nft-save.txt")["status"], "too-large");
    assert_eq!(findings(&offline), findings(&s.live));
    assert_eq!(code, s.live_code);
}

#[test]
fn the_text_report_of_a_live_scan_names_the_tools() {
    if !support::require_root("live text report") {
        return;
    }
    let tools = tool_dir(&["ip6tables-legacy-save"], &[]);
    let out = in_empty_node(
        tools.path(),
        &[
            "scan",
            "--kube-proxy-healthz",
            "off",
            "--kube-proxy-metrics",
            "off",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // A node with no proxy rules and no cluster state found nothing, and says that is
    // not an all-clear: exit 3, what was not checked first.
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.starts_with("portdrift: node "), "{text}");
    assert!(
        text.lines().next().unwrap().contains("INCOMPLETE CHECK"),
        "{text}"
    );
    assert!(
        text.contains("No Service proxy's NodePort rules were found"),
        "{text}"
    );
    assert!(text.contains("The cluster state was not read"), "{text}");
    assert!(!text.contains("No drift"), "{text}");
    assert!(text.contains("proxy mode: none"), "{text}");
    // iptables-nft's and kube-proxy's nftables tables are read over netlink (the dump
    // tools are the fallback).
    assert!(text.contains("netlink: nf_tables ip (iptables-nft)"), "{text}");
    assert!(text.contains("netlink: nf_tables ip|ip6 kube-proxy"), "{text}");
    assert!(text.contains("/proc/net/tcp"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("ip6tables-legacy-save ") && l.contains(" absent")),
        "{text}"
    );
    assert!(!text.contains("healthz"), "{text}");
}

#[test]
fn a_squatter_is_named_by_its_process() {
    if !support::require_root("naming a squatter") {
        return;
    }
    let scanned = scan_live("haproxy-squatter", None, &[]);
    let squatters: Vec<&Value> = scanned.live["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "squatter")
        .collect();
    let on = |port: u64| {
        squatters
            .iter()
            .find(|f| f["port"] == port)
            .unwrap_or_else(|| panic!("no squatter on {port}: {squatters:?}"))
    };
    for (port, name) in [(30080, "haproxy"), (31514, "fluent-bit")] {
        let process = &on(port)["process"];
        assert_eq!(process["name"], name, "{process}");
        assert!(process["pid"].as_u64().is_some_and(|p| p > 1), "{process}");
        // A host daemon, not a container.
        assert!(process["container"].is_null(), "{process}");
    }
    let owners = source(&scanned.live, "socket owners");
    assert_eq!(owners["status"], "ok", "{owners}");
}

#[test]
fn an_ephemeral_port_range_over_the_nodeport_range_is_a_hazard() {
    if !support::require_root("the port-range hazard") {
        return;
    }
    // Sysctls are per network namespace: widen this node's ephemeral range only.
    let script = r#"
set -e
pd=$1
echo 30000 60999 >/proc/sys/net/ipv4/ip_local_port_range
"$pd" scan --format json --kube-proxy-healthz off >"$2" || true
echo 30000-32767 >/proc/sys/net/ipv4/ip_local_reserved_ports
"$pd" scan --format json --kube-proxy-healthz off >"$3" || true
"#;
    let scratch = TempDir::new().unwrap();
    let (open, reserved) = (
        scratch.path().join("open.json"),
        scratch.path().join("reserved.json"),
    );
    in_bundle_node(
        "udp-stale-endpoint",
        &[
            "/bin/sh",
            "-c",
            script,
            "sh",
            PORTDRIFT,
            open.to_str().unwrap(),
            reserved.to_str().unwrap(),
        ],
    );
    let kinds = |p: &Path| -> Vec<String> {
        json(&std::fs::read(p).unwrap(), "scan")["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["kind"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        kinds(&open).contains(&"port-range-overlap".to_string()),
        "{:?}",
        kinds(&open)
    );
    assert!(
        !kinds(&reserved).contains(&"port-range-overlap".to_string()),
        "{:?}",
        kinds(&reserved)
    );
}

#[test]
fn the_live_scan_reads_the_cluster_state_from_the_api_server() {
    if !support::require_root("live scans against the API server") {
        return;
    }
    // Inside the node's namespace: serve the bundle's cluster.json over the real
    // list/watch protocol, then scan with nothing but a kubeconfig.
    let script = r#"
set -e
pd=$1; fake=$2; dir=$3; out=$4; node=$5
(sleep 120 | "$fake" --objects "$BUNDLE/cluster.json" --dir "$dir" 2>"$dir/server.log") &
for _ in $(seq 100); do [ -f "$dir/kubeconfig" ] && break; sleep 0.1; done
# A node with Cilium's maps has them in its own BPF filesystem.
if [ -n "${BPF_ROOT:-}" ]; then set -- --bpf-root "$BPF_ROOT"; else set --; fi
"$pd" scan --format json --kube-proxy-healthz off --node "$node" --kubeconfig "$dir/kubeconfig" "$@" >"$out" 2>"$out.err" || true
"$pd" snapshot --out "$dir/snap" --kube-proxy-healthz off --node "$node" --kubeconfig "$dir/kubeconfig" "$@" >/dev/null 2>"$out.snap.err"
"$pd" scan --from "$dir/snap" --format json >"$out.offline" || true
"#;
    let fake = support::fake_apiserver_bin();
    for bundle in bundles_with_sources() {
        let bundle = bundle.as_str();
        let scratch = TempDir::new().unwrap();
        let out = scratch.path().join("scan.json");
        let node = bundle_node(bundle);
        in_bundle_node(
            bundle,
            &[
                "/bin/sh",
                "-c",
                script,
                "sh",
                PORTDRIFT,
                fake.to_str().unwrap(),
                scratch.path().to_str().unwrap(),
                out.to_str().unwrap(),
                &node,
            ],
        );
        let text = std::fs::read(&out).unwrap_or_default();
        let report = json(&text, bundle);
        let api = source(&report, "cluster (API server)");
        assert_eq!(
            api["status"],
            "ok",
            "{bundle}: {api}\n{}",
            std::fs::read_to_string(out.with_extension("json.err")).unwrap_or_default()
        );
        let dir = support::root().join("testdata").join(bundle);
        if let Err(e) = support::compare_with_expected(&dir, &report) {
            panic!("{bundle}: from the API server: {e}");
        }
        // The snapshot wrote the API's objects as its cluster.json: offline, the same.
        let offline = json(
            &std::fs::read(out.with_extension("json.offline")).unwrap_or_default(),
            bundle,
        );
        if let Err(e) = support::compare_with_expected(&dir, &offline) {
            panic!(
                "{bundle}: snapshot of the API's state: {e}\n{}",
                std::fs::read_to_string(out.with_extension("json.snap.err")).unwrap_or_default()
            );
        }
    }
}

/// A DNAT to nowhere in kube-proxy's chains, loaded into the kernel in both iptables
/// backends (what a mismatched iptables binary leaves): a malformed-rule warning from
/// each, read over netlink and with the legacy tool, with no cluster state at all.
#[test]
fn a_rule_kube_proxy_never_writes_is_found_in_either_backend() {
    if !support::require_root("malformed rules in the kernel") {
        return;
    }
    let dir = TempDir::new().unwrap();
    let rules = dir.path().join("rules");
    std::fs::write(
        &rules,
        "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-NODEPORTS - [0:0]\n:KUBE-SEP-AAAAAAAAAAAAAAAA - [0:0]\n\
         -A KUBE-SEP-AAAAAAAAAAAAAAAA -p tcp -m tcp -j DNAT --to-destination 0.0.0.0:0\n\
         -A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\nCOMMIT\n",
    )
    .unwrap();
    let out = dir.path().join("scan.json");
    support::run_in_fresh_netns(
        "malformed rules",
        &format!(
            "set -e; ip link set lo up; iptables-nft-restore < {rules}; iptables-legacy-restore -w < {rules}; \
             {PORTDRIFT} scan --format json --kube-proxy-healthz off --kube-proxy-metrics off > {out} || [ $? -eq 1 ]",
            rules = rules.display(),
            out = out.display()
        ),
    );
    let report = json(&std::fs::read(&out).unwrap(), "malformed rules");
    let malformed: Vec<&Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "malformed-rule")
        .collect();
    let backends: Vec<&str> = malformed.iter().map(|f| f["backend"].as_str().unwrap()).collect();
    assert_eq!(backends, ["iptables-nft", "iptables-legacy"], "{report:#}");
    for f in malformed {
        assert_eq!(f["severity"], "warning");
        assert!(
            f["rule"]
                .as_str()
                .unwrap()
                .ends_with("-j DNAT --to-destination 0.0.0.0:0"),
            "{f}"
        );
    }
}

/// Builds `bundle`'s node, runs `break_it` in it, then scans it live and snapshots it:
/// its one critical finding (the snapshot's findings must agree).
fn scan_broken(bundle: &str, break_it: &str) -> Value {
    let s = scan_live_after(
        bundle,
        break_it,
        None,
        &["--kube-proxy-healthz", "off", "--kube-proxy-metrics", "off"],
    );
    assert_eq!(s.live_code, 1, "{bundle}: {:#}", s.live);
    let criticals: Vec<&Value> = s.live["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "critical")
        .collect();
    assert_eq!(criticals.len(), 1, "{bundle}: {criticals:#?}");
    let (offline_code, offline) = support::scan_json(&s.snapshot, &[]);
    assert_eq!(
        (offline_code, findings(&offline)),
        (1, findings(&s.live)),
        "{bundle}: the snapshot"
    );
    criticals[0].clone()
}

#[test]
fn nodeport_rules_no_packet_reaches_are_one_critical_finding() {
    // kube-proxy's rules for every NodePort are in place, but the rule that leads packets
    // to them is gone: no NodePort works on the node, which had been reported as no drift.
    if !support::require_root("unreached NodePort rules") {
        return;
    }
    for (bundle, break_it, backend, says) in [
        // iptables: KUBE-SERVICES's last rule, the jump to KUBE-NODEPORTS.
        (
            "clean-iptables",
            "last=$(iptables-nft -t nat -S KUBE-SERVICES | grep -c '^-A'); \
             iptables-nft -t nat -S KUBE-SERVICES | tail -n 1 | grep -q -- '-j KUBE-NODEPORTS'; \
             iptables-nft -t nat -D KUBE-SERVICES \"$last\"",
            "iptables-nft",
            "lacks kube-proxy's nat KUBE-SERVICES -j KUBE-NODEPORTS, so no packet reaches",
        ),
        // nftables, read over netlink: the `services` rule that looks up service-nodeports.
        (
            "clean-nftables",
            "handle=$(nft -a list chain ip kube-proxy services | sed -n 's/.*vmap @service-nodeports # handle //p'); \
             [ -n \"$handle\" ]; nft delete rule ip kube-proxy services handle \"$handle\"",
            "nftables",
            "vmap @service-nodeports` (in chain services), so no packet reaches",
        ),
    ] {
        let f = scan_broken(bundle, break_it);
        assert_eq!(
            (&f["kind"], &f["backend"], &f["family"], &f["port"]),
            (
                &"missing-rule".into(),
                &backend.into(),
                &"ipv4".into(),
                &Value::Null
            ),
            "{f:#}"
        );
        assert!(f["message"].as_str().unwrap().contains(says), "{f:#}");
    }
}

/// A squatter whose command line holds a token, started in the bundle's node.
const TOKEN_SQUATTER: &str = r#"python3 -c 'import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 31080)); s.listen(); time.sleep(120)' --api-token=SUPERSECRET123 --password hunter2 >/dev/null 2>&1 &
for i in $(seq 50); do grep -qi ':7968 ' /proc/net/tcp && exit 0; sleep 0.1; done; exit 1"#;

#[test]
fn a_squatters_secrets_never_reach_the_report() {
    if !support::require_root("a squatter's command line") {
        return;
    }
    let squatter = |scanned: &Scanned| -> Value {
        scanned.live["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["kind"] == "squatter" && f["port"] == 31080)
            .unwrap_or_else(|| panic!("no squatter on 31080: {:#}", scanned.live["findings"]))["process"]
            .clone()
    };
    // By default the process is named without its arguments.
    let plain = scan_live_after("haproxy-squatter", TOKEN_SQUATTER, None, &[]);
    let process = squatter(&plain);
    assert_eq!(process["name"], "python3", "{process}");
    assert!(process["cmdline"].is_null(), "{process}");
    assert_eq!(process["uid"], 0, "{process}");
    assert!(
        process["exe"].as_str().is_some_and(|e| e.contains("python3")),
        "{process}"
    );
    // Asked for, the arguments come with every secret-looking value redacted.
    let argv = scan_live_after("haproxy-squatter", TOKEN_SQUATTER, None, &["--process-argv"]);
    let process = squatter(&argv);
    let cmdline = process["cmdline"].as_str().unwrap_or_else(|| panic!("{process}"));
    assert!(
        cmdline.ends_with("--api-token=<redacted> --password <redacted>"),
        "{cmdline}"
    );
    for scanned in [&plain, &argv] {
        let text = scanned.live.to_string();
        assert!(
            !text.contains("SUPERSECRET123") && !text.contains("hunter2"),
            "{text}"
        );
        // Nor in the snapshot, which is passed around.
        let snapshot = std::fs::read_dir(&scanned.snapshot).unwrap();
        for entry in snapshot.flatten() {
            if let Ok(bytes) = std::fs::read(entry.path()) {
                assert!(
                    !String::from_utf8_lossy(&bytes).contains("SUPERSECRET123"),
                    "{}",
                    entry.path().display()
                );
            }
        }
    }
}
