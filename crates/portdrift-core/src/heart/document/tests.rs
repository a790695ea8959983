use super::*;

#[derive(Serialize)]
struct Body {
    findings: Vec<u8>,
}

#[test]
fn the_envelope_comes_first_and_the_body_is_flat() {
    let body = Body { findings: vec![] };
    let at: jiff::Timestamp = "2026-12-05T12:00:00.123Z".parse().unwrap();
    let document = Document::new(DocumentKind::ScanReport, Some("worker-1"), at, &body);
    let text = serde_json::to_string(&document).unwrap();
    let keys = [
        "apiVersion",
        "kind",
        "generated_at",
        "portdrift_version",
        "node",
        "findings",
    ];
    let positions: Vec<usize> = keys
        .iter()
        .map(|k| {
            text.find(&format!("\"{k}\""))
                .unwrap_or_else(|| panic!("no {k}: {text}"))
        })
        .collect();
    assert!(positions.is_sorted(), "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["apiVersion"], "portdrift.io/v1");
    assert_eq!(json["kind"], "ScanReport");
    assert_eq!(json["generated_at"], "2026-12-05T12:00:00Z");
    assert_eq!(json["portdrift_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        (&json["node"], &json["findings"]),
        (&"worker-1".into(), &serde_json::json!([]))
    );
}

#[test]
fn a_document_about_no_node_says_null() {
    let at: jiff::Timestamp = "2026-12-05T12:00:00Z".parse().unwrap();
    let json = serde_json::to_value(Document::new(
        DocumentKind::FleetView,
        None,
        at,
        &Body { findings: vec![] },
    ))
    .unwrap();
    assert_eq!(json.get("node"), Some(&serde_json::Value::Null), "{json}");
}
