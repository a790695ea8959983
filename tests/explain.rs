//! `portdrift explain` on the shipped bundles: for every port an incident is about,
//! where new connections go (the outcome, each endpoint's share) as the bundle's rules
//! say (read by hand from its dumps and INCIDENT.md), whether that differs from the
//! API, the exit status, and that every document follows the schema. Then what a user
//! gets from bad input: a clear error, or a "not checked" said first.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;

struct Case {
    bundle: &'static str,
    query: &'static str,
    extra: &'static [&'static str],
    outcome: &'static str,
    /// Each endpoint with its share of new connections.
    endpoints: &'static [(&'static str, f64)],
    exit: i32,
}

const THIRD: f64 = 1.0 / 3.0;

/// Every bundle's interesting ports (those its expected findings name), and a clean
/// port of each clean bundle.
const CASES: &[Case] = &[
    // A cron job's DNAT at the top of KUBE-NODEPORTS takes everything.
    Case {
        bundle: "duplicate-dnat-30080",
        query: "tcp/30080",
        extra: &[],
        outcome: "dnat",
        endpoints: &[("10.244.2.17:8080", 1.0)],
        exit: 1,
    },
    // A deleted Service's rules still DNAT; the new Service has none; a REJECT stays.
    Case {
        bundle: "deleted-while-proxy-down",
        query: "tcp/30090",
        extra: &[],
        outcome: "dnat",
        endpoints: &[("10.244.1.52:8080", 0.5), ("10.244.3.53:8080", 0.5)],
        exit: 1,
    },
    Case {
        bundle: "deleted-while-proxy-down",
        query: "tcp/30091",
        extra: &[],
        outcome: "none",
        endpoints: &[],
        exit: 1,
    },
    Case {
        bundle: "deleted-while-proxy-down",
        query: "tcp/31777",
        extra: &[],
        outcome: "reject",
        endpoints: &[],
        exit: 1,
    },
    // A half-applied restore: one stale endpoint in the cascade, two new ones missing.
    Case {
        bundle: "canary-rollout-leftovers",
        query: "tcp/30100",
        extra: &[],
        outcome: "dnat",
        endpoints: &[
            ("10.244.1.31:8080", THIRD),
            ("10.244.2.31:8080", THIRD),
            ("10.244.3.31:8080", THIRD),
        ],
        exit: 1,
    },
    // HAProxy listens on an allocated NodePort: the DNAT comes first.
    Case {
        bundle: "haproxy-squatter",
        query: "tcp/30080",
        extra: &[],
        outcome: "dnat",
        endpoints: &[("10.244.1.80:8080", 0.5), ("10.244.3.81:8080", 0.5)],
        exit: 0,
    },
    // fluent-bit on a free port in the range: delivered to it.
    Case {
        bundle: "haproxy-squatter",
        query: "udp/31514",
        extra: &[],
        outcome: "local",
        endpoints: &[],
        exit: 1,
    },
    // Two backends tie at nat prerouting: iptables-nft's rules taken first, the other
    // order's answer said as not checked.
    Case {
        bundle: "iptables-backend-split",
        query: "tcp/30080",
        extra: &[],
        outcome: "dnat",
        endpoints: &[
            ("10.244.4.21:8080", THIRD),
            ("10.244.5.33:8080", THIRD),
            ("10.244.6.12:8080", THIRD),
        ],
        exit: 3,
    },
    Case {
        bundle: "iptables-backend-split",
        query: "tcp/30777",
        extra: &[],
        outcome: "dnat",
        endpoints: &[("10.244.6.50:8080", 1.0)],
        exit: 1,
    },
    Case {
        bundle: "nftables-stale-element",
        query: "tcp/30555",
        extra: &[],
        outcome: "dnat",
        endpoints: &[("10.244.2.90:8000", 1.0)],
        exit: 1,
    },
    // The IPv6 proxier fell behind: asked over IPv6.
    Case {
        bundle: "dual-stack",
        query: "tcp/30080",
        extra: &["--source", "2001:db8::10"],
        outcome: "dnat",
        endpoints: &[
            ("[fd00:10:244:1::14]:8080", THIRD),
            ("[fd00:10:244:2::1f]:8080", THIRD),
            ("[fd00:10:244:3::12]:8080", THIRD),
        ],
        exit: 1,
    },
    Case {
        bundle: "udp-stale-endpoint",
        query: "udp/30514",
        extra: &[],
        outcome: "dnat",
        endpoints: &[
            ("10.244.1.61:5140", THIRD),
            ("10.244.2.61:5140", THIRD),
            ("10.244.3.61:5140", THIRD),
        ],
        exit: 1,
    },
    // kube-proxy's jump comes first: the CNI's hostPort DNAT is shadowed.
    Case {
        bundle: "hostport-over-nodeport",
        query: "tcp/30443",
        extra: &[],
        outcome: "dnat",
        endpoints: &[("10.244.1.31:8443", 0.5), ("10.244.2.31:8443", 0.5)],
        exit: 0,
    },
    Case {
        bundle: "nftables-mode-switch",
        query: "tcp/30080",
        extra: &[],
        outcome: "dnat",
        endpoints: &[("10.244.2.23:8080", 0.5), ("10.244.6.31:8080", 0.5)],
        exit: 3,
    },
    Case {
        bundle: "nftables-mode-switch",
        query: "tcp/30990",
        extra: &[],
        outcome: "dnat",
        endpoints: &[("10.244.2.61:8000", 1.0)],
        exit: 1,
    },
    Case {
        bundle: "local-policy-stale-drop",
        query: "tcp/31443",
        extra: &[],
        outcome: "drop",
        endpoints: &[],
        exit: 1,
    },
    Case {
        bundle: "local-policy-stale-drop-nftables",
        query: "tcp/31443",
        extra: &[],
        outcome: "drop",
        endpoints: &[],
        exit: 1,
    },
    Case {
        bundle: "clean-iptables",
        query: "tcp/30276",
        extra: &[],
        outcome: "dnat",
        endpoints: &[
            ("10.244.4.30:8080", 0.25),
            ("10.244.23.31:8080", 0.25),
            ("10.244.5.29:8080", 0.25),
            ("10.244.9.24:8080", 0.25),
        ],
        exit: 0,
    },
    Case {
        bundle: "clean-nftables",
        query: "tcp/30624",
        extra: &[],
        outcome: "dnat",
        endpoints: &[
            ("10.244.4.14:8080", 0.25),
            ("10.244.4.15:8080", 0.25),
            ("10.244.5.13:8080", 0.25),
            ("10.244.5.14:8080", 0.25),
        ],
        exit: 0,
    },
];

fn bundle(name: &str) -> PathBuf {
    support::root().join("testdata").join(name)
}

fn explain(dir: &Path, query: &str, extra: &[&str], format: &str) -> (i32, Vec<u8>, String) {
    let mut args = vec![
        "explain",
        query,
        "--from",
        dir.to_str().unwrap(),
        "--format",
        format,
    ];
    args.extend_from_slice(extra);
    let out = support::portdrift(&args);
    (
        out.status.code().expect("portdrift exited"),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_incident_port_goes_where_its_rules_send_it() {
    let scratch = tempfile::TempDir::new().unwrap();
    let mut documents = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let (code, stdout, stderr) = explain(&bundle(case.bundle), case.query, case.extra, "json");
        let label = format!("{} {}", case.bundle, case.query);
        let e: Value =
            serde_json::from_slice(&stdout).unwrap_or_else(|err| panic!("{label}: {err}\n{stderr}"));
        assert_eq!(e["outcome"], case.outcome, "{label}: {e:#}");
        let got: Vec<(String, f64)> = e["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                (
                    x["target"].as_str().unwrap().to_string(),
                    x["fraction"].as_f64().unwrap(),
                )
            })
            .collect();
        let mut got_sorted = got.clone();
        got_sorted.sort_by(|a, b| a.0.cmp(&b.0));
        let mut want: Vec<(String, f64)> = case.endpoints.iter().map(|(t, f)| (t.to_string(), *f)).collect();
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got_sorted.len(), want.len(), "{label}: {got:?}");
        for ((gt, gf), (wt, wf)) in got_sorted.iter().zip(&want) {
            assert_eq!(gt, wt, "{label}");
            assert!((gf - wf).abs() < 1e-4, "{label}: {gt} {gf} ≠ {wf}");
        }
        assert_eq!(code, case.exit, "{label}: {e:#}");
        // Exit 1 is a difference from the API, and says which.
        assert_eq!(
            code == 1,
            !e["differences"].as_array().unwrap().is_empty(),
            "{label}"
        );
        // Exit 3: what was not checked comes first.
        assert_eq!(
            code == 3,
            !e["not_checked"].as_array().unwrap().is_empty(),
            "{label}"
        );
        let path = scratch.path().join(format!("{i}.json"));
        std::fs::write(&path, &stdout).unwrap();
        documents.push(path);
    }
    let documents: Vec<&Path> = documents.iter().map(PathBuf::as_path).collect();
    if let Some(result) = support::schema::check("explanation", &documents) {
        result.unwrap_or_else(|said| panic!("explain's JSON does not follow the schema: {said}"));
    }
}

#[test]
fn the_evidence_names_the_rule_that_wins_and_the_ones_it_shadows() {
    let (_, stdout, _) = explain(&bundle("duplicate-dnat-30080"), "tcp/30080", &[], "json");
    let e: Value = serde_json::from_slice(&stdout).unwrap();
    let dump = std::fs::read_to_string(bundle("duplicate-dnat-30080").join("iptables-nft-save.txt")).unwrap();
    let winner = e["paths"][0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["does"] == "dnat to 10.244.2.17:8080")
        .expect("the DNAT is on the path");
    // The line number points at that very rule in the dump.
    let line = winner["line"].as_u64().unwrap() as usize;
    assert_eq!(dump.lines().nth(line - 1), winner["rule"].as_str());
    assert_eq!(winner["chain"], "KUBE-NODEPORTS");
    let shadowed = e["shadowed"].as_array().unwrap();
    assert_eq!(shadowed.len(), 1, "{e:#}");
    assert!(shadowed[0]["rule"].as_str().unwrap().contains("shop/web:http"));
    assert_eq!(shadowed[0]["by"], winner["at"]);
    // The difference names the finding that explains it, by the scan's id.
    let (_, scan) = support::scan_json(&bundle("duplicate-dnat-30080"), &[]);
    let ids: Vec<&str> = scan["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    let named = &e["differences"].as_array().unwrap()[0]["findings"];
    assert!(!named.as_array().unwrap().is_empty());
    for id in named.as_array().unwrap() {
        assert!(
            ids.contains(&id.as_str().unwrap()),
            "{id} is a finding of the scan"
        );
    }
}

#[test]
fn the_text_is_a_numbered_path_and_one_closing_sentence() {
    let (code, stdout, _) = explain(&bundle("local-policy-stale-drop"), "tcp/31443", &[], "text");
    let text = String::from_utf8(stdout).unwrap();
    assert_eq!(code, 1);
    assert!(
        text.contains("  1. prerouting iptables-nft nat PREROUTING"),
        "{text}"
    );
    assert!(text.contains("KUBE-EXTERNAL-SERVICES"), "{text}");
    assert!(text.contains("Outcome: drop"), "{text}");
    assert!(text.contains("externalTrafficPolicy Local"), "{text}");
    let last = text.trim_end().lines().last().unwrap();
    assert_eq!(
        last,
        "new connections to tcp/31443 are dropped, which differs from the API in 2 ways."
    );
}

/// A copy of a bundle to damage.
fn copy_of(name: &str) -> tempfile::TempDir {
    let dir = tempfile::TempDir::new().unwrap();
    let out = std::process::Command::new("cp")
        .arg("-r")
        .arg(format!("{}/.", bundle(name).display()))
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    dir
}

#[test]
fn a_rule_it_cannot_decide_is_said_first_and_no_path_is_promised_past_it() {
    // An ipset match (which explain cannot evaluate) at the top of KUBE-NODEPORTS.
    let dir = copy_of("udp-stale-endpoint");
    let path = dir.path().join("iptables-nft-save.txt");
    let dump = std::fs::read_to_string(&path).unwrap();
    let first = dump
        .find("-A KUBE-NODEPORTS")
        .expect("the dump has KUBE-NODEPORTS rules");
    let damaged = format!(
        "{}-A KUBE-NODEPORTS -m set --match-set trusted-clients src -j ACCEPT\n{}",
        &dump[..first],
        &dump[first..]
    );
    std::fs::write(&path, damaged).unwrap();
    let (code, stdout, _) = explain(dir.path(), "udp/30514", &[], "json");
    let e: Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(code, 3, "{e:#}");
    assert_eq!(e["outcome"], "undetermined");
    assert_eq!(e["complete"], false);
    let said = e["not_checked"][0].as_str().unwrap();
    assert!(
        said.contains("-m set") && said.contains(":93"),
        "the rule is named, with its line: {e:#}"
    );
    assert!(
        e["differences"].as_array().unwrap().is_empty(),
        "nothing is claimed about what cannot be followed"
    );
    let (_, text, _) = explain(dir.path(), "udp/30514", &[], "text");
    let text = String::from_utf8(text).unwrap();
    let not_checked = text.find("Not checked").expect("said");
    assert!(not_checked < text.find("Path:").unwrap(), "said first: {text}");
    assert!(
        text.trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with("Not every rule could be checked")
    );
}

#[test]
fn untrusted_text_is_printed_escaped() {
    let dir = copy_of("duplicate-dnat-30080");
    let path = dir.path().join("iptables-nft-save.txt");
    let dump = std::fs::read_to_string(&path).unwrap();
    let evil = dump.replacen(
        "-A KUBE-NODEPORTS -p tcp -m tcp --dport 30080 -j DNAT",
        "-A KUBE-NODEPORTS -p tcp -m comment --comment \"\u{1b}]0;pwned\u{7}\" -m tcp --dport 30080 -j DNAT",
        1,
    );
    assert_ne!(evil, dump);
    std::fs::write(&path, evil).unwrap();
    let (_, stdout, _) = explain(dir.path(), "tcp/30080", &[], "text");
    let text = String::from_utf8(stdout).unwrap();
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "no raw control byte"
    );
    assert!(text.contains("\\x1b]0;pwned\\x07"), "{text}");
}

#[test]
fn bad_input_gets_a_clear_error() {
    let dir = bundle("duplicate-dnat-30080");
    for (query, says) in [
        ("tcp/99999", "PROTO/PORT"),
        ("http/80", "PROTO/PORT"),
        ("tcp/10.0.0.1", "PROTO/PORT"),
    ] {
        let (code, _, stderr) = explain(&dir, query, &[], "json");
        assert_eq!(code, 64, "{query}: a wrong command line");
        assert!(stderr.contains(says), "{query}: {stderr}");
    }
    let (code, _, stderr) = explain(&dir, "tcp/30080", &["--source", "2001:db8::1"], "json");
    // No IPv6 address given, and an IPv6 source: an IPv6 connection to the node.
    assert!(code == 0 || code == 1 || code == 3, "{stderr}");
    let (code, _, stderr) = explain(&dir, "tcp/10.0.0.1:30080", &["--source", "2001:db8::1"], "json");
    assert_eq!(code, 2);
    assert!(stderr.contains("different families"), "{stderr}");
    let (code, _, stderr) = explain(Path::new("/nonexistent/bundle"), "tcp/30080", &[], "json");
    assert_eq!(code, 2);
    assert!(stderr.contains("/nonexistent/bundle"), "{stderr}");
}

#[test]
fn a_listing_of_kube_proxys_tables_only_is_not_taken_for_the_whole_ruleset() {
    // As `nft -j list table ip kube-proxy` captures it: none of iptables-nft's tables,
    // so the tables other components wrote with nft were never seen.
    let dir = copy_of("udp-stale-endpoint");
    std::fs::remove_file(dir.path().join("nft-ruleset.json")).unwrap();
    std::fs::write(
        dir.path().join("nft.json"),
        r#"{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}}]}"#,
    )
    .unwrap();
    let (code, stdout, _) = explain(dir.path(), "udp/30514", &[], "json");
    let e: Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(code, 1, "the stale endpoint still differs: {e:#}");
    assert_eq!(e["complete"], false);
    assert!(
        e["not_checked"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("some tables only")),
        "{e:#}"
    );
}
