use super::*;

#[test]
fn sloppy_ip_parsing_matches_go() {
    assert_eq!(parse_ip_sloppy("10.0.0.1"), Some("10.0.0.1".parse().unwrap()));
    assert_eq!(
        parse_ip_sloppy("010.000.000.001"),
        Some("10.0.0.1".parse().unwrap())
    );
    assert_eq!(parse_ip_sloppy("fd00::1"), Some("fd00::1".parse().unwrap()));
    assert_eq!(
        parse_ip_sloppy("::ffff:10.0.0.1"),
        Some("10.0.0.1".parse().unwrap())
    );
    assert_eq!(parse_ip_sloppy("10.0.0"), None);
    assert_eq!(parse_ip_sloppy("10.0.0.256"), None);
    assert_eq!(parse_ip_sloppy("example.com"), None);
    assert_eq!(parse_ip_sloppy(""), None);
}
