use super::*;

#[test]
fn port_ranges_parse_and_reject_nonsense() {
    assert_eq!(parse_port_range("30000-32767"), Ok(30000..=32767));
    assert!(parse_port_range("32767-30000").is_err());
    assert!(parse_port_range("30000").is_err());
    assert!(parse_port_range("a-b").is_err());
}

#[test]
fn durations_parse_like_kubectl_flags() {
    assert_eq!(parse_duration("30s"), Ok(std::time::Duration::from_secs(30)));
    assert_eq!(parse_duration("2m"), Ok(std::time::Duration::from_secs(120)));
    assert_eq!(parse_duration("500ms"), Ok(std::time::Duration::from_millis(500)));
    assert_eq!(parse_duration("0s"), Ok(std::time::Duration::ZERO));
    assert!(parse_duration("soon").is_err());
}

#[test]
fn durations_sizes_and_addresses_parse() {
    assert_eq!(parse_timeout("10s"), Ok(Duration::from_secs(10)));
    assert_eq!(parse_timeout("500ms"), Ok(Duration::from_millis(500)));
    assert!(parse_timeout("0s").is_err());
    assert!(parse_timeout("soon").is_err());
    assert_eq!(parse_size("256M"), Ok(256 << 20));
    assert_eq!(parse_size("64KiB"), Ok(64 << 10));
    assert_eq!(parse_size("1000"), Ok(1000));
    assert!(parse_size("0").is_err());
    assert!(parse_size("12X").is_err());
    assert!(parse_size("99999999999G").is_err());
    assert_eq!(
        parse_healthz_addr("127.0.0.1:10256"),
        Ok(HealthzAddr(Some("127.0.0.1:10256".parse().unwrap())))
    );
    assert_eq!(parse_healthz_addr("off"), Ok(HealthzAddr(None)));
    assert!(parse_healthz_addr("localhost:10256").is_err());
}

#[test]
fn pod_uids_become_names_where_the_api_knows_them() {
    let process = |pod: Option<&str>| ProcessInfo {
        pid: 7,
        name: "squatterd".into(),
        container: None,
        pod: pod.map(str::to_string),
        cmdline: None,
    };
    let mut owners = HashMap::from([
        (1, process(Some("0f0e0d0c-0000-4000-8000-000000000001"))),
        (2, process(Some("0f0e0d0c-0000-4000-8000-00000000ffff"))),
        (3, process(None)),
    ]);
    let pods = HashMap::from([(
        "0f0e0d0c-0000-4000-8000-000000000001".to_string(),
        "edge/agent-x7k2p".to_string(),
    )]);
    name_pods(&mut owners, &pods);
    assert_eq!(owners[&1].pod.as_deref(), Some("edge/agent-x7k2p"));
    // A pod the API does not know (gone already) keeps its UID.
    assert_eq!(
        owners[&2].pod.as_deref(),
        Some("0f0e0d0c-0000-4000-8000-00000000ffff")
    );
    assert_eq!(owners[&3].pod, None);
}

#[test]
fn the_cli_definition_is_consistent() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}
