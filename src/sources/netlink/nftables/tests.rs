use super::*;

#[test]
fn concatenated_keys_render_as_nft_prints_them() {
    let set = SetInfo {
        handle: None,
        name: "service-nodeports".into(),
        flags: NFT_SET_MAP,
        key_type: (TYPE_INET_PROTOCOL << TYPE_BITS) | TYPE_INET_SERVICE,
        key_len: 8,
        size: None,
    };
    let key = [6, 0, 0, 0, 0x75, 0x30, 0, 0];
    assert_eq!(render_expr_string(&key_expr(&set, &key)), "tcp . 30000");
    let other = [17, 0, 0, 0, 0x00, 0x35, 0, 0];
    // 30000 is 0x7530, 53 is 0x0035: the port's low byte decides (0x30 < 0x35),
    // before the protocol.
    assert_eq!(compare_keys(&key, &other), Ordering::Less);
    assert_eq!(render_expr_string(&key_expr(&set, &key[..3])), "0x060000");
}

#[test]
fn masks_give_prefix_lengths() {
    assert_eq!(prefix_len(&[255, 0, 0, 0]), Some(8));
    assert_eq!(prefix_len(&[255, 255, 255, 128]), Some(25));
    assert_eq!(prefix_len(&[0, 0x40, 0, 0]), None);
    assert_eq!(prefix_len(&[]), None);
}

#[test]
fn element_comments_come_from_user_data() {
    assert_eq!(
        udata_comment(&[0, 4, b'a', b'/', b'b', 0]).as_deref(),
        Some("a/b")
    );
    assert_eq!(udata_comment(&[1, 1, 9, 0, 2, b'x', 0]).as_deref(), Some("x"));
    assert_eq!(udata_comment(&[0, 9, b'a']), None);
}
