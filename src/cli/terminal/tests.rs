use super::*;

#[test]
fn the_locale_decides_utf8() {
    let s = |v: &str| Some(v.to_string());
    assert!(utf8_locale(None, None, s("en_US.UTF-8")));
    assert!(utf8_locale(None, None, s("C.utf8")));
    assert!(utf8_locale(s("de_DE.UTF-8@euro"), s("C"), None));
    assert!(!utf8_locale(s("C"), None, s("en_US.UTF-8")), "LC_ALL wins");
    assert!(!utf8_locale(None, None, None), "no locale is C");
    assert!(!utf8_locale(None, None, s("POSIX")));
    assert!(
        !utf8_locale(None, s("en_US.ISO-8859-1"), s("en_US.UTF-8")),
        "LC_CTYPE before LANG"
    );
}

#[test]
fn colour_follows_the_flag_no_color_and_the_terminal() {
    assert!(colour(ColorWhen::Auto, true, false, Some("xterm-256color")));
    assert!(!colour(ColorWhen::Auto, true, true, Some("xterm")), "NO_COLOR");
    assert!(!colour(ColorWhen::Auto, true, false, Some("dumb")));
    assert!(!colour(ColorWhen::Auto, false, false, Some("xterm")), "a pipe");
    assert!(colour(ColorWhen::Always, false, true, None));
    assert!(!colour(ColorWhen::Never, true, false, Some("xterm")));
}

#[test]
fn columns_wins_and_a_pipe_is_not_wrapped() {
    assert_eq!(width(Some("80"), false), Some(80));
    assert_eq!(width(Some(" 132 "), true), Some(132));
    assert_eq!(width(None, false), None);
    assert_eq!(width(Some("0"), false), None);
    assert_eq!(width(Some("wide"), false), None);
}
