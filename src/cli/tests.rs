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
fn only_a_closed_pipe_ends_quietly() {
    let pipe = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
    assert!(is_closed_pipe(
        &anyhow::Error::new(pipe).context("writing the report")
    ));
    let json = serde_json::Error::io(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
    assert!(is_closed_pipe(&anyhow::Error::new(json)));
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
