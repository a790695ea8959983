use super::*;

fn collect(input: &[u8], max: usize) -> Vec<(u32, Vec<u8>, bool)> {
    let mut lines = BoundedLines::with_max(input, max);
    let mut out = Vec::new();
    while let Some(l) = lines.next_line().unwrap() {
        out.push((l.number, l.bytes.to_vec(), l.truncated));
    }
    out
}

#[test]
fn splits_and_numbers_lines() {
    let got = collect(b"a\r\nbb\n\nccc", 100);
    assert_eq!(
        got,
        vec![
            (1, b"a".to_vec(), false),
            (2, b"bb".to_vec(), false),
            (3, b"".to_vec(), false),
            (4, b"ccc".to_vec(), false)
        ]
    );
}

#[test]
fn cuts_long_lines_and_keeps_going() {
    let mut input = vec![b'x'; 10_000];
    input.extend_from_slice(b"\nnext\n");
    let got = collect(&input, 16);
    assert_eq!(got[0].1.len(), 16);
    assert!(got[0].2);
    assert_eq!(got[1], (2, b"next".to_vec(), false));
}

#[test]
fn excerpt_respects_char_boundaries() {
    assert_eq!(excerpt("ééé", 3), "é…");
    assert_eq!(excerpt("abc", 10), "abc");
}
