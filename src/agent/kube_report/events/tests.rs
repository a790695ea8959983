use super::*;
use std::collections::BTreeSet;

fn finding(kind: Kind, severity: Severity, port: u16, service: Option<&str>) -> Finding {
    let mut f = Finding::new(kind, severity, format!("{kind} on {port}"));
    f.port = Some(port);
    f.service = service.map(str::to_string);
    f
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
    // The note is the message, then the finding's id, as its JSON and log line give it.
    assert_eq!(e.note, Some(format!("{} [finding {}]", f.message, f.id())));

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
fn a_note_carries_no_control_byte_from_the_node() {
    let mut f = finding(Kind::Squatter, Severity::Critical, 30080, None);
    f.message = "tcp/30080 is held by \x1b]0;owned\x07\x1b[31mevil\r (pid 7)".into();
    let note = EventDraft::of(&f).unwrap().note;
    assert_eq!(
        note,
        format!(
            "tcp/30080 is held by \\x1b]0;owned\\x07\\x1b[31mevil\\x0d (pid 7) [finding {}]",
            f.id()
        )
    );
}
