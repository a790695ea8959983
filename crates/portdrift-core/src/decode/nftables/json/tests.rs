use super::*;

fn statements(json: &str) -> Vec<Expr<'_>> {
    serde_json::from_str(json).unwrap()
}

#[test]
fn renders_kube_proxy_dnat_rules_as_nft_prints_them() {
    let s = statements(
        r#"[{"match":{"op":"==","left":{"meta":{"key":"l4proto"}},"right":"tcp"}},{"dnat":{"addr":"10.180.0.3","port":80}}]"#,
    );
    assert_eq!(render_rule(&s, None), "meta l4proto tcp dnat to 10.180.0.3:80");
    let s = statements(
        r#"[{"match":{"op":"==","left":{"meta":{"key":"l4proto"}},"right":"tcp"}},{"dnat":{"addr":"fd00::1","port":80,"family":"ip6"}}]"#,
    );
    assert_eq!(render_rule(&s, None), "meta l4proto tcp dnat ip6 to [fd00::1]:80");
    let (rule, problem) = lower_rule(&s);
    assert_eq!(rule.dnat.unwrap().addr, "[fd00::1]:80".parse().unwrap());
    assert!(problem.is_none());
}

#[test]
fn renders_numgen_vmaps_and_prefix_matches() {
    let s = statements(
        r#"[{"vmap":{"key":{"numgen":{"mode":"random","mod":2,"offset":0}},"data":{"set":[[0,{"goto":{"target":"a"}}],[1,{"goto":{"target":"b"}}]]}}}]"#,
    );
    assert_eq!(
        render_rule(&s, None),
        "numgen random mod 2 vmap { 0 : goto a, 1 : goto b }"
    );
    let (rule, _) = lower_rule(&s);
    assert_eq!(rule.jumps, vec!["a", "b"]);
    let s = statements(
        r#"[{"match":{"op":"!=","left":{"payload":{"protocol":"ip","field":"saddr"}},"right":{"prefix":{"addr":"10.0.0.0","len":8}}}},{"jump":{"target":"mark-for-masquerade"}}]"#,
    );
    assert_eq!(
        render_rule(&s, Some("c")),
        "ip saddr != 10.0.0.0/8 jump mark-for-masquerade comment \"c\""
    );
}

#[test]
fn unreadable_dnats_are_problems_not_targets() {
    let s = statements(r#"[{"dnat":{"addr":"10.0.0.1"}}]"#);
    let (rule, problem) = lower_rule(&s);
    assert!(rule.dnat.is_none());
    assert!(problem.unwrap().contains("without a port"));
    let s = statements(
        r#"[{"dnat":{"addr":{"map":{"key":{"payload":{"protocol":"tcp","field":"dport"}},"data":"@m"}},"port":80}}]"#,
    );
    assert!(lower_rule(&s).1.unwrap().contains("computed address"));
    let s = statements(r#"[{"dnat":{"addr":"10.0.0.1","port":99999}}]"#);
    assert!(lower_rule(&s).1.is_some());
}

#[test]
fn strings_with_escapes_are_owned_not_lost() {
    let e: Expr<'_> = serde_json::from_str(r#"{"goto":{"target":"endpoint-X-ns\/svc\/tcp\/p"}}"#).unwrap();
    assert_eq!(verdict_chain(&e).as_deref(), Some("endpoint-X-ns/svc/tcp/p"));
}
