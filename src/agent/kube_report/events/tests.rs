use super::*;

fn finding(kind: Kind, severity: Severity, port: u16, service: Option<&str>) -> Finding {
    let mut f = Finding::new(kind, severity, format!("{kind} on {port}"));
    f.port = Some(port);
    f.service = service.map(str::to_string);
    f
}

fn gate(burst: u32, every: Duration, now: Instant) -> EventGate {
    EventGate::new(TokenBucket::new(burst, every, now))
}

#[test]
fn every_kind_has_an_upper_camel_case_reason_within_the_limit() {
    let mut seen = BTreeSet::new();
    for kind in Kind::ALL {
        let r = reason(kind);
        assert!(
            r.len() <= FIELD_LIMIT && r.chars().all(|c| c.is_ascii_alphanumeric()),
            "{r}"
        );
        assert!(r.starts_with(|c: char| c.is_ascii_uppercase()), "{r}");
        assert!(seen.insert(r), "{r} twice");
    }
    assert_eq!(reason(Kind::BackendSplit), "IptablesBackendSplit");
    assert_eq!(reason(Kind::MissingRule), "MissingNodePortRule");
}

#[test]
fn warnings_and_criticals_qualify_info_pending_and_stale_do_not() {
    assert!(qualifies(&finding(
        Kind::StaleEndpoint,
        Severity::Critical,
        1,
        None
    )));
    assert!(qualifies(&finding(
        Kind::MissingEndpoint,
        Severity::Warning,
        1,
        None
    )));
    assert!(!qualifies(&finding(Kind::OrphanChain, Severity::Info, 1, None)));
    let mut pending = finding(Kind::MissingRule, Severity::Info, 1, None);
    pending.pending_seconds = Some(12);
    assert!(!qualifies(&pending));
    let mut stale = finding(Kind::MissingRule, Severity::Critical, 1, None);
    stale.on_stale_cluster_state = true;
    assert!(!qualifies(&stale));
}

#[test]
fn a_service_finding_regards_the_service_a_node_finding_the_node() {
    let f = finding(Kind::StaleEndpoint, Severity::Critical, 30080, Some("shop/web"));
    assert_eq!(
        regarding(&f),
        Regarding::Service {
            namespace: "shop".into(),
            name: "web".into()
        }
    );
    assert_eq!(
        regarding(&finding(Kind::Squatter, Severity::Warning, 31000, None)),
        Regarding::Node
    );
    // A malformed name is not guessed at.
    assert_eq!(
        regarding(&finding(Kind::Squatter, Severity::Warning, 31000, Some("web"))),
        Regarding::Node
    );
}

#[test]
fn an_event_regards_its_object_in_its_namespace_and_names_the_node() {
    let f = finding(Kind::StaleEndpoint, Severity::Critical, 30080, Some("shop/web"));
    let draft = EventDraft::of(&f).unwrap();
    let service = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Service".into()),
        namespace: Some("shop".into()),
        name: Some("web".into()),
        uid: Some("u-1".into()),
        ..ObjectReference::default()
    };
    let stamp = Timestamp::from_second(1_800_000_000).unwrap();
    let e = k8s_event(
        &draft,
        service.clone(),
        Some(node_reference("worker-1")),
        "worker-1",
        stamp,
    );
    assert_eq!(e.metadata.namespace.as_deref(), Some("shop"));
    assert_eq!(e.metadata.name, Some(format!("web.{:x}", stamp.as_nanosecond())));
    assert_eq!(e.regarding, Some(service));
    assert_eq!(e.related.unwrap().uid.as_deref(), Some("worker-1"));
    assert_eq!(
        (e.type_.as_deref(), e.reason.as_deref(), e.action.as_deref()),
        (Some("Warning"), Some("StaleEndpointRule"), Some(ACTION))
    );
    assert_eq!(e.reporting_controller.as_deref(), Some("portdrift"));
    assert_eq!(e.reporting_instance.as_deref(), Some("worker-1"));
    assert_eq!(e.note.as_deref(), Some(f.message.as_str()));

    let long_node = "n".repeat(300);
    let e = k8s_event(&draft, node_reference(&long_node), None, &long_node, stamp);
    assert_eq!(
        e.metadata.namespace.as_deref(),
        Some("default"),
        "a Node's Events live in default"
    );
    assert!(e.metadata.name.unwrap().len() <= 253);
    assert_eq!(e.reporting_instance.unwrap().len(), FIELD_LIMIT);
}

#[test]
fn long_notes_are_cut_on_a_character_boundary() {
    let long = "é".repeat(NOTE_LIMIT);
    let cut = truncate(&long, NOTE_LIMIT);
    assert!(cut.len() <= NOTE_LIMIT && cut.ends_with('…'), "{}", cut.len());
    assert_eq!(truncate("short", NOTE_LIMIT), "short");
}

#[test]
fn a_persisting_finding_makes_one_event_and_a_returning_one_another() {
    let t0 = Instant::now();
    let mut g = gate(25, Duration::from_secs(10), t0);
    let f = finding(Kind::StaleEndpoint, Severity::Critical, 30080, Some("shop/web"));
    let first = g.admit(std::slice::from_ref(&f), t0);
    assert_eq!(first.events.len(), 1);
    assert_eq!(first.events[0].reason, "StaleEndpointRule");
    assert_eq!(first.events[0].type_, "Warning");
    assert!(g.admit(std::slice::from_ref(&f), t0).events.is_empty());
    // Reworded, it is still the same finding.
    let mut reworded = f.clone();
    reworded.message.push_str(" (again)");
    assert!(g.admit(&[reworded], t0).events.is_empty());
    assert!(g.admit(&[], t0).events.is_empty());
    assert_eq!(g.admit(&[f], t0).events.len(), 1);
}

#[test]
fn a_pending_finding_gets_its_event_when_its_grace_ends() {
    let t0 = Instant::now();
    let mut g = gate(25, Duration::from_secs(10), t0);
    let mut f = finding(Kind::MissingRule, Severity::Info, 30081, Some("shop/api"));
    f.pending_seconds = Some(20);
    assert!(g.admit(std::slice::from_ref(&f), t0).events.is_empty());
    f.pending_seconds = None;
    f.severity = Severity::Critical;
    assert_eq!(g.admit(&[f], t0).events.len(), 1);
}

#[test]
fn a_burst_beyond_the_bucket_is_capped_counted_and_reported_once() {
    let t0 = Instant::now();
    let mut g = gate(3, Duration::from_secs(10), t0);
    let many: Vec<Finding> = (0..5)
        .map(|i| finding(Kind::StaleNodeport, Severity::Warning, 30000 + i, None))
        .collect();
    let a = g.admit(&many, t0);
    assert_eq!(
        (a.events.len(), a.dropped, a.drops_began, a.drops_ended),
        (3, 2, true, None)
    );
    // The dropped ones persist: no Event, no new drop.
    let b = g.admit(&many, t0 + Duration::from_secs(1));
    assert_eq!((b.events.len(), b.dropped, b.drops_began), (0, 0, false));
    // Still empty: a new finding is dropped, but the run of drops goes on (no new log).
    let mut more = many.clone();
    more.push(finding(Kind::StaleNodeport, Severity::Warning, 30010, None));
    let c = g.admit(&more, t0 + Duration::from_secs(2));
    assert_eq!((c.events.len(), c.dropped, c.drops_began), (0, 1, false));
    // One token later, the next new finding passes and the run's count is reported.
    more.push(finding(Kind::StaleNodeport, Severity::Warning, 30011, None));
    let d = g.admit(&more, t0 + Duration::from_secs(12));
    assert_eq!((d.events.len(), d.drops_ended), (1, Some(3)));
}

#[test]
fn the_bucket_refills_one_token_per_period_up_to_its_capacity() {
    let t0 = Instant::now();
    let mut b = TokenBucket::new(2, Duration::from_secs(10), t0);
    assert!(b.try_take(t0) && b.try_take(t0) && !b.try_take(t0));
    assert!(!b.try_take(t0 + Duration::from_secs(9)));
    assert!(b.try_take(t0 + Duration::from_secs(10)));
    assert!(!b.try_take(t0 + Duration::from_secs(15)));
    // A long quiet time fills it to capacity, not beyond.
    let later = t0 + Duration::from_secs(1000);
    assert!(b.try_take(later) && b.try_take(later) && !b.try_take(later));
}
