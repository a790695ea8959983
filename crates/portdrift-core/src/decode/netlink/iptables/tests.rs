use crate::decode::netlink::prefix_len;

#[test]
fn masks_give_prefix_lengths() {
    assert_eq!(prefix_len(&[255, 255, 240, 0]), Some(20));
    assert_eq!(prefix_len(&[255, 0, 255, 0]), None);
}

#[test]
fn recorded_messages_render_as_the_live_read_rendered_them() {
    let recorded = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/netlink/iptables-nft-ipv4.messages"
    ));
    let expected = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/netlink/iptables-nft-ipv4.save"
    ));
    let mut lines = Vec::new();
    super::render_save(crate::heart::model::Family::Ipv4, recorded, &mut |l| {
        lines.push(l.to_string())
    })
    .unwrap();
    assert_eq!(lines, expected.lines().collect::<Vec<_>>());
    // The other family's read had nothing of these; a cut message is an error.
    let mut none = Vec::new();
    super::render_save(crate::heart::model::Family::Ipv6, recorded, &mut |l| {
        none.push(l.to_string())
    })
    .unwrap();
    assert!(none.is_empty());
    let cut = &recorded[..recorded.len() - 3];
    assert!(super::render_save(crate::heart::model::Family::Ipv4, cut, &mut |_| {}).is_err());
}

#[test]
fn a_handle_in_front_of_a_rule_comes_off_and_a_save_line_is_left_whole() {
    use super::split_handle;
    let rule = "-A KUBE-NODEPORTS -p tcp -m tcp --dport 30080 -j KUBE-EXT-X";
    assert_eq!(
        split_handle(&format!("95 {rule}")),
        (std::num::NonZeroU64::new(95), rule)
    );
    for whole in [
        rule,
        ":KUBE-NODEPORTS - [0:0]",
        "*nat",
        "COMMIT",
        "# Completed",
        "",
        "95",
    ] {
        assert_eq!(split_handle(whole), (None, whole));
    }
    // Handle 0 is no handle (the kernel never gives one).
    assert_eq!(split_handle(&format!("0 {rule}")), (None, rule));
}
