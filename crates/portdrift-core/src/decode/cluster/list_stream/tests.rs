use super::*;

/// The List's kind and its items, each checked as JSON the way the reader does.
fn items_of(text: &str) -> Result<(Option<String>, Vec<String>), ClusterFileError> {
    let mut items = Vec::new();
    let kind = walk_list(text.as_bytes(), |event| {
        if let ListEvent::Item(bytes, at) = event {
            parse_slice::<IgnoredAny>(bytes, at)?;
            items.push(String::from_utf8_lossy(bytes).into_owned());
        }
        Ok(())
    })?;
    Ok((kind, items))
}

#[test]
fn cuts_items_of_every_shape() {
    let text = r#" {"items": [ {"a": "}]\"{", "b": [1, {"c": []}]}, "x\"]", 42, true ,null,[[]] ], "kind": "List"} "#;
    let (kind, items) = items_of(text).unwrap();
    assert_eq!(kind.as_deref(), Some("List"));
    assert_eq!(
        items,
        [
            r#"{"a": "}]\"{", "b": [1, {"c": []}]}"#,
            r#""x\"]""#,
            "42",
            "true",
            "null",
            "[[]]"
        ]
    );
}

#[test]
fn items_are_cut_across_buffer_boundaries() {
    let long = "x".repeat(BUFFER * 2 + 17);
    let numbers = "1,".repeat(BUFFER) + "1";
    // The value of "t" holds an escaped backslash, an escaped quote and a brace.
    let first = String::from(r#"{"s":""#) + &long + r#"","t":"a\\\"}b"}"#;
    let second = String::from(r#"{"n": ["#) + &numbers + "]}";
    let text = String::from(r#"{"kind":"List","items":["#) + &first + ", " + &second + "]}";
    let (_, items) = items_of(&text).unwrap();
    assert_eq!(items, [first, second]);
}

#[test]
fn errors_point_into_the_document() {
    let text = "{\n  \"kind\": \"List\",\n  \"items\": [\n    {\"a\": tru}\n  ]\n}";
    match items_of(text) {
        Err(ClusterFileError::Syntax { line, .. }) => assert_eq!(line, 4),
        other => panic!("{other:?}"),
    }
    match items_of("{\n\"items\": [\n{\"a\": 1") {
        Err(ClusterFileError::Truncated { line, .. }) => assert_eq!(line, 3),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_bom_is_skipped() {
    assert!(items_of("\u{feff}{\"kind\":\"List\",\"items\":[]}").is_ok());
}
