use super::*;
use crate::heart::citation::Citation;
use crate::heart::coverage::Coverage;
use crate::heart::finding::Accepted;
use crate::heart::input::Input;
use crate::heart::input_status::InputStatus;
use crate::heart::model::{Backend, Family, ProcessInfo, Protocol, ProxyMode};
use crate::heart::outcome::{InputState, ScanReport, Summary};

const INJECTED: &str = "<script>alert(1)</script>";

fn report(findings: Vec<Finding>, coverage: Coverage) -> ScanReport {
    let mut summary = Summary::default();
    for f in &findings {
        match (&f.accepted, f.severity) {
            (Some(_), _) => summary.accepted += 1,
            (None, Severity::Critical) => summary.critical += 1,
            (None, Severity::Warning) => summary.warning += 1,
            (None, Severity::Info) => summary.info += 1,
        }
    }
    ScanReport {
        node: Some("worker-2".into()),
        summary,
        findings,
        sources: Vec::new(),
        coverage,
        kube_proxy: None,
        kube_proxy_answered: Default::default(),
        acceptance_use: Vec::new(),
    }
}

/// A stale DNAT on tcp/31999 whose rule comment (and so its Service) carries a script.
fn injected() -> Finding {
    let mut f = Finding::new(
        Kind::StaleNodeport,
        Severity::Warning,
        "a NodePort rule for a port no Service owns",
    );
    f.protocol = Some(Protocol::Tcp);
    f.port = Some(31999);
    f.backend = Some(Backend::IptablesNft);
    f.family = Some(Family::Ipv4);
    f.service = Some(format!("shop/{INJECTED}"));
    f.target = Some("10.244.9.9:8080".into());
    f.rule = Some(format!(
        "-A KUBE-NODEPORTS -p tcp -m comment --comment \"shop/{INJECTED}:http\" -m tcp --dport 31999 -j DNAT --to-destination 10.244.9.9:8080"
    ));
    f.rule_source = Some(Citation::line("netlink: nf_tables ip (iptables-nft)", 12));
    f
}

/// A squatter on udp/30514, its process named with a control character.
fn squatter() -> Finding {
    let mut f = Finding::new(
        Kind::Squatter,
        Severity::Critical,
        "a process listens on udp/30514",
    );
    f.protocol = Some(Protocol::Udp);
    f.port = Some(30514);
    f.service = Some("logging/syslog-ingest".into());
    f.target = Some("10.244.3.61:5140".into());
    f.process = Some(ProcessInfo {
        pid: 4242,
        name: "rsyslog\x1b]0;owned\x07".into(),
        container: Some("containerd://0123abcd".into()),
        pod: Some("5e0f1b7a-0c1d".into()),
        exe: Some("/usr/sbin/rsyslogd".into()),
        uid: Some(0),
        cmdline: Some("rsyslogd -f /etc/secret.conf".into()),
    });
    f
}

fn context(view: View) -> PageContext {
    let scanned_at: jiff::Timestamp = "2025-11-30T00:00:00Z".parse().unwrap();
    PageContext {
        view,
        now: scanned_at + jiff::SignedDuration::from_secs(75),
        scanned_at,
        ready: true,
    }
}

/// What must never be in a page: a script, an event handler, a control character.
fn assert_inert(page: &str) {
    let lower = page.to_ascii_lowercase();
    for bad in [
        "<script",
        "javascript:",
        " onload",
        " onerror",
        " onclick",
        "<iframe",
        "<form",
    ] {
        assert!(!lower.contains(bad), "the page holds {bad}:\n{page}");
    }
    assert!(
        !page.chars().any(|c| c.is_control() && c != '\n'),
        "the page holds a control character:\n{page:?}"
    );
}

#[test]
fn escape_covers_the_five_characters_and_control_characters() {
    assert_eq!(
        escape("<a href=\"x\" title='y'>&</a>"),
        "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;"
    );
    assert_eq!(escape("\x1b[31mred\r"), "\\x1b[31mred\\x0d");
    assert!(matches!(escape("tcp/30080 shop/web"), Cow::Borrowed(_)));
}

#[test]
fn a_script_in_a_rule_comment_is_shown_as_text() {
    let page = render_page(
        &report(vec![injected(), squatter()], Coverage::full(ProxyMode::Iptables)),
        &context(View::Full),
    );
    assert_inert(&page);
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{page}");
    // In the Service's cell and in the rule's.
    assert!(
        page.contains("shop/&lt;script&gt;alert(1)&lt;/script&gt;</td>"),
        "{page}"
    );
    assert!(
        page.contains("--comment &quot;shop/&lt;script&gt;alert(1)&lt;/script&gt;:http&quot;"),
        "{page}"
    );
    // The control characters of the process name are shown, not sent.
    assert!(page.contains("rsyslog\\x1b]0;owned\\x07"), "{page}");
}

#[test]
fn the_full_view_lists_each_port_with_its_findings_and_an_explain_link() {
    let page = render_page(
        &report(vec![injected(), squatter()], Coverage::full(ProxyMode::Iptables)),
        &context(View::Full),
    );
    assert!(page.contains("<title>portdrift: node worker-2</title>"), "{page}");
    assert!(
        page.contains("<h2>Findings: 1 critical, 1 warning, 0 info</h2>"),
        "{page}"
    );
    assert!(!page.contains("No drift"), "{page}");
    // Critical ports first, as the text report orders them.
    let udp = page
        .find("<h3 id=\"udp-30514\">udp/30514")
        .expect("udp/30514's section");
    let tcp = page
        .find("<h3 id=\"tcp-31999\">tcp/31999")
        .expect("tcp/31999's section");
    assert!(udp < tcp, "{page}");
    for link in [
        "<a href=\"/explain?port=udp/30514&amp;format=text\">",
        "<a href=\"/explain?port=tcp/31999&amp;format=text\">",
        "<a href=\"/findings\">",
        "<a href=\"/metrics\">",
        "<a href=\"/healthz\">",
        "<a href=\"/readyz\">",
        "<a href=\"https://github.com/portdrift/portdrift/tree/main/docs\">",
    ] {
        assert!(page.contains(link), "no {link}:\n{page}");
    }
    for shown in [
        "<span class=\"sev critical\">critical</span>",
        "<span class=\"sev warning\">warning</span>",
        "stale-nodeport<br><small>iptables-nft ipv4</small>",
        "squatter",
        "<code class=\"t\">10.244.9.9:8080</code>",
        "<code class=\"t\">10.244.3.61:5140</code>",
        "owner rsyslog",
        "pid 4242",
        "a process listens on udp/30514",
        "Last scan finished 2025-11-30T00:00:00Z (1 min 15 s ago). Agent ready.",
    ] {
        assert!(page.contains(shown), "no {shown}:\n{page}");
    }
}

#[test]
fn an_accepted_finding_is_marked_and_not_counted() {
    let mut f = squatter();
    f.accepted = Some(Accepted {
        reason: "syslog drained <on purpose> (OPS-42)".into(),
        expires: None,
        by: "acceptances entry 1".into(),
    });
    let page = render_page(
        &report(vec![f], Coverage::full(ProxyMode::Iptables)),
        &context(View::Full),
    );
    assert!(
        page.contains("<tr class=\"accepted\"><td><span class=\"sev accepted\">accepted</span> <small>(critical)</small>"),
        "{page}"
    );
    assert!(
        page.contains("accepted: syslog drained &lt;on purpose&gt; (OPS-42); by acceptances entry 1"),
        "{page}"
    );
    assert!(
        page.contains("Findings: 0 critical, 0 warning, 0 info, 1 accepted"),
        "{page}"
    );
    assert!(
        !page.contains("No drift"),
        "an accepted finding is still a finding:\n{page}"
    );
}

#[test]
fn the_counts_view_names_no_address_rule_process_or_service() {
    let mut coverage = Coverage::full(ProxyMode::Iptables);
    coverage.complete = false;
    coverage.not_checked =
        vec!["1 object of the cluster state could not be read (first: Service shop/web at 10.96.4.4)".into()];
    coverage.proxy_mode_evidence = "kube-proxy at 10.0.0.7 said iptables".into();
    let mut r = report(vec![injected(), squatter()], coverage);
    r.sources = vec![InputStatus::new(
        Input::from_file_name("proc/net/udp").unwrap(),
        InputState::Ok,
    )];
    let page = render_page(&r, &context(View::CountsOnly));
    assert_inert(&page);
    for secret in [
        "10.244.9.9",
        "10.244.3.61",
        "10.96.4.4",
        "10.0.0.7",
        "KUBE-NODEPORTS",
        "alert(",
        "rsyslog",
        "4242",
        "0123abcd",
        "5e0f1b7a",
        "secret.conf",
        "shop/",
        "logging/",
        "31999",
        "30514",
        "proc/net",
        "/findings\"",
        "/explain?",
    ] {
        assert!(!page.contains(secret), "the counts view names {secret}:\n{page}");
    }
    assert!(
        page.contains("<h2>INCOMPLETE CHECK, not an all-clear</h2>"),
        "{page}"
    );
    assert!(page.contains("1 thing could not be checked"), "{page}");
    assert!(
        page.contains("In what was checked: 1 critical, 1 warning, 0 info"),
        "{page}"
    );
    assert!(
        page.contains("<tr><td>squatter</td><td class=\"n critical\">1</td><td class=\"n muted\">0</td>"),
        "{page}"
    );
    assert!(
        page.contains(
            "<tr><td>stale-nodeport</td><td class=\"n muted\">0</td><td class=\"n warning\">1</td>"
        ),
        "{page}"
    );
    assert!(page.contains("<a href=\"/metrics\">"), "{page}");
    assert!(page.contains("--findings-listen"), "{page}");
}

#[test]
fn no_drift_only_on_a_complete_check_that_found_nothing() {
    let clean = render_page(
        &report(Vec::new(), Coverage::full(ProxyMode::Iptables)),
        &context(View::Full),
    );
    assert!(clean.contains("<h2>No drift</h2>"), "{clean}");
    assert!(clean.contains(&escape(NO_DRIFT).into_owned()), "{clean}");
    let counts_view = render_page(
        &report(Vec::new(), Coverage::full(ProxyMode::Iptables)),
        &context(View::CountsOnly),
    );
    assert!(counts_view.contains("<h2>No drift</h2>"), "{counts_view}");

    // Nothing found, but the sockets were not read: never an all-clear, and what was
    // not checked comes before anything else is said.
    let mut coverage = Coverage::full(ProxyMode::Iptables);
    coverage.complete = false;
    coverage.not_checked = vec![
        "The listening sockets were not read (proc/net/tcp): squatters on NodePorts were not checked.".into(),
    ];
    let partial = render_page(&report(Vec::new(), coverage.clone()), &context(View::Full));
    assert!(!partial.contains("No drift"), "{partial}");
    let heading = partial
        .find("INCOMPLETE CHECK, not an all-clear")
        .expect("the heading");
    let sentence = partial
        .find("<li>The listening sockets were not read")
        .expect("the sentence");
    let counts = partial
        .find("In what was checked: 0 critical")
        .expect("the counts");
    assert!(heading < sentence && sentence < counts, "{partial}");
    assert!(partial.contains(NOTHING_FOUND_IN_CHECKED), "{partial}");
    let partial_counts = render_page(&report(Vec::new(), coverage), &context(View::CountsOnly));
    assert!(!partial_counts.contains("No drift"), "{partial_counts}");
    assert!(partial_counts.contains("INCOMPLETE CHECK"), "{partial_counts}");

    // Only info findings on a complete check: counted, but no all-clear either, as the
    // text report says none.
    let mut leftover = injected();
    leftover.severity = Severity::Info;
    let info = render_page(
        &report(vec![leftover], Coverage::full(ProxyMode::Iptables)),
        &context(View::Full),
    );
    assert!(!info.contains("No drift"), "{info}");
    assert!(info.contains("Findings: 0 critical, 0 warning, 1 info"), "{info}");
}

#[test]
fn many_info_findings_are_counted_not_listed() {
    let mut findings = vec![injected()];
    for port in 0..30 {
        let mut f = Finding::new(Kind::OrphanChain, Severity::Info, "an orphan chain");
        f.protocol = Some(Protocol::Tcp);
        f.port = Some(32000 + port);
        findings.push(f);
    }
    let page = render_page(
        &report(findings, Coverage::full(ProxyMode::Iptables)),
        &context(View::Full),
    );
    assert!(!page.contains("tcp/32000"), "{page}");
    assert!(
        page.contains("info: 30 orphan-chain (harmless leftovers"),
        "{page}"
    );
    assert!(page.contains("tcp/31999"), "{page}");
}

#[test]
fn the_starting_page_claims_nothing() {
    for view in [View::Full, View::CountsOnly] {
        let page = render_starting(view);
        assert_inert(&page);
        assert!(page.contains("No scan has completed yet"), "{page}");
        assert!(!page.contains("No drift"), "{page}");
        assert!(
            page.contains("<meta http-equiv=\"refresh\" content=\"5\">"),
            "{page}"
        );
        assert_eq!(page.contains("/findings"), view == View::Full, "{page}");
    }
}

#[test]
fn ages_read_as_people_say_them() {
    assert_eq!(age(0), "0 s");
    assert_eq!(age(-3), "0 s");
    assert_eq!(age(75), "1 min 15 s");
    assert_eq!(age(7500), "2 h 5 min");
}
