use super::*;

/// What `body` gives when it arrives cut at `cuts` (byte offsets): the metadata and
/// items as text, each taken before the next chunk is pushed, or the first error.
fn parts_of(body: &str, cuts: &[usize]) -> Result<(Vec<String>, Vec<String>), ListBodyError> {
    let bytes = body.as_bytes();
    let mut bounds = vec![0];
    bounds.extend(cuts.iter().copied().filter(|&c| c < bytes.len()));
    bounds.push(bytes.len());
    let (mut metadata, mut items) = (Vec::new(), Vec::new());
    let mut list = ListChunks::new();
    for pair in bounds.windows(2) {
        list.push(&bytes[pair[0]..pair[1]]);
        while let Some(part) = list.next_part()? {
            match part {
                ListPart::Metadata(text) => metadata.push(String::from_utf8(text.to_vec()).unwrap()),
                ListPart::Item(text) => items.push(String::from_utf8(text.to_vec()).unwrap()),
            }
        }
    }
    list.finish()?;
    Ok((metadata, items))
}

const LIST: &str = r#"{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"42"},"items":[{"metadata":{"name":"a\"}]{","resourceVersion":"7"},"spec":{"ports":[{"nodePort":30080}]}},{"metadata":{"name":"b"}} ]}"#;

#[test]
fn items_come_out_whole_wherever_the_chunks_are_cut() {
    let whole = parts_of(LIST, &[]).unwrap();
    assert_eq!(whole.0, [r#"{"resourceVersion":"42"}"#]);
    assert_eq!(
        whole.1,
        [
            r#"{"metadata":{"name":"a\"}]{","resourceVersion":"7"},"spec":{"ports":[{"nodePort":30080}]}}"#,
            r#"{"metadata":{"name":"b"}}"#,
        ]
    );
    // Every single cut, and every byte its own chunk: inside keys, strings, escapes,
    // between an element and its comma.
    for cut in 1..LIST.len() {
        assert_eq!(parts_of(LIST, &[cut]).unwrap(), whole, "cut at {cut}");
    }
    let every_byte: Vec<usize> = (1..LIST.len()).collect();
    assert_eq!(parts_of(LIST, &every_byte).unwrap(), whole);
}

#[test]
fn an_item_is_handed_out_as_soon_as_it_is_complete() {
    let mut list = ListChunks::new();
    let (head, tail) = LIST.split_at(LIST.find(r#",{"metadata":{"name":"b"#).unwrap() + 1);
    list.push(head.as_bytes());
    assert!(matches!(list.next_part(), Ok(Some(ListPart::Metadata(_)))));
    assert!(matches!(list.next_part(), Ok(Some(ListPart::Item(_)))));
    assert_eq!(list.next_part(), Ok(None));
    assert!(list.finish().is_err(), "not complete yet");
    // What was handed out is not kept: only the unfinished element's bytes remain.
    list.push(b"{");
    assert_eq!(list.input.len(), 1);
    list.push(&tail.as_bytes()[1..]);
    assert!(matches!(
        list.next_part(),
        Ok(Some(ListPart::Item(b"{\"metadata\":{\"name\":\"b\"}}")))
    ));
    assert_eq!(list.next_part(), Ok(None));
    assert_eq!(list.finish(), Ok(()));
}

#[test]
fn lists_without_items_and_in_any_key_order() {
    for body in [
        r#"{"kind":"List","metadata":{"resourceVersion":"1"},"items":[]}"#,
        r#" { "items" : null , "metadata" : { "resourceVersion" : "1" } } "#,
        "{\n  \"items\": [\n  ],\n  \"metadata\": {\"resourceVersion\": \"1\"}, \"n\": -1.5e3, \"t\": true\n}\n",
    ] {
        let (metadata, items) = parts_of(body, &[3, 11, 20]).unwrap();
        assert_eq!(items, Vec::<String>::new(), "{body}");
        assert_eq!(metadata.len(), 1, "{body}");
    }
    assert_eq!(parts_of("{}", &[1]).unwrap(), (vec![], vec![]));
}

#[test]
fn a_body_that_is_not_a_whole_list_is_an_error() {
    let truncated = &LIST[..LIST.len() - 2];
    assert_eq!(
        parts_of(truncated, &[40]),
        Err(ListBodyError::Truncated(truncated.len() as u64))
    );
    assert!(matches!(parts_of("[1,2]", &[]), Err(ListBodyError::NotAList(_))));
    assert!(matches!(
        parts_of(r#"{"items":{"a":1}}"#, &[]),
        Err(ListBodyError::NotAList(_))
    ));
    assert!(matches!(
        parts_of(r#"{"items":nope}"#, &[]),
        Err(ListBodyError::NotAList(_))
    ));
    // Structure the scanner checks, and a bad scalar serde_json finds in another field
    // (at the byte where it gave up).
    for (body, offset) in [
        (r#"{"items":[{}}"#, 12),
        (r#"{"items" [] }"#, 9),
        (r#"{"kind":"List"} x"#, 16),
        (r#"{"kind":tru,"items":[]}"#, 10),
    ] {
        match parts_of(body, &[5]) {
            Err(ListBodyError::Syntax { offset: at, .. }) => assert_eq!(at, offset, "{body}"),
            other => panic!("{body}: {other:?}"),
        }
    }
}

#[test]
fn a_long_list_keeps_one_element_at_a_time() {
    // 1,000 elements of 1 KiB, pushed in 4 KiB chunks: the buffer never holds more
    // than an element and a chunk.
    let element = format!(r#"{{"metadata":{{"name":"{}"}}}}"#, "x".repeat(1000));
    let body = format!(
        r#"{{"metadata":{{"resourceVersion":"9"}},"items":[{}]}}"#,
        vec![element.as_str(); 1000].join(",")
    );
    let mut list = ListChunks::new();
    let mut count = 0;
    let mut most = 0;
    for chunk in body.as_bytes().chunks(4096) {
        list.push(chunk);
        most = most.max(list.input.len());
        while let Some(part) = list.next_part().unwrap() {
            if let ListPart::Item(text) = part {
                assert_eq!(text, element.as_bytes());
                count += 1;
            }
        }
    }
    list.finish().unwrap();
    assert_eq!(count, 1000);
    assert!(most <= 4096 + element.len() + 1, "held {most} bytes");
}
