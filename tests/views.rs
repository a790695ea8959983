//! The cluster-wide views through the real binary: `portdrift ports` from a cluster
//! state file and from the fake API server over HTTP (which must agree), with
//! collisions across namespaces and protocols, a dual-protocol port, a health-check
//! node port, a Service opted out of kube-proxy, an exhausted range and bad input.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::path::Path;
use std::process::Output;

use k8s_openapi::api::core::v1::Service;
use serde_json::Value;
use support::fake_apiserver::{FakeApiServer, Kind};

const CLUSTER: &str = "testdata/views/cluster.json";

fn cluster_file() -> String {
    support::root().join(CLUSTER).display().to_string()
}

/// Runs the binary off the async runtime (the fake API server runs on it).
async fn portdrift(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        support::portdrift(&args)
    })
    .await
    .expect("the binary ran")
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Serves every Service of a `kubectl get -o json` List.
fn serve_services(server: &FakeApiServer, path: &Path) {
    let list: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    for item in list["items"].as_array().unwrap() {
        if item["kind"] == "Service" {
            server.apply(&serde_json::from_value::<Service>(item.clone()).unwrap());
        }
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_from_the_api_matches_the_file_and_counts_opted_out_services() {
    support::scenario(async {
        let server = FakeApiServer::start().await;
        serve_services(&server, &support::root().join(CLUSTER));
        let scratch = tempfile::TempDir::new().unwrap();
        let kubeconfig = server.write_kubeconfig(scratch.path());
        let kubeconfig = kubeconfig.display().to_string();

        let from_api = portdrift(args(&["ports", "--kubeconfig", &kubeconfig, "--format", "json"])).await;
        let from_file = portdrift(args(&[
            "ports",
            "--cluster-state",
            &cluster_file(),
            "--format",
            "json",
        ]))
        .await;
        assert_eq!(from_api.status.code(), Some(1), "collisions exit 1");
        assert_eq!(from_file.status.code(), Some(1));
        // The two runs may straddle a second: their times are not what is compared.
        let without_time = |mut doc: serde_json::Value| {
            doc.as_object_mut().map(|d| d.remove("generated_at"));
            doc
        };
        let table = without_time(json_of(&from_api));
        assert_eq!(
            table,
            without_time(json_of(&from_file)),
            "the API and the file disagree"
        );

        // Every Service was listed: kube-proxy's selector would hide mesh/legacy-ingress.
        let services = server.requests_for(Kind::Service);
        assert!(
            services.iter().all(|r| !r.contains("labelSelector")),
            "{services:?}"
        );
        let held = |port: u64| -> Vec<String> {
            table["allocations"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| a["port"] == port)
                .map(|a| {
                    format!(
                        "{} {}",
                        a["service"].as_str().unwrap(),
                        a["protocol"].as_str().unwrap()
                    )
                })
                .collect()
        };
        assert_eq!(held(30900), ["mesh/legacy-ingress tcp"]);
        // Two teams on 30080; TCP and UDP of two Services on 30514.
        let collisions: Vec<(u64, bool)> = table["collisions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["port"].as_u64().unwrap(), c["same_protocol"].as_bool().unwrap()))
            .collect();
        assert_eq!(collisions, [(30080, true), (30514, false)]);
        assert_eq!(held(30080), ["shop/web tcp", "team-b/api tcp"]);
        // DNS on both protocols of one Service: shared, not a collision.
        let dns: Vec<&Value> = table["allocations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["port"] == 30053)
            .collect();
        assert_eq!(dns.len(), 2);
        assert!(
            dns.iter()
                .all(|a| a["shared_across_protocols"] == true && a["collision"] == false)
        );
        let health: Vec<u64> = table["allocations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["health_check"] == true)
            .map(|a| a["port"].as_u64().unwrap())
            .collect();
        assert_eq!(health, [32100]);
        assert_eq!(table["allocated_ports"], 9);
        assert_eq!(table["free"]["count"], 2768 - 9);
        assert_eq!(
            table["free"]["next"],
            serde_json::json!([30000, 30001, 30002, 30003, 30004])
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_range_and_a_clean_one() {
    support::scenario(async {
        // 30053 is held (twice, by one Service): the one-port range is full.
        let out = portdrift(args(&[
            "ports",
            "--cluster-state",
            &cluster_file(),
            "--nodeport-range",
            "30053-30053",
        ]))
        .await;
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("the range is exhausted"), "{text}");
        assert!(!text.contains("next free"), "{text}");
        // A range away from the collisions has none of its own to report... the
        // collisions are cluster-wide, so the exit status still says so.
        assert_eq!(out.status.code(), Some(1));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_sources_fail_with_where_and_why() {
    support::scenario(async {
        let scratch = tempfile::TempDir::new().unwrap();
        let bad = scratch.path().join("cluster.json");
        std::fs::write(
            &bad,
            "{\n  \"kind\": \"List\",\n  \"items\": [\n    {\"kind\": \"Service\",}\n  ]\n}\n",
        )
        .unwrap();
        let out = portdrift(args(&["ports", "--cluster-state", bad.to_str().unwrap()])).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("cluster.json") && stderr.contains("line 4"),
            "{stderr}"
        );

        // An API server that is not there: a clear error, exit 2, within the timeout.
        let server = FakeApiServer::start().await;
        let kubeconfig = server.write_kubeconfig(scratch.path());
        drop(server);
        let out = portdrift(args(&[
            "ports",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--api-timeout",
            "5s",
        ]))
        .await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("cannot list services"), "{stderr}");
    })
    .await;
}

const MANIFESTS: &str = "testdata/views/manifests";

/// `(check, file name, line)` of each finding of a `lint --format json` report.
fn lint_checks(report: &Value) -> Vec<(String, String, u64)> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let file = f["file"].as_str().unwrap();
            let name = file.rsplit('/').next().unwrap_or(file);
            (
                f["check"].as_str().unwrap().to_string(),
                name.to_string(),
                f["line"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lint_checks_manifests_against_each_other_the_range_and_the_cluster() {
    support::scenario(async {
        let manifests = support::root().join(MANIFESTS).display().to_string();
        let server = FakeApiServer::start().await;
        serve_services(&server, &support::root().join(CLUSTER));
        let scratch = tempfile::TempDir::new().unwrap();
        let kubeconfig = server.write_kubeconfig(scratch.path()).display().to_string();

        let offline = portdrift(args(&["lint", &manifests, "--format", "json"])).await;
        let with_file = portdrift(args(&[
            "lint",
            &manifests,
            "--cluster-state",
            &cluster_file(),
            "--format",
            "json",
        ]))
        .await;
        let with_api = portdrift(args(&[
            "lint",
            &manifests,
            "--kubeconfig",
            &kubeconfig,
            "--format",
            "json",
        ]))
        .await;
        for out in [&offline, &with_file, &with_api] {
            assert_eq!(
                out.status.code(),
                Some(1),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let (offline, mut with_file, mut with_api) =
            (json_of(&offline), json_of(&with_file), json_of(&with_api));
        // Written at different moments.
        for report in [&mut with_file, &mut with_api] {
            report.as_object_mut().unwrap().remove("generated_at");
        }
        assert_eq!(with_file, with_api, "the file and the API server disagree");

        let errors = |report: &Value| -> Vec<(String, String, u64)> {
            lint_checks(report)
                .into_iter()
                .filter(|(check, ..)| {
                    !matches!(
                        check.as_str(),
                        "static-nodeport" | "lb-node-ports" | "local-without-health-check"
                    )
                })
                .collect()
        };
        let owned = |list: &[(&str, &str, u64)]| -> Vec<(String, String, u64)> {
            list.iter()
                .map(|(c, f, l)| (c.to_string(), f.to_string(), *l))
                .collect()
        };
        // Without the cluster: the two new Services collide on 30095, and 8443 is out
        // of range.
        assert_eq!(
            errors(&offline),
            owned(&[
                ("collision", "payments.yaml", 14),
                ("out-of-range", "payments.yaml", 18)
            ])
        );
        // With it: checkout's 30090 is team-b/api's. grafana's own 30300 is not a
        // collision with itself.
        assert_eq!(
            errors(&with_file),
            owned(&[
                ("allocated", "checkout.yaml", 34),
                ("collision", "payments.yaml", 14),
                ("out-of-range", "payments.yaml", 18),
            ])
        );
        let warnings: Vec<(String, String, u64)> = lint_checks(&with_file)
            .into_iter()
            .filter(|(check, ..)| check != "static-nodeport")
            .filter(|f| !errors(&with_file).contains(f))
            .collect();
        assert_eq!(
            warnings,
            owned(&[
                ("local-without-health-check", "payments.yaml", 8),
                ("lb-node-ports", "platform.yaml", 17),
            ])
        );
        assert_eq!(with_file["services"], 4);
        assert_eq!(with_file["errors"], 3);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lint_reads_a_helm_stream_on_stdin_and_points_at_bad_yaml() {
    support::scenario(async {
        // `helm template` output: documents with `# Source:` comments, one per template.
        let mut stream = String::new();
        for name in ["checkout.yaml", "payments.yaml", "platform.yaml"] {
            let text = std::fs::read_to_string(support::root().join(MANIFESTS).join(name)).unwrap();
            stream.push_str(&format!(
                "---\n# Source: chart/templates/{name}\n{}",
                text.trim_start_matches("---\n")
            ));
        }
        let out = tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_portdrift"))
                .args(["lint", "-", "--format", "json"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(stream.as_bytes()).unwrap();
            child.wait_with_output().unwrap()
        })
        .await
        .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let report = json_of(&out);
        assert_eq!(report["services"], 4);
        let collision = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["check"] == "collision")
            .expect("the collision on 30095");
        assert_eq!(collision["file"], "<stdin>");
        // Line 14 of payments.yaml, after the first document (39 lines with its `---` and
        // `# Source:`) and the second one's `---` and `# Source:`.
        assert_eq!(collision["line"], 41 + 14);

        let malformed = support::root()
            .join("testdata/views/malformed")
            .display()
            .to_string();
        let out = portdrift(args(&["lint", &malformed])).await;
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.starts_with(&format!("{malformed}/service.yaml:11: error: not valid YAML")),
            "{text}"
        );

        let out = portdrift(args(&["lint", "no-such-file.yaml"])).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("cannot read no-such-file.yaml"), "{stderr}");
    })
    .await;
}

#[test]
fn a_missing_file_names_its_cause_once_and_a_closed_pipe_ends_quietly_with_sigpipes_status() {
    let out = support::portdrift(&["lint", "/nonexistent.yaml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.matches("No such file or directory").count(), 1, "{stderr}");

    // A report longer than a pipe holds, whose reader stops after a few bytes, as
    // `| head -3` does: quietly, with the status a shell shows for a command SIGPIPE
    // ended (128 + 13), so `set -o pipefail` does not read it as success.
    let dir = support::root().join(MANIFESTS);
    let dir = dir.to_str().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_portdrift"))
        .args(["lint", "--format", "json"])
        .args([dir; 40])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut start = [0u8; 16];
    std::io::Read::read_exact(&mut stdout, &mut start).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        (out.status.code(), String::from_utf8_lossy(&out.stderr).as_ref()),
        (Some(141), ""),
    );
}

#[test]
fn the_version_names_the_revision_and_the_compiler() {
    let out = support::portdrift(&["--version"]);
    let version = String::from_utf8_lossy(&out.stdout);
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(support::root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let revision = head.as_deref().unwrap_or("unknown");
    let rustc = std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .unwrap();
    let rustc = String::from_utf8_lossy(&rustc.stdout);
    let rustc = rustc.split_whitespace().nth(1).unwrap();
    assert_eq!(
        version.trim(),
        format!(
            "portdrift {} (revision {revision}, rustc {rustc})",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[test]
fn bash_completes_commands_and_flags_from_the_completion_script() {
    if !support::require_tool("bash", "shell completions") {
        return;
    }
    // What bash's completion would offer: the script sourced, then its function called
    // as bash calls it for `portdrift sc<TAB>` and `portdrift run --log-f<TAB>`.
    let script = format!(
        r#"source <("{pd}" completions bash) || exit 1
complete_words() {{ COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _portdrift portdrift "${{@: -1}}" "${{@: -2:1}}"; echo "${{COMPREPLY[*]}}"; }}
complete_words portdrift sc
complete_words portdrift run --log-f
complete_words portdrift completions z
complete_words portdrift d
complete_words portdrift scan --log-level d"#,
        pd = env!("CARGO_BIN_EXE_portdrift")
    );
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .output()
        .unwrap();
    let offered = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = offered.lines().collect();
    assert_eq!(
        lines,
        // No hidden `dev` beside nothing for `d`; the level names for --log-level.
        ["scan", "--log-format", "zsh", "", "debug"],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (shell, marker) in [("zsh", "#compdef portdrift"), ("fish", "complete -c portdrift")] {
        let out = support::portdrift(&["completions", shell]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains(marker), "{shell}: {text}");
        assert!(text.contains("nodeport-range"), "{shell}: no --nodeport-range");
    }
}

#[test]
fn man_pages_cover_every_command_and_its_flags() {
    let dir = tempfile::TempDir::new().unwrap();
    let out = support::portdrift(&["man", dir.path().join("man1").to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = |name: &str| {
        std::fs::read_to_string(dir.path().join("man1").join(format!("{name}.1")))
            .unwrap_or_else(|e| panic!("{name}.1: {e}"))
    };
    let main = page("portdrift");
    assert!(main.contains(".TH portdrift 1"), "{main}");
    // Each flag, from the same definitions as --help (roff escapes the dashes).
    let run = page("portdrift-run");
    for flag in [
        "log\\-level",
        "log\\-format",
        "nodeport\\-range",
        "startup\\-jitter",
    ] {
        assert!(run.contains(flag), "portdrift-run.1 lacks {flag}");
    }
    assert!(
        !dir.path().join("man1/portdrift-dev.1").exists(),
        "hidden commands stay out"
    );
    // No page refers to one that is not written, nor advertises a flag that fails.
    assert!(!main.contains("portdrift\\-help"), "{main}");
    for command in [
        "scan",
        "explain",
        "snapshot",
        "run",
        "ports",
        "lint",
        "fleet",
        "completions",
        "man",
    ] {
        let text = page(&format!("portdrift-{command}"));
        assert!(text.contains(&format!(".TH portdrift-{command} 1")), "{text}");
        assert!(
            main.contains(&format!("portdrift\\-{command}")),
            "portdrift.1 lists {command}"
        );
        assert!(!text.contains("\\-V"), "portdrift-{command}.1 advertises -V");
        for section in ["EXIT STATUS", "ENVIRONMENT", "EXAMPLES", "SEE ALSO"] {
            assert!(
                text.contains(&format!(".SH \"{section}\"")) || text.contains(&format!(".SH {section}")),
                "portdrift-{command}.1 lacks {section}"
            );
        }
        assert!(
            text.contains("\\fB64\\fR"),
            "portdrift-{command}.1 lacks the usage status"
        );
    }
    let scan = page("portdrift-scan");
    for variable in ["NODE_NAME", "KUBECONFIG", "RUST_LOG"] {
        assert!(scan.contains(variable), "portdrift-scan.1 lacks {variable}");
    }
    // Every page SEE ALSO names is written.
    for name in ["portdrift", "portdrift-scan", "portdrift-run"] {
        assert!(dir.path().join(format!("man1/{name}.1")).exists());
    }
}

/// `docs/PAGE` is `now`, which `portdrift dev COMMAND` prints.
fn assert_generated_page(page: &str, command: &str, now: &str) {
    let written = std::fs::read_to_string(support::root().join("docs").join(page)).unwrap_or_default();
    assert!(
        written == now,
        "docs/{page} is out of date: regenerate it with `cargo run -- dev {command} > docs/{page}`"
    );
    // And it is what the binary prints.
    let out = support::portdrift(&["dev", command]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), now);
}

#[test]
fn the_cli_reference_is_up_to_date() {
    assert_generated_page("cli.md", "cli-reference", &portdrift::cli::cli_reference());
}

#[test]
fn the_metrics_reference_is_up_to_date_and_operate_explains_every_metric() {
    let now = portdrift::cli::metrics_reference();
    assert_generated_page("metrics.md", "metrics-reference", &now);
    // operate.md's table says how to read each one.
    let operate = std::fs::read_to_string(support::root().join("docs/operate.md")).unwrap();
    let names: Vec<&str> = now
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split_once('`').map(|(n, _)| n))
        .collect();
    assert!(names.len() > 30, "{names:?}");
    for name in names {
        assert!(
            operate.contains(&format!("`{name}`")),
            "docs/operate.md does not explain {name}"
        );
    }
}
