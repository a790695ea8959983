use super::*;

#[test]
fn terminal_controls_are_shown_not_obeyed() {
    let comment = "default/web:http\x1b]0;owned\x07\x1b[31m red\r\x08\x00\u{9b}2J";
    assert_eq!(
        visible(comment),
        "default/web:http\\x1b]0;owned\\x07\\x1b[31m red\\x0d\\x08\\x00\\x9b2J"
    );
    assert_eq!(visible("a\nb\tc"), "a\\x0ab\\x09c");
    assert_eq!(visible_lines("a\nb\x1b"), "a\nb\\x1b");
}

#[test]
fn plain_text_is_borrowed_unchanged() {
    for s in [
        "",
        "tcp/30080 → 10.244.1.5:8080",
        "default/nginx: cluster IP",
        "ü€",
    ] {
        assert!(matches!(visible(s), Cow::Borrowed(t) if t == s));
    }
}

#[test]
fn bytes_that_are_not_utf8_are_named() {
    assert_eq!(
        visible_bytes(b"\x7fELF\x02\x01\xff\xfe ok \xc3\xa9"),
        "\\x7fELF\\x02\\x01\\xff\\xfe ok é"
    );
    assert_eq!(visible_bytes(b"cut \xe2\x82"), "cut \\xe2\\x82");
}
