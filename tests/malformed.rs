//! Bad input gets a clear error or unparsed-line findings, exit status 2 at worst, and
//! never a panic.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::fs;

use portdrift_test_support::files::copy_dir;
use tempfile::TempDir;

fn bundle(files: &[(&str, &[u8])]) -> TempDir {
    let dir = TempDir::new().unwrap();
    for (name, content) in files {
        let path = dir.path().join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }
    dir
}

fn clean_dump() -> String {
    fs::read_to_string(support::root().join("testdata/duplicate-dnat-30080/iptables-nft-save.txt")).unwrap()
}

/// `testdata/clean-iptables` scanned with only the items of its cluster state that
/// `keep` keeps, as a list cut down by kubectl's flags would hold.
fn scan_clean_keeping(keep: impl Fn(&serde_json::Value) -> bool) -> (i32, serde_json::Value) {
    let dir = TempDir::new().unwrap();
    copy_dir(&support::root().join("testdata/clean-iptables"), dir.path());
    let path = dir.path().join("cluster.json");
    let mut list: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    list["items"].as_array_mut().unwrap().retain(|i| keep(i));
    fs::write(&path, serde_json::to_vec(&list).unwrap()).unwrap();
    support::scan_json(dir.path(), &[])
}

/// The kinds of a JSON report's findings, in its order.
fn finding_kinds(report: &serde_json::Value) -> Vec<&str> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect()
}

fn run(dir: &TempDir) -> (i32, String, String) {
    let out = support::portdrift(&["scan", "--from", dir.path().to_str().unwrap(), "--format", "json"]);
    let code = out.status.code().expect("exited normally");
    (
        code,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_truncated_dump_is_reported_partial_not_trusted() {
    let dump = clean_dump();
    let cut = &dump[..dump.len() / 2];
    let dir = bundle(&[("iptables-nft-save.txt", cut.as_bytes())]);
    let (code, stdout, stderr) = run(&dir);
    assert!(code <= 2, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let src = &report["sources"][0];
    assert_eq!(src["status"], "partial", "{src}");
    assert!(src["notes"].to_string().contains("truncated"), "{src}");
}

#[test]
fn random_bytes_are_refused_and_a_huge_line_becomes_an_unparsed_finding() {
    // Random bytes are not a dump: refused whole, in one sentence (exit 3).
    let garbage: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let dir = bundle(&[("iptables-nft-save.txt", &garbage)]);
    let (code, stdout, stderr) = run(&dir);
    assert_eq!(code, 3, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["sources"][0]["status"], "error", "{stdout}");
    assert!(report["findings"].as_array().unwrap().is_empty(), "{stdout}");

    // A text dump with an 8 MiB line in it is read: the line is one finding, cut short.
    let mut dump = clean_dump().into_bytes();
    dump.extend(std::iter::repeat_n(b'x', 8 * 1024 * 1024));
    dump.push(b'\n');
    let dir = bundle(&[("iptables-nft-save.txt", &dump)]);
    let (code, stdout, stderr) = run(&dir);
    assert_eq!(code, 1, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let unparsed: Vec<&serde_json::Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "unparsed-rule")
        .collect();
    assert_eq!(unparsed.len(), 1, "{stdout}");
    assert!(
        stdout.len() < 1_000_000,
        "the report stays readable: {} bytes",
        stdout.len()
    );
}

#[test]
fn bad_cluster_json_is_a_clear_error_with_status_2() {
    let dump = clean_dump();
    for bad in [
        &b"{\"kind\": \"List\", \"items\": [ {"[..],
        b"not json at all",
        b"[1, 2, 3]",
        b"\xff\xfe",
    ] {
        let dir = bundle(&[("iptables-nft-save.txt", dump.as_bytes()), ("cluster.json", bad)]);
        let (code, _, stderr) = run(&dir);
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains("cluster.json"),
            "the error names the file: {stderr}"
        );
    }
}

#[test]
fn api_objects_with_missing_fields_are_skipped_and_reported() {
    let dump = clean_dump();
    let cluster = br#"{"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nospec", "namespace": "a"}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "x", "namespace": "a", "labels": {"kubernetes.io/service-name": "web"}}},
        {"apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": 80, "nodePort": "thirty"}]}},
        {"kind": "Service"}
    ]}"#;
    let dir = bundle(&[
        ("iptables-nft-save.txt", dump.as_bytes()),
        ("cluster.json", cluster),
    ]);
    let (code, stdout, stderr) = run(&dir);
    assert!(code <= 1, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let cluster_status = support::source(&report, "cluster.json");
    assert_eq!(cluster_status["status"], "partial", "{cluster_status}");
}

#[test]
fn a_missing_or_empty_bundle_is_exit_2() {
    let out = support::portdrift(&["scan", "--from", "/nonexistent/bundle"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    let empty = TempDir::new().unwrap();
    let out = support::portdrift(&["scan", "--from", empty.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn odd_proc_net_lines_are_reported_not_fatal() {
    let dir = bundle(&[(
        "proc/net/tcp",
        b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000:7580 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0\n garbage line\n",
    )]);
    let (code, stdout, stderr) = run(&dir);
    // Nothing found in a bundle of one socket table is no all-clear: exit 3.
    assert_eq!(code, 3, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["sources"][0]["status"], "partial");
    assert!(
        report["coverage"]["not_checked"]
            .to_string()
            .contains("Some lines of proc/net/tcp could not be read"),
        "{report}"
    );
}

#[test]
fn a_listing_of_another_kind_is_refused_in_one_sentence() {
    // What people paste where the iptables-save dump belongs: the nft ruleset, its JSON,
    // an `iptables -L` listing. Each is one clear error, not a line-by-line flood, and
    // the check says it is incomplete (exit 3), never all-clear.
    let nft = fs::read(support::root().join("testdata/clean-nftables/nft.txt")).unwrap();
    let json = fs::read(support::root().join("testdata/clean-nftables/nft.json")).unwrap();
    let list = b"Chain KUBE-NODEPORTS (1 references)\ntarget     prot opt source               destination\nKUBE-EXT-X  tcp  --  0.0.0.0/0            0.0.0.0/0            tcp dpt:30080\n";
    // A capture that failed: the tool's error where its output belongs.
    let denied = b"iptables-save: Permission denied (you must be root)\n";
    let not_root = b"iptables v1.8.7 (nf_tables): Could not fetch rule set generation id: Permission denied (you must be root)\n\n";
    // Two commands' output in one paste: a save, then an `iptables -L` listing.
    let mut mixed = clean_dump().into_bytes();
    let listing_at = mixed.iter().filter(|&&b| b == b'\n').count() + 1;
    mixed.extend_from_slice(list);
    let at_listing = format!("line {listing_at}");
    for (dump, says, line) in [
        (&nft[..], "`nft list ruleset` listing", "line 1"),
        (&json[..], "JSON document", "line 1"),
        (&list[..], "`iptables -L` listing", "line 1"),
        (&denied[..], "a tool's error message", "line 1"),
        (&not_root[..], "the capture failed", "line 1"),
        (
            &mixed[..],
            "`iptables -L` listing inside an iptables-save dump",
            &at_listing,
        ),
    ] {
        let dir = bundle(&[("iptables-nft-save.txt", dump)]);
        let (code, stdout, stderr) = run(&dir);
        assert_eq!(code, 3, "{stderr}");
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let src = &report["sources"][0];
        assert_eq!(
            (&src["source"], &src["status"]),
            (&"iptables-nft-save.txt".into(), &"error".into())
        );
        let notes = src["notes"].to_string();
        assert!(
            notes.contains(&format!("not an iptables-save dump: {line} ")) && notes.contains(says),
            "{notes}"
        );
        assert_eq!(report["findings"].as_array().unwrap().len(), 0, "{stdout}");
        assert_eq!(report["coverage"]["complete"], false, "{}", report["coverage"]);
    }
}

#[test]
fn an_nft_dump_that_shows_part_of_the_table_proves_nothing_missing() {
    // `nft -t` (terse) and `nft list chains` print kube-proxy's maps without their
    // elements, where every NodePort lives: read as they are, every Service with
    // endpoints would be a missing rule and every chain an orphan. `nft list map` prints
    // the elements without the chains they lead to: every endpoint would be missing.
    // Captured from the real nft, from kube-proxy's table loaded into a private network
    // namespace.
    if !support::require_root("nft dumps without elements") || !support::require_tool("nft", "nft dumps") {
        return;
    }
    let work = TempDir::new().unwrap();
    let rules = support::root().join("testdata/clean-nftables/source/nft.rules");
    let w = work.path().display();
    support::run_in_fresh_netns(
        "nft listings",
        &format!(
            "set -e; nft -f {rules}; nft list ruleset > {w}/full.txt; nft -t list ruleset > {w}/terse.txt; \
             nft -j -t list ruleset > {w}/terse.json; nft list chains > {w}/chains.txt; \
             nft list map ip kube-proxy service-nodeports > {w}/map.txt",
            rules = rules.display()
        ),
    );
    let scan = |file: &str, as_name: &str| {
        let dir = work.path().join(format!("bundle-{file}"));
        copy_dir(&support::root().join("testdata/clean-nftables"), &dir);
        fs::remove_file(dir.join("nft.json")).unwrap();
        fs::remove_file(dir.join("nft.txt")).unwrap();
        fs::copy(work.path().join(file), dir.join(as_name)).unwrap();
        support::scan_json(&dir, &[])
    };
    // The whole listing of the same table is a complete, clean check: the bundle agrees.
    let (code, report) = scan("full.txt", "nft.txt");
    assert_eq!(
        (code, &report["coverage"]["complete"]),
        (0, &true.into()),
        "{report:#}"
    );
    for (file, as_name, says) in [
        ("terse.txt", "nft.txt", "leaves elements out"),
        ("terse.json", "nft.json", "leaves elements out"),
        ("chains.txt", "nft.txt", "leaves elements out"),
        ("map.txt", "nft.txt", "lead to chains the dump does not hold"),
    ] {
        let (code, report) = scan(file, as_name);
        assert_eq!(code, 3, "{file}: {report:#}");
        let kinds = finding_kinds(&report);
        assert!(
            !kinds
                .iter()
                .any(|k| ["missing-rule", "missing-endpoint", "orphan-chain"].contains(k)),
            "{file}: {kinds:?}"
        );
        let source = support::source(&report, as_name);
        assert_eq!(source["status"], "partial", "{file}: {source}");
        assert!(source["notes"].to_string().contains(says), "{file}: {source}");
    }
}

#[test]
fn a_cluster_state_without_endpointslices_compares_no_endpoint() {
    // `kubectl get services -A -o json` (or `services,endpoints`, the old objects) in
    // place of services and EndpointSlices: every DNAT would be to an address no slice
    // lists, hundreds of critical stale endpoints on a clean node.
    let (code, report) = scan_clean_keeping(|i| i["kind"] == "Service");
    assert_eq!(code, 3, "{report:#}");
    let kinds = finding_kinds(&report);
    assert!(
        !kinds
            .iter()
            .any(|k| k.contains("endpoint") || *k == "missing-rule"),
        "{kinds:?}"
    );
    let not_checked = report["coverage"]["not_checked"].to_string();
    assert!(
        not_checked.contains("but no EndpointSlice, as `kubectl get services -o json` prints"),
        "{not_checked}"
    );
}

#[test]
fn a_cluster_state_of_one_namespace_makes_no_other_port_stale() {
    // `kubectl get services,endpointslices -n ml -o json`: the other namespaces' NodePort
    // rules belong to Services the list leaves out, not to none.
    let (code, report) = scan_clean_keeping(|i| i["metadata"]["namespace"] == "ml");
    assert_eq!(code, 3, "{report:#}");
    let kinds = finding_kinds(&report);
    assert!(
        !kinds.iter().any(|k| k.starts_with("stale") || *k == "squatter"),
        "{kinds:?}"
    );
    let not_checked = report["coverage"]["not_checked"].to_string();
    assert!(
        not_checked.contains("lacks Service default/kubernetes"),
        "{not_checked}"
    );
}

#[test]
fn control_bytes_in_a_dump_are_printed_escaped_never_raw() {
    // A rule comment that would retitle (OSC 0 … BEL), recolour (CSI 31m), overwrite
    // (CR) and erase (BS) on the terminal of whoever reads the report.
    let dump = clean_dump().replace(
        "-A KUBE-NODEPORTS -p tcp -m tcp --dport 30080 -j DNAT",
        "-A KUBE-NODEPORTS -p tcp -m comment --comment \"\x1b]0;owned\x07\x1b[31mred\r\x08\u{9b}2J\" -m tcp --dport 30080 -j DNAT",
    );
    assert!(dump.contains('\x1b'), "the hand-written rule is in the dump");
    let dir = bundle(&[
        ("iptables-nft-save.txt", dump.as_bytes()),
        (
            "cluster.json",
            &fs::read(support::root().join("testdata/duplicate-dnat-30080/cluster.json")).unwrap(),
        ),
    ]);
    let out = support::portdrift(&["scan", "--from", dir.path().to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    let raw: Vec<char> = text.chars().filter(|&c| c.is_control() && c != '\n').collect();
    assert!(
        raw.is_empty(),
        "control characters reached the terminal: {raw:?}\n{text}"
    );
    assert!(
        text.contains(r#"--comment "\x1b]0;owned\x07\x1b[31mred\x0d\x08\x9b2J""#),
        "the comment is shown, escaped:\n{text}"
    );
    // The JSON keeps the comment as it was: JSON escapes it, and scripts compare it.
    let (_, json, _) = run(&dir);
    assert!(json.contains(r"\u001b]0;owned\u0007"), "{json}");
}

#[test]
fn a_file_that_is_not_text_is_refused_as_a_bad_capture() {
    // A real executable (this test's own binary), and text with a NUL byte in it, which
    // no iptables tool prints: each is one sentence naming the file, exit 3, no finding.
    let elf = fs::read(std::env::current_exe().unwrap()).unwrap();
    assert_eq!(&elf[..4], b"\x7fELF");
    let nul = clean_dump().replacen("COMMIT", "COMMIT\0", 1).into_bytes();
    for (what, bytes, quoted) in [
        ("an ELF file", &elf[..], r"\x7fELF"),
        ("text with a NUL", &nul[..], "# Generated"),
    ] {
        let dir = bundle(&[("iptables-nft-save.txt", bytes)]);
        let (code, stdout, stderr) = run(&dir);
        assert_eq!(code, 3, "{what}: {stderr}");
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let src = &report["sources"][0];
        assert_eq!(
            (&src["source"], &src["status"]),
            (&"iptables-nft-save.txt".into(), &"error".into()),
            "{what}"
        );
        let notes = src["notes"].to_string();
        assert!(
            notes.contains("begins binary data, not text") && notes.contains(quoted),
            "{what}: {notes}"
        );
        assert_eq!(
            report["findings"].as_array().unwrap().len(),
            0,
            "{what}: {stdout}"
        );
        let not_checked = report["coverage"]["not_checked"].to_string();
        assert!(
            not_checked.contains("iptables-nft-save.txt could not be read"),
            "{what}: the coverage names the file: {not_checked}"
        );
        // The text report quotes the start of the file escaped, not as raw bytes.
        let out = support::portdrift(&["scan", "--from", dir.path().to_str().unwrap()]);
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{what}: {text}"
        );
    }
}

#[test]
fn an_nft_listing_with_a_nul_byte_is_refused_as_a_bad_capture() {
    // kube-proxy's nftables table as `nft list ruleset` prints it, with one NUL byte
    // inserted: still valid UTF-8, and the parser would skip past it; nft never prints one.
    // The clean-nftables node read from its text listing alone (its nft.json left out).
    let node_with = |listing: &[u8]| {
        let dir = TempDir::new().unwrap();
        let copied = std::process::Command::new("cp")
            .arg("-a")
            .arg(support::root().join("testdata/clean-nftables/."))
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(copied.success());
        fs::remove_file(dir.path().join("nft.json")).unwrap();
        fs::write(dir.path().join("nft.txt"), listing).unwrap();
        dir
    };
    let listing = fs::read(support::root().join("testdata/clean-nftables/nft.txt")).unwrap();
    let (clean, _, stderr) = run(&node_with(&listing));
    assert_eq!(clean, 0, "the listing as captured is a clean node: {stderr}");
    let mut corrupted = listing.clone();
    corrupted.insert(200, 0);
    let (code, stdout, stderr) = run(&node_with(&corrupted));
    assert_eq!(code, 3, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let src = support::source(&report, "nft.txt");
    assert_eq!(src["status"], "error", "{src}");
    assert!(
        src["notes"].to_string().contains("a NUL byte at offset 200"),
        "{src}"
    );
    assert!(
        report["coverage"]["not_checked"]
            .to_string()
            .contains("nft.txt could not be read"),
        "{:#}",
        report["coverage"]
    );
}

#[test]
fn restore_input_that_declares_no_built_in_chain_concludes_nothing_node_wide() {
    // kube-proxy's iptables-restore input, as people copy it from its logs: the tables
    // hold its own chains, never the built-in ones, nor the jumps from them.
    let builtin = |l: &str| {
        [
            ":PREROUTING ",
            ":INPUT ",
            ":FORWARD ",
            ":OUTPUT ",
            ":POSTROUTING ",
        ]
        .iter()
        .any(|p| l.starts_with(p))
            || [
                "-A PREROUTING ",
                "-A INPUT ",
                "-A FORWARD ",
                "-A OUTPUT ",
                "-A POSTROUTING ",
            ]
            .iter()
            .any(|p| l.starts_with(p))
    };
    let restore: String = clean_dump()
        .lines()
        .filter(|l| !builtin(l) && !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let cluster = fs::read(support::root().join("testdata/duplicate-dnat-30080/cluster.json")).unwrap();
    let dir = bundle(&[
        ("iptables-nft-save.txt", restore.as_bytes()),
        ("cluster.json", &cluster),
    ]);
    let (_, stdout, stderr) = run(&dir);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|_| panic!("{stderr}"));
    let findings = report["findings"].as_array().unwrap();
    assert!(
        !findings
            .iter()
            .any(|f| f["kind"] == "missing-rule" && f["port"].is_null()),
        "no node-wide missing-rule from a dump that never showed PREROUTING: {findings:#?}"
    );
    // What the dump does show is still judged: the hand-written duplicate on 30080.
    assert!(
        findings.iter().any(|f| f["kind"] == "duplicate-rule"),
        "{findings:#?}"
    );
    let src = &report["sources"][0];
    assert_eq!(src["status"], "partial", "{src}");
    assert!(src["notes"].to_string().contains("table nat (line "), "{src}");
    assert!(
        src["notes"]
            .to_string()
            .contains("declares none of its built-in chains"),
        "{src}"
    );
    assert_eq!(report["coverage"]["complete"], false);
}
