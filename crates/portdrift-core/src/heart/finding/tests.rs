use super::*;

/// `Kind::ALL` is what the metrics export a gauge for and what tests/alerts.rs checks
/// every kind pages from: it lists the kinds in the order they are declared. A kind
/// declared among the others shifts their discriminants and fails this until it is
/// listed in its place; one declared last must take `IdleAcceptance`'s place below.
#[test]
fn all_lists_every_kind_in_declaration_order() {
    for (i, kind) in Kind::ALL.iter().enumerate() {
        assert_eq!(*kind as usize, i, "{kind}");
    }
    assert_eq!(Kind::MapNearlyFull as usize + 1, Kind::ALL.len());
    let names: std::collections::BTreeSet<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(names.len(), Kind::ALL.len(), "each kind's label is its own");
}

/// The identity as it was held in text before it had a type; its order is the order
/// Events are created in and the agent logs findings in.
fn identity_as_text(f: &Finding) -> (String, Option<u16>, String, String, String, String) {
    (
        f.kind.as_str().to_string(),
        f.port,
        f.protocol.map(|p| format!("{p:?}")).unwrap_or_default(),
        f.backend.map(|b| format!("{b:?}")).unwrap_or_default(),
        f.service.clone().unwrap_or_default(),
        format!("{}|{:?}", f.target.as_deref().unwrap_or(""), f.family),
    )
}

/// Findings that differ in every field of the identity, each in a few values: kinds
/// whose names sort unlike their declarations, absent and empty texts, a target that
/// begins a longer one.
fn varied_findings() -> Vec<Finding> {
    let text = |t: Option<&str>| t.map(str::to_string);
    let mut out = Vec::new();
    for kind in [Kind::StaleEndpoint, Kind::MissingRule] {
        for port in [None, Some(30080)] {
            for protocol in [
                None,
                Some(Protocol::Tcp),
                Some(Protocol::Udp),
                Some(Protocol::Sctp),
            ] {
                for backend in [
                    None,
                    Some(Backend::IptablesNft),
                    Some(Backend::IptablesLegacy),
                    Some(Backend::Nftables),
                ] {
                    for service in [None, Some(""), Some("shop/web")] {
                        for target in [None, Some(""), Some("10.0.0.1:80"), Some("10.0.0.1:8080")] {
                            for family in [None, Some(Family::Ipv4), Some(Family::Ipv6)] {
                                let mut f = Finding::new(kind, Severity::Warning, "m");
                                (f.port, f.protocol, f.backend, f.family) = (port, protocol, backend, family);
                                (f.service, f.target) = (text(service), text(target));
                                out.push(f);
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn identities_are_the_same_and_ordered_as_their_text_was() {
    let findings = varied_findings();
    let keys: Vec<_> = findings
        .iter()
        .map(|f| (f.identity(), identity_as_text(f)))
        .collect();
    for (id_a, text_a) in &keys {
        for (id_b, text_b) in &keys {
            assert_eq!(id_a.cmp(id_b), text_a.cmp(text_b), "{text_a:?} {text_b:?}");
            assert_eq!(id_a == id_b, text_a == text_b, "{text_a:?} {text_b:?}");
        }
    }
}

#[test]
fn the_id_is_the_digest_of_the_identity_and_ignores_what_it_leaves_out() {
    let mut f = Finding::new(Kind::StaleEndpoint, Severity::Critical, "stale");
    (f.port, f.service, f.target) = (Some(30080), Some("shop/web".into()), Some("10.0.0.1:80".into()));
    let mut later = f.clone();
    (later.severity, later.message, later.rule) = (Severity::Info, "settling".into(), Some("-A X".into()));
    assert_eq!(f.identity(), later.identity());
    assert_eq!(f.id(), later.id());
    assert_eq!(f.id().len(), 16);
    f.service = Some(String::new());
    later.service = None;
    assert_eq!((f.identity(), f.id()), (later.identity(), later.id()));
}

#[test]
fn a_finding_reads_back_from_its_json_and_from_an_older_agents() {
    let mut f = Finding::new(Kind::Squatter, Severity::Critical, "a listener on 30080");
    (f.protocol, f.port, f.family) = (Some(Protocol::Tcp), Some(30080), Some(Family::Ipv4));
    f.process = Some(ProcessInfo {
        pid: 42,
        name: "haproxy".into(),
        container: None,
        pod: None,
        exe: Some("/usr/sbin/haproxy".into()),
        uid: Some(0),
        cmdline: None,
    });
    (f.inode, f.evidence, f.ports) = (Some(7), vec!["seen".into()], vec![30080]);
    f.accepted = Some(Accepted {
        reason: "known".into(),
        expires: None,
        by: "acceptances entry 1".into(),
    });
    let json = serde_json::to_value(&f).unwrap();
    assert_eq!(serde_json::from_value::<Finding>(json).unwrap(), f);

    // Before `by`, and without the fields a finding need not hold.
    let older = serde_json::json!({"id": "0123456789abcdef", "kind": "orphan-chain", "severity": "info",
        "accepted": {"reason": "known", "expires": null}, "later": true});
    let read: Finding = serde_json::from_value(older).unwrap();
    assert_eq!(
        (read.kind, read.severity, read.message.as_str()),
        (Kind::OrphanChain, Severity::Info, "")
    );
    assert_eq!(read.accepted.map(|a| a.by), Some(String::new()));
}
