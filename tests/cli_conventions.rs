//! The conventions every command shares, through the real binary: `-o`, the logging
//! flags, `-` for standard input, the exit statuses of a wrong command line, a
//! kubeconfig or context that cannot be used, and the text report on a terminal (in a
//! real one: tmux at 80 columns).

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const BUNDLE: &str = "testdata/duplicate-dnat-30080";

/// Runs the binary in the repository's root with `env` set (and LANG, LC_ALL, COLUMNS,
/// NO_COLOR cleared unless given), feeding it `stdin`.
fn portdrift(args: &[&str], env: &[(&str, &str)], stdin: Option<&[u8]>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_portdrift"));
    command.current_dir(support::root()).args(args);
    for name in ["LANG", "LC_ALL", "LC_CTYPE", "COLUMNS", "NO_COLOR", "RUST_LOG"] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("the portdrift binary runs");
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(bytes).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> Value {
    let mut doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)));
    doc.as_object_mut().unwrap().remove("generated_at");
    doc
}

#[test]
fn a_wrong_command_line_exits_64_and_help_exits_0() {
    for (args, says) in [
        (vec!["scan", "--bogus"], "unexpected argument"),
        (vec!["scan", "--grace", "soon"], "invalid value"),
        (vec!["scan", "--log-level", "loud"], "is not a level"),
        (vec!["scan", "-o", "yaml"], "invalid value"),
        // --repair is refused with --from; its settings must not slip through alone.
        (
            vec!["scan", "--from", BUNDLE, "--repair-dry-run"],
            "--repair-dry-run needs --repair",
        ),
        (
            vec!["scan", "--from", BUNDLE, "--dry-run"],
            "--repair-dry-run needs --repair",
        ),
        (vec!["scan", "--repair-max", "3"], "--repair"),
        (vec!["run", "--repair-dry-run"], "--repair"),
        (
            vec!["run", "--cluster-state", "x.json", "--events"],
            "cannot be used with",
        ),
        (vec![], "Usage"),
    ] {
        let out = portdrift(&args, &[], None);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    for args in [vec!["--help"], vec!["scan", "--help"], vec!["--version"]] {
        let out = portdrift(&args, &[], None);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!text(&out).is_empty());
    }
    // Could not scan stays 2.
    let out = portdrift(&["scan", "--from", "/nonexistent"], &[], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn output_is_one_flag_on_every_command_and_wide_is_a_line_per_finding() {
    let json_new = portdrift(&["scan", "--from", BUNDLE, "-o", "json"], &[], None);
    let json_old = portdrift(&["scan", "--from", BUNDLE, "--format", "json"], &[], None);
    assert_eq!(json(&json_new), json(&json_old));
    let findings = json(&json_new)["findings"].as_array().unwrap().clone();

    let wide = portdrift(&["scan", "--from", BUNDLE, "--output", "wide"], &[], None);
    assert_eq!(wide.status.code(), Some(1));
    let wide = text(&wide);
    let lines: Vec<&str> = wide.lines().collect();
    let header = lines.iter().position(|l| l.starts_with("SEVERITY")).unwrap();
    assert!(
        lines[0].starts_with("portdrift: node worker-1: 2 critical"),
        "{wide}"
    );
    let rows = &lines[header + 1..];
    assert_eq!(rows.len(), findings.len(), "{wide}");
    for f in &findings {
        let id = f["id"].as_str().unwrap();
        let row = rows
            .iter()
            .find(|r| r.contains(id))
            .unwrap_or_else(|| panic!("{id}: {wide}"));
        // Eight one-word columns, then where the rule is (words on a live node).
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[0], f["severity"].as_str().unwrap().to_uppercase());
        assert_eq!(cells[1], f["kind"].as_str().unwrap());
        assert_eq!(cells[2], format!("tcp/{}", f["port"]));
        assert_eq!(cells[7], id, "{row}");
        assert_eq!(
            cells[8..].join(" "),
            f["rule_source"].as_str().unwrap_or("-"),
            "{row}"
        );
    }
    // The columns line up: every row's second column starts where the header's does.
    let kind_at = lines[header].find("KIND").unwrap();
    assert!(
        rows.iter()
            .all(|r| r[kind_at..].starts_with(|c: char| c.is_ascii_lowercase()))
    );

    for args in [
        vec![
            "ports",
            "--cluster-state",
            "testdata/views/cluster.json",
            "-o",
            "json",
        ],
        vec!["lint", "testdata/views/manifests", "-o", "json"],
        vec!["explain", "tcp/30080", "--from", BUNDLE, "-o", "json"],
    ] {
        let out = portdrift(&args, &[], None);
        assert!(json(&out).get("apiVersion").is_some(), "{args:?}");
    }
}

#[test]
fn the_logging_flags_work_on_every_command() {
    // The scan of a bundle with a --cluster-state file logs at debug what it reads.
    let quiet = portdrift(&["scan", "--from", BUNDLE], &[], None);
    let loud = portdrift(&["scan", "--from", BUNDLE, "-vv"], &[], None);
    let levelled = portdrift(&["--log-level", "debug", "scan", "--from", BUNDLE], &[], None);
    assert_eq!(text(&quiet), text(&loud), "logs go to standard error only");
    assert_eq!(loud.status.code(), Some(1));
    assert_eq!(levelled.status.code(), Some(1));
    let json_log = portdrift(
        &[
            "ports",
            "--kubeconfig",
            "/nonexistent",
            "--log-format",
            "json",
            "-v",
        ],
        &[],
        None,
    );
    assert_eq!(json_log.status.code(), Some(2));
    assert!(
        stderr(&json_log).contains("cannot read the kubeconfig /nonexistent: No such file or directory"),
        "the path as written, not in Rust's debug form: {}",
        stderr(&json_log)
    );
}

#[test]
fn a_dash_reads_standard_input_wherever_a_file_is_read() {
    let cluster = std::fs::read(support::root().join(BUNDLE).join("cluster.json")).unwrap();
    let from_file = portdrift(
        &[
            "scan",
            "--from",
            BUNDLE,
            "--cluster-state",
            &format!("{BUNDLE}/cluster.json"),
            "-o",
            "json",
        ],
        &[],
        None,
    );
    let from_stdin = portdrift(
        &["scan", "--from", BUNDLE, "--cluster-state", "-", "-o", "json"],
        &[],
        Some(&cluster),
    );
    assert_eq!(from_stdin.status.code(), Some(1), "{}", stderr(&from_stdin));
    assert_eq!(json(&from_file)["findings"], json(&from_stdin)["findings"]);

    let services = std::fs::read(support::root().join("testdata/views/cluster.json")).unwrap();
    let ports = portdrift(
        &["ports", "--cluster-state", "-", "-o", "json"],
        &[],
        Some(&services),
    );
    assert_eq!(
        ports.status.code(),
        Some(1),
        "the views' cluster has collisions: {}",
        stderr(&ports)
    );

    let accept =
        br#"{"accept": [{"kind": "duplicate-rule", "port": "tcp/30080", "reason": "known, ticket 42"}]}"#;
    let accepted = portdrift(
        &["scan", "--from", BUNDLE, "--accept", "-", "-o", "json"],
        &[],
        Some(accept),
    );
    assert_eq!(json(&accepted)["summary"]["accepted"], 1, "{}", stderr(&accepted));

    // Standard input can feed one input only.
    let twice = portdrift(&["lint", "-", "--cluster-state", "-"], &[], Some(b""));
    assert_eq!(twice.status.code(), Some(2));
    assert!(stderr(&twice).contains("can be read once"), "{}", stderr(&twice));
}

#[test]
fn an_unusable_context_fails_the_scan_instead_of_degrading_it() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n\
         contexts:\n- name: prod\n  context:\n    cluster: c\n    user: u\n- name: staging\n  context:\n    cluster: c\n    user: u\n\
         current-context: prod\nusers:\n- name: u\n  user: {}\n",
    )
    .unwrap();
    // A live scan, but it stops before reading the node: no root needed.
    let out = portdrift(
        &[
            "scan",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--context",
            "prdo",
        ],
        &[],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("context \"prdo\" is not in the kubeconfig")
            && stderr(&out).contains("prod, staging"),
        "{}",
        stderr(&out)
    );
    assert!(text(&out).is_empty(), "no report of a scan that did not run");
}

/// Lines longer than `width`, but for one unbreakable word.
fn overlong(text: &str, width: usize) -> Vec<&str> {
    text.lines()
        .filter(|l| l.chars().count() > width && !l.split(' ').any(|w| w.chars().count() > width / 2))
        .collect()
}

/// `report` (the bundle's, at 80 columns) has no line over 80 but an unbreakable word,
/// and its first message continues under its text, at column 11.
fn assert_wrapped_at_80(report: &str) {
    assert_eq!(overlong(report, 80), Vec::<&str>::new(), "{report}");
    let message = report
        .lines()
        .position(|l| l.contains("still sends traffic"))
        .unwrap();
    let next = report.lines().nth(message + 1).unwrap();
    assert!(
        next.starts_with(&" ".repeat(11)) && !next.starts_with(&" ".repeat(12)),
        "{report}"
    );
}

#[test]
fn the_text_report_fits_the_terminal_it_is_given() {
    let plain = text(&portdrift(
        &["scan", "--from", BUNDLE],
        &[("LANG", "C.UTF-8")],
        None,
    ));
    assert!(plain.contains('→') && plain.lines().any(|l| l.chars().count() > 120));
    assert!(!plain.contains('\x1b'), "a pipe gets no colour");

    let narrow = text(&portdrift(
        &["scan", "--from", BUNDLE],
        &[("LANG", "C.UTF-8"), ("COLUMNS", "80")],
        None,
    ));
    assert_wrapped_at_80(&narrow);
    assert_eq!(
        narrow.split_whitespace().collect::<Vec<_>>(),
        plain.split_whitespace().collect::<Vec<_>>(),
        "wrapping loses and cuts no word"
    );

    let ascii = text(&portdrift(&["scan", "--from", BUNDLE], &[("LANG", "C")], None));
    assert!(
        ascii.is_ascii() && ascii.contains("-> 10.244.2.17:8080"),
        "{ascii}"
    );
    let unset = text(&portdrift(&["scan", "--from", BUNDLE], &[], None));
    assert!(unset.is_ascii(), "no locale is the C locale");

    let coloured = text(&portdrift(
        &["scan", "--from", BUNDLE, "--color", "always"],
        &[("LANG", "C.UTF-8"), ("NO_COLOR", "1")],
        None,
    ));
    assert!(coloured.contains("\x1b[1;31mCRITICAL\x1b[0m"), "{coloured}");
}

#[test]
fn in_a_real_terminal_at_80_columns_the_report_wraps_and_critical_stands_out() {
    if !support::require_tool("tmux", "the report in a real terminal") {
        return;
    }
    let socket = format!("portdrift-test-{}", std::process::id());
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .output()
            .expect("tmux runs")
    };
    let binary = env!("CARGO_BIN_EXE_portdrift");
    let script = format!(
        "cd {} && LANG=C.UTF-8 {binary} scan --from {BUNDLE}; echo \"exit=$?\"; sleep 30",
        support::root().display()
    );
    let started = tmux(&[
        "new-session",
        "-d",
        "-x",
        "80",
        "-y",
        "60",
        "-e",
        "TERM=xterm-256color",
        "sh",
        "-c",
        &script,
    ]);
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let mut screen = String::new();
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        screen = String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-e", "-J"]).stdout).into_owned();
        if screen.contains("exit=") {
            break;
        }
    }
    let _ = tmux(&["kill-server"]);
    assert!(screen.contains("exit=1"), "{screen}");
    // -e keeps the colours (tmux writes bold and red as two sequences): CRITICAL in
    // bold red. -J joins lines the terminal wrapped by itself: there must be none.
    assert!(screen.contains("\x1b[1m\x1b[31mCRITICAL"), "{screen:?}");
    let plain: String = {
        let mut out = String::new();
        let mut chars = screen.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    };
    assert_wrapped_at_80(&plain);
}
