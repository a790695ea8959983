use std::time::Duration;

use super::*;
use crate::agent::watch::WatchStatus;
use crate::heart::coverage::Coverage;
use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::input::Input;
use crate::heart::model::{Backend, Family as IpFamily, Protocol};
use crate::heart::observed::{KubeProxyAnswered, KubeProxyHealth};
use crate::heart::outcome::{InputState, InputStatus};

fn finding(kind: Kind, severity: Severity, port: Option<u16>) -> Finding {
    let mut f = Finding::new(kind, severity, "test");
    f.port = port;
    f.protocol = port.map(|_| Protocol::Tcp);
    f.backend = port.map(|_| Backend::IptablesNft);
    f.service = port.map(|p| format!("ns/svc-{p}"));
    f
}

fn report(findings: Vec<Finding>) -> ScanReport {
    ScanReport {
        node: None,
        summary: Default::default(),
        findings,
        sources: Vec::new(),
        coverage: crate::heart::coverage::Coverage::full(crate::heart::model::ProxyMode::Iptables),
        kube_proxy: None,
        kube_proxy_answered: Default::default(),
        acceptance_use: Vec::new(),
    }
}

fn times(ms: u64) -> ScanTimes {
    ScanTimes {
        total: Duration::from_millis(ms),
        read_node: Duration::from_millis(ms / 2),
        build_desired: Duration::from_millis(ms / 4),
        detect: Duration::from_millis(ms / 4),
    }
}

/// The sample lines of `name` (with labels, without the value).
fn series<'t>(text: &'t str, name: &str) -> Vec<&'t str> {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .map(|l| l.rsplit_once(' ').map_or(l, |(s, _)| s))
        .collect()
}

fn assert_promtool(text: &str) {
    if let Some((ok, said)) = crate::testing::promtool::check(text) {
        assert!(ok, "promtool check metrics failed: {said}\n{text}");
    }
}

#[test]
fn encoded_metrics_pass_promtool() {
    let m = Metrics::new();
    let w = |k| Finding::new(k, Severity::Warning, "test");
    m.scan_done(
        &report(vec![w(Kind::StaleEndpoint), w(Kind::StaleEndpoint)]),
        &times(12),
        1.7e9,
    );
    m.scan_failed("node");
    m.set_api(true, false);
    let text = m.encode_text().unwrap();
    for needle in [
        "portdrift_findings{kind=\"stale-endpoint\"} 2",
        "portdrift_findings{kind=\"port-range-overlap\"} 0",
        "portdrift_scans_total 1",
        "portdrift_scan_errors_total{source=\"node\"} 1",
        "portdrift_scan_duration_seconds_bucket",
        "portdrift_last_scan_timestamp_seconds ",
        "portdrift_repairs_total{result=\"applied\"} 0",
        "portdrift_build_info{version=\"",
        ",revision=\"",
        ",rustc_version=\"",
        "portdrift_api_synced 1",
        "portdrift_api_fresh 0",
        "portdrift_events_total{result=\"dropped\"} 0",
        "portdrift_node_condition_patches_total{result=\"failed\"} 0",
    ] {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
    assert_promtool(&text);
    // A later scan without findings sets the gauge back to 0.
    m.scan_done(&report(vec![]), &times(1), 1.7e9);
    let text = m.encode_text().unwrap();
    assert!(
        text.contains("portdrift_findings{kind=\"stale-endpoint\"} 0"),
        "{text}"
    );
    assert!(m.encode_openmetrics().unwrap().ends_with("# EOF\n"));
}

#[test]
fn coverage_and_proxy_mode_follow_the_last_scan() {
    let m = Metrics::new();
    let text = m.encode_text().unwrap();
    assert!(series(&text, "portdrift_coverage_complete").is_empty(), "{text}");
    m.scan_done(&report(vec![]), &times(1), 1.7e9);
    let text = m.encode_text().unwrap();
    assert!(text.contains("portdrift_coverage_complete 1"), "{text}");
    assert!(text.contains("portdrift_coverage_not_checked 0"), "{text}");
    assert!(
        text.contains("portdrift_proxy_mode_info{mode=\"iptables\"} 1"),
        "{text}"
    );
    let mut incomplete = report(vec![]);
    incomplete.coverage = Coverage {
        proxy_mode: crate::heart::model::ProxyMode::Ipvs,
        proxy_mode_evidence: "chain KUBE-NODE-PORT".into(),
        cluster_state: false,
        complete: false,
        not_checked: vec!["a".into(), "b".into()],
    };
    m.scan_done(&incomplete, &times(1), 1.7e9);
    let text = m.encode_text().unwrap();
    assert!(text.contains("portdrift_coverage_complete 0"), "{text}");
    assert!(text.contains("portdrift_coverage_not_checked 2"), "{text}");
    // One mode at a time: the last scan's.
    assert_eq!(
        series(&text, "portdrift_proxy_mode_info"),
        ["portdrift_proxy_mode_info{mode=\"ipvs\"}"],
        "{text}"
    );
    assert_promtool(&text);
}

#[test]
fn phases_are_timed_and_findings_broken_down() {
    let m = Metrics::new();
    let mut split = finding(Kind::BackendSplit, Severity::Warning, None);
    split.backend = None;
    m.scan_done(
        &report(vec![
            finding(Kind::StaleEndpoint, Severity::Critical, Some(30514)),
            finding(Kind::StaleEndpoint, Severity::Critical, Some(30080)),
            split,
        ]),
        &times(40),
        1.7e9,
    );
    let text = m.encode_text().unwrap();
    for needle in [
        "portdrift_scan_phase_duration_seconds_count{phase=\"read-node\"} 1",
        "portdrift_scan_phase_duration_seconds_count{phase=\"build-desired\"} 1",
        "portdrift_scan_phase_duration_seconds_count{phase=\"detect\"} 1",
        "portdrift_scan_phase_duration_seconds_sum{phase=\"read-node\"} 0.02",
        "portdrift_findings_by_backend{kind=\"stale-endpoint\",backend=\"iptables-nft\"} 2",
        "portdrift_findings_by_backend{kind=\"backend-split\",backend=\"none\"} 1",
        "portdrift_findings_by_severity{kind=\"stale-endpoint\",severity=\"critical\"} 2",
        "portdrift_findings_by_severity{kind=\"backend-split\",severity=\"warning\"} 1",
        "portdrift_finding{kind=\"stale-endpoint\",severity=\"critical\",protocol=\"tcp\",port=\"30080\",service=\"ns/svc-30080\",backend=\"iptables-nft\"} 1",
        "portdrift_finding{kind=\"backend-split\",severity=\"warning\",protocol=\"\",port=\"\",service=\"\",backend=\"none\"} 1",
        "portdrift_findings_not_detailed 0",
    ] {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
    // Only combinations that occur are exported.
    assert_eq!(series(&text, "portdrift_findings_by_backend").len(), 2, "{text}");
    assert_promtool(&text);
}

#[test]
fn cleared_findings_leave_no_series() {
    let m = Metrics::new();
    m.scan_done(
        &report(vec![
            finding(Kind::StaleNodeport, Severity::Critical, Some(30001)),
            finding(Kind::Squatter, Severity::Warning, Some(30002)),
        ]),
        &times(4),
        1.7e9,
    );
    let text = m.encode_text().unwrap();
    assert_eq!(series(&text, "portdrift_finding").len(), 2, "{text}");
    // The squatter is gone; the stale rule stays.
    m.scan_done(
        &report(vec![finding(
            Kind::StaleNodeport,
            Severity::Critical,
            Some(30001),
        )]),
        &times(4),
        1.7e9,
    );
    let text = m.encode_text().unwrap();
    assert_eq!(
        series(&text, "portdrift_finding"),
        [
            "portdrift_finding{kind=\"stale-nodeport\",severity=\"critical\",protocol=\"tcp\",port=\"30001\",service=\"ns/svc-30001\",backend=\"iptables-nft\"}"
        ],
        "{text}"
    );
    assert!(!text.contains("kind=\"squatter\",backend"), "{text}");
    assert!(!text.contains("kind=\"squatter\",severity"), "{text}");
    assert!(text.contains("portdrift_findings{kind=\"squatter\"} 0"), "{text}");
    // All cleared.
    m.scan_done(&report(vec![]), &times(4), 1.7e9);
    let text = m.encode_text().unwrap();
    assert!(series(&text, "portdrift_finding").is_empty(), "{text}");
    assert!(
        series(&text, "portdrift_findings_by_backend").is_empty(),
        "{text}"
    );
    assert!(
        series(&text, "portdrift_findings_by_severity").is_empty(),
        "{text}"
    );
    assert_promtool(&text);
}

#[test]
fn the_cap_keeps_the_most_severe_lowest_ports_and_counts_the_rest() {
    let m = Metrics::with_max_series(3);
    let mut findings: Vec<Finding> = (0..10)
        .map(|i| finding(Kind::OrphanChain, Severity::Info, Some(30100 + i)))
        .collect();
    findings.push(finding(Kind::Squatter, Severity::Warning, Some(30000)));
    findings.push(finding(Kind::StaleEndpoint, Severity::Critical, Some(32000)));
    findings.push(finding(Kind::StaleEndpoint, Severity::Critical, Some(31000)));
    // The input order must not matter.
    findings.reverse();
    m.scan_done(&report(findings.clone()), &times(4), 1.7e9);
    let text = m.encode_text().unwrap();
    let shown: Vec<&str> = series(&text, "portdrift_finding")
        .into_iter()
        .map(|l| l.split("port=\"").nth(1).unwrap().split('"').next().unwrap())
        .collect();
    let mut shown_sorted = shown.clone();
    shown_sorted.sort_unstable();
    assert_eq!(shown_sorted, ["30000", "31000", "32000"], "{text}");
    assert!(text.contains("portdrift_findings_not_detailed 10"), "{text}");

    findings.reverse();
    let again = Metrics::with_max_series(3);
    again.scan_done(&report(findings), &times(4), 1.7e9);
    // The same series (the family's own order is a hash map's).
    let sorted = |text: &str| {
        let mut s: Vec<String> = series(text, "portdrift_finding")
            .into_iter()
            .map(str::to_string)
            .collect();
        s.sort_unstable();
        s
    };
    assert_eq!(sorted(&again.encode_text().unwrap()), sorted(&text));

    let off = Metrics::with_max_series(0);
    off.scan_done(
        &report(vec![finding(Kind::Squatter, Severity::Critical, Some(30000))]),
        &times(4),
        1.7e9,
    );
    let text = off.encode_text().unwrap();
    assert!(series(&text, "portdrift_finding").is_empty(), "{text}");
    assert!(text.contains("portdrift_findings_not_detailed 1"), "{text}");
}

fn status(source: &str, state: InputState, items: Option<usize>) -> InputStatus {
    let input = Input::all().find(|i| i.name() == source).unwrap();
    let mut s = InputStatus::new(input, state);
    s.items = items;
    s
}

#[test]
fn sources_rules_and_listeners_are_exported_with_bounded_labels() {
    let m = Metrics::new();
    let mut nft4 = status("nft.json", InputState::Ok, Some(3));
    nft4.backend = Some(Backend::Nftables);
    nft4.family = Some(IpFamily::Ipv4);
    let mut nft6 = status("nft.json", InputState::TimedOut, Some(0));
    nft6.backend = Some(Backend::Nftables);
    nft6.family = Some(IpFamily::Ipv6);
    let mut legacy = status("iptables-legacy-save.txt", InputState::Ok, Some(2));
    legacy.backend = Some(Backend::IptablesLegacy);
    legacy.family = Some(IpFamily::Ipv4);
    let mut r = report(vec![]);
    r.sources = vec![
        nft4,
        nft6,
        legacy,
        status("proc/net/tcp", InputState::Ok, Some(7)),
        status("proc/net/udp6", InputState::Ok, Some(1)),
        status("ip6tables-legacy-save.txt", InputState::Absent, None),
        status("bpf/cilium_lb4_services_v2.json", InputState::Failed, None),
        status("cluster (API server)", InputState::Ok, Some(5)),
    ];
    r.kube_proxy = Some(KubeProxyHealth {
        healthy: false,
        since_last_update: Some(Duration::from_secs(125)),
        node_eligible: Some(true),
        ..Default::default()
    });
    m.scan_done(&r, &times(4), 1.7e9);
    let text = m.encode_text().unwrap();
    for needle in [
        // One part of nft.json timed out: the source is down.
        "portdrift_source_up{source=\"nft.json\"} 0",
        "portdrift_source_up{source=\"iptables-legacy-save.txt\"} 1",
        "portdrift_source_up{source=\"ip6tables-legacy-save.txt\"} 1",
        // Each of Cilium's maps under its name in the report.
        "portdrift_source_up{source=\"bpf/cilium_lb4_services_v2.json\"} 0",
        "portdrift_source_up{source=\"cluster (API server)\"} 1",
        "portdrift_scan_errors_total{source=\"nft.json\"} 1",
        "portdrift_scan_errors_total{source=\"bpf/cilium_lb4_services_v2.json\"} 1",
        "portdrift_nodeport_rules{backend=\"nftables\",family=\"ipv4\"} 3",
        "portdrift_nodeport_rules{backend=\"iptables-legacy\",family=\"ipv4\"} 2",
        "portdrift_nodeport_rules{backend=\"iptables-nft\",family=\"ipv6\"} 0",
        "portdrift_listeners{protocol=\"tcp\",family=\"ipv4\"} 7",
        "portdrift_listeners{protocol=\"udp\",family=\"ipv6\"} 1",
        "portdrift_listeners{protocol=\"tcp\",family=\"ipv6\"} 0",
        "portdrift_kube_proxy_healthy 0",
        "portdrift_kube_proxy_last_sync_age_seconds 125",
        "portdrift_kube_proxy_node_eligible 1",
    ] {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
    assert!(!text.contains("source=\"other\""), "{text}");
    assert_promtool(&text);

    // A scan without kube-proxy's answer or those sources drops their series.
    m.scan_done(&report(vec![]), &times(4), 1.7e9);
    let text = m.encode_text().unwrap();
    assert!(series(&text, "portdrift_source_up").is_empty(), "{text}");
    assert!(series(&text, "portdrift_kube_proxy_healthy").is_empty(), "{text}");
    assert!(
        series(&text, "portdrift_kube_proxy_last_sync_age_seconds").is_empty(),
        "{text}"
    );
    assert!(
        text.contains("portdrift_nodeport_rules{backend=\"nftables\",family=\"ipv4\"} 0"),
        "{text}"
    );
    assert_promtool(&text);
}

/// A watch of 4 objects, fresh when heard from `ago` seconds back (under a minute).
fn watch(synced: bool, ago: Option<u64>, errors: u64) -> WatchStatus {
    WatchStatus {
        synced,
        fresh: synced && ago.is_some_and(|a| a < 60),
        failing: false,
        relisting: false,
        objects: 4,
        since_last_event: None,
        since_last_activity: ago.map(Duration::from_secs),
        relists: 0,
        errors,
        errors_by_kind: Default::default(),
        last_error: None,
    }
}

#[test]
fn api_watches_export_their_state_and_last_activity() {
    let m = Metrics::new();
    let view = ViewStatus {
        synced: true,
        fresh: false,
        staleness: Duration::from_secs(60),
        services: watch(true, Some(10), 0),
        endpoint_slices: watch(true, Some(300), 3),
        node: None,
    };
    m.set_api_watches(&view, 1000.0);
    let text = m.encode_text().unwrap();
    for needle in [
        "portdrift_api_watch_synced{resource=\"services\"} 1",
        "portdrift_api_watch_fresh{resource=\"endpointslices\"} 0",
        "portdrift_api_watch_objects{resource=\"services\"} 4",
        "portdrift_api_watch_last_activity_timestamp_seconds{resource=\"services\"} 990",
        "portdrift_api_watch_last_activity_timestamp_seconds{resource=\"endpointslices\"} 700",
        "portdrift_api_watch_errors_total{resource=\"endpointslices\"} 3",
    ] {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
    assert!(!text.contains("resource=\"node\""), "{text}");
    // The counter follows the view's count; a never-heard watch is at time 0.
    let view = ViewStatus {
        endpoint_slices: watch(true, None, 5),
        node: Some(watch(false, None, 0)),
        ..view
    };
    m.set_api_watches(&view, 2000.0);
    let text = m.encode_text().unwrap();
    for needle in [
        "portdrift_api_watch_errors_total{resource=\"endpointslices\"} 5",
        "portdrift_api_watch_last_activity_timestamp_seconds{resource=\"endpointslices\"} 0",
        "portdrift_api_watch_synced{resource=\"node\"} 0",
    ] {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
    assert_promtool(&text);
}

#[test]
fn the_process_is_described_as_go_exporters_describe_theirs() {
    let m = Metrics::with_max_series(10);
    let text = m.encode_text().unwrap();
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
            .parse()
            .unwrap()
    };
    let stat = std::fs::read_to_string("/proc/self/status").unwrap();
    let threads: f64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(value("process_resident_memory_bytes") > 1e6);
    assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
    assert!(value("process_cpu_seconds_total") >= 0.0);
    assert!(value("process_open_fds") >= 3.0);
    assert!(value("process_max_fds") >= value("process_open_fds"));
    assert!(value("process_threads") >= 1.0 && value("process_threads") <= threads + 64.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = value("process_start_time_seconds");
    assert!(
        started <= now + 1.0 && started > now - 3600.0,
        "{started} vs {now}"
    );
    // The agent's own stay under portdrift_.
    assert!(text.contains("portdrift_scans_total "));
    assert_promtool(&text);
}

/// Every family in an exposition where each has series, and every series, is as the
/// reference says: its name, type and help, and exactly its label names.
#[test]
fn the_reference_lists_every_metric_as_it_is_exposed() {
    let m = Metrics::new();
    let mut split = finding(Kind::StaleEndpoint, Severity::Warning, Some(30080));
    split.backend = Some(Backend::Nftables);
    let mut r = report(vec![split]);
    r.sources = vec![status("nft.json", InputState::Ok, Some(3))];
    r.kube_proxy = Some(KubeProxyHealth {
        healthy: true,
        since_last_update: Some(Duration::from_secs(5)),
        node_eligible: Some(true),
        ..Default::default()
    });
    r.kube_proxy_answered.healthz = Some(true);
    m.scan_done(&r, &times(4), 1.7e9);
    m.set_api_watches(
        &ViewStatus {
            synced: true,
            fresh: true,
            staleness: Duration::from_secs(60),
            services: watch(true, Some(1), 1),
            endpoint_slices: watch(true, Some(1), 1),
            node: None,
        },
        1000.0,
    );
    m.kube_report().over_budget.inc();
    let text = m.encode_text().unwrap();
    let docs = m.docs();
    // The text format's family name: a counter's is without `_total`, except a
    // collector's (as Go exporters name process_cpu_seconds_total).
    let is = |doc: &described::MetricDoc, name: &str| {
        doc.name == name || doc.name.strip_suffix("_total") == Some(name)
    };
    let mut seen = std::collections::BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            let doc = docs
                .iter()
                .find(|d| is(d, name))
                .unwrap_or_else(|| panic!("{name} is not in the reference"));
            assert_eq!(
                help.trim_end_matches('.'),
                doc.help.trim_end_matches('.'),
                "{name}"
            );
            seen.insert(doc.name.clone());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            let doc = docs.iter().find(|d| is(d, name)).unwrap();
            assert_eq!(kind, doc.kind, "{name}");
        } else if !line.starts_with('#') {
            let (series, _) = line.rsplit_once(' ').unwrap();
            let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
            let doc = docs
                .iter()
                .find(|d| {
                    name == d.name
                        || (d.kind == "histogram"
                            && ["_bucket", "_sum", "_count"]
                                .iter()
                                .any(|s| name.strip_suffix(s) == Some(d.name.as_str())))
                })
                .unwrap_or_else(|| panic!("series {series} is not in the reference"));
            let names: Vec<&str> = labels
                .trim_end_matches('}')
                .split(',')
                .filter(|l| !l.is_empty())
                .map(|l| l.split_once('=').unwrap().0)
                .filter(|&l| l != "le")
                .collect();
            assert_eq!(names, doc.labels, "{series}");
        }
    }
    let listed: std::collections::BTreeSet<String> = docs.iter().map(|d| d.name.clone()).collect();
    assert_eq!(seen, listed, "every metric in the reference has series here");
}

/// A kube-proxy that answers nothing is a 0 per endpoint, not a missing series; its
/// health stays unknown. An answer of any status is reachable. An endpoint not asked
/// has no series.
#[test]
fn an_unreachable_kube_proxy_is_a_zero_not_a_missing_series() {
    let m = Metrics::new();
    let mut r = report(vec![]);
    r.kube_proxy_answered = KubeProxyAnswered {
        healthz: Some(false),
        proxy_mode: Some(false),
    };
    m.scan_done(&r, &times(4), 1.7e9);
    let text = m.encode_text().unwrap();
    for needle in [
        "portdrift_kube_proxy_reachable{source=\"kube-proxy-healthz.json\"} 0",
        "portdrift_kube_proxy_reachable{source=\"kube-proxy-mode.txt\"} 0",
    ] {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
    assert!(series(&text, "portdrift_kube_proxy_healthy").is_empty(), "{text}");
    assert_promtool(&text);

    r.kube_proxy = Some(KubeProxyHealth {
        healthy: false,
        ..Default::default()
    });
    r.kube_proxy_answered = KubeProxyAnswered {
        healthz: Some(true),
        proxy_mode: None,
    };
    m.scan_done(&r, &times(4), 1.7e9);
    let text = m.encode_text().unwrap();
    assert_eq!(
        series(&text, "portdrift_kube_proxy_reachable"),
        ["portdrift_kube_proxy_reachable{source=\"kube-proxy-healthz.json\"}"],
        "{text}"
    );
    assert!(
        text.contains("portdrift_kube_proxy_reachable{source=\"kube-proxy-healthz.json\"} 1"),
        "{text}"
    );
    assert!(text.contains("portdrift_kube_proxy_healthy 0"), "{text}");

    m.scan_done(&report(vec![]), &times(4), 1.7e9);
    let text = m.encode_text().unwrap();
    assert!(
        series(&text, "portdrift_kube_proxy_reachable").is_empty(),
        "{text}"
    );
}
