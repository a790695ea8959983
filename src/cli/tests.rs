use super::*;

#[test]
fn the_cli_definition_is_consistent() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}

#[test]
fn an_error_prints_each_cause_once() {
    #[derive(Debug, thiserror::Error)]
    #[error("cannot read x.yaml: {source}")]
    struct Read {
        source: std::io::Error,
    }
    let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
    let error = anyhow::Error::new(Read { source: io }).context("lint failed");
    assert_eq!(
        error_chain(&error),
        "lint failed: cannot read x.yaml: No such file or directory"
    );
    let plain = anyhow::anyhow!("one").context("two");
    assert_eq!(error_chain(&plain), "two: one");
}

#[test]
fn only_a_closed_standard_output_ends_quietly() {
    let closed = std::io::Error::new(std::io::ErrorKind::BrokenPipe, OutputClosed);
    assert!(is_closed_pipe(
        &anyhow::Error::new(closed).context("writing the report")
    ));
    // A broken pipe elsewhere (a socket) is a failure, not a closed output.
    let socket = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
    assert!(!is_closed_pipe(&anyhow::Error::new(socket)));
    let other = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
    assert!(!is_closed_pipe(&anyhow::Error::new(other)));
}

#[test]
fn a_log_level_is_a_level_or_a_filter_by_module() {
    for good in ["info", "debug", "warn,portdrift::sources=debug", "off"] {
        assert_eq!(parse_log_level(good).as_deref(), Ok(good));
    }
    for bad in ["loud", "portdrift=loud", "info,=debug="] {
        assert!(parse_log_level(bad).is_err(), "{bad}");
    }
}

#[test]
fn scan_and_run_share_their_repair_flags_and_find_the_node_alike() {
    let parse = |args: &[&str]| {
        <Cli as clap::Parser>::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    };
    let Command::Scan(scan) = parse(&["portdrift", "scan", "--repair", "--dry-run"]).command else {
        panic!("not scan")
    };
    // The old name still works.
    assert!(scan.repair.repair_dry_run);
    let Command::Run(run) = parse(&["portdrift", "run", "--repair", "--repair-dry-run"]).command else {
        panic!("not run")
    };
    assert!(run.repair.repair_dry_run);
    assert_eq!(scan.repair.repair_nudge_wait, run.repair.repair_nudge_wait);

    // Without --node or NODE_NAME, the host's name under --proc-root, as scan reads it.
    let proc = tempfile::TempDir::new().unwrap();
    let root = proc.path().to_str().unwrap();
    let agent = |args: &[&str]| match parse(args).command {
        Command::Run(run) => run.agent_config(),
        _ => unreachable!(),
    };
    if let Ok(node) = std::env::var("NODE_NAME") {
        // Run inside a pod that sets it: it wins over the host's name.
        assert_eq!(
            agent(&["portdrift", "run", "--proc-root", root]).unwrap().node,
            node
        );
        return;
    }
    let missing = agent(&["portdrift", "run", "--proc-root", root]).unwrap_err();
    assert!(missing.to_string().contains("--node or NODE_NAME"), "{missing}");
    std::fs::create_dir_all(proc.path().join("sys/kernel")).unwrap();
    std::fs::write(proc.path().join("sys/kernel/hostname"), "worker-7\n").unwrap();
    assert_eq!(
        agent(&["portdrift", "run", "--proc-root", root]).unwrap().node,
        "worker-7"
    );
    let named = agent(&["portdrift", "run", "--proc-root", root, "--node", "worker-1"]);
    assert_eq!(named.unwrap().node, "worker-1");
}
