use super::*;

#[test]
fn handles_are_split_off_rules_and_headers() {
    assert_eq!(
        split_handle("\t\tjump services # handle 39"),
        ("\t\tjump services", Some(39))
    );
    assert_eq!(split_handle("chain x { # handle 9"), ("chain x {", Some(9)));
    assert_eq!(
        split_handle("drop comment \"# handle 5\""),
        ("drop comment \"# handle 5\"", None)
    );
}

#[test]
fn elements_keep_comments_and_ipv6_keys_apart() {
    let e = parse_element("tcp . 3006 comment \"ns6/svc6:p80\" : goto reject-chain", 7).unwrap();
    assert_eq!(e.key, "tcp . 3006");
    assert_eq!(e.comment.as_deref(), Some("ns6/svc6:p80"));
    assert!(matches!(e.verdict, ElementVerdict::Goto(ref c) if c == "reject-chain"));
    let e = parse_element("fd00:10:96::41 . tcp . 80 : goto service-X-ns/s/tcp/p", 1).unwrap();
    assert_eq!(e.key, "fd00:10:96::41 . tcp . 80");
    assert!(parse_element("172.30.0.41", 1).is_none());
}

#[test]
fn elements_span_lines() {
    let mut reader = ElementsReader::default();
    assert!(!reader.feed(" tcp . 1 : goto a,", 10));
    assert!(reader.feed("\t\t\t     tcp . 2 comment \"x, }\" : drop }", 11));
    assert_eq!(
        reader.items,
        vec![
            (10, "tcp . 1 : goto a".to_string()),
            (11, "tcp . 2 comment \"x, }\" : drop".to_string())
        ]
    );
}

#[test]
fn rules_give_jumps_and_dnats() {
    let (rule, problem) = lower_rule("numgen random mod 2 vmap { 0 : goto endpoint-a, 1 : goto endpoint-b }");
    assert_eq!(rule.jumps, vec!["endpoint-a", "endpoint-b"]);
    assert!(problem.is_none());
    let (rule, _) = lower_rule("meta l4proto tcp dnat to [fd00:10:180::1]:80");
    assert_eq!(rule.dnat.unwrap().addr, "[fd00:10:180::1]:80".parse().unwrap());
    let (rule, _) = lower_rule("tcp dport 8080 dnat ip to 10.1.1.1:80 comment \"dnat to 1.2.3.4:5\"");
    assert_eq!(rule.dnat.unwrap().addr, "10.1.1.1:80".parse().unwrap());
    let (rule, problem) = lower_rule("dnat to 10.0.0.1");
    assert!(rule.dnat.is_none() && problem.unwrap().contains("without a port"));
    let (_, problem) = lower_rule("dnat to ip daddr map @m");
    assert!(problem.unwrap().contains("computed"));
}
