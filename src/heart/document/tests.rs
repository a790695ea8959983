use super::*;

#[derive(Serialize)]
struct Body {
    node: Option<String>,
    findings: Vec<u8>,
}

#[test]
fn the_envelope_comes_first_and_the_body_is_flat() {
    let body = Body {
        node: Some("worker-1".into()),
        findings: vec![],
    };
    let at: jiff::Timestamp = "2026-12-05T12:00:00.123Z".parse().unwrap();
    let json = serde_json::to_value(Document::new(DocumentKind::ScanReport, at, &body)).unwrap();
    assert_eq!(json["apiVersion"], "portdrift.io/v1");
    assert_eq!(json["kind"], "ScanReport");
    assert_eq!(json["generated_at"], "2026-12-05T12:00:00Z");
    assert_eq!(json["portdrift_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        (&json["node"], &json["findings"]),
        (&"worker-1".into(), &serde_json::json!([]))
    );
}
