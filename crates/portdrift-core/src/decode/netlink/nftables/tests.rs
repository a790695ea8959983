use std::cmp::Ordering;
use std::sync::Arc;

use super::delinearize::prefix_len;
use super::sets::{
    NFT_SET_ANONYMOUS, NFT_SET_CONCAT, NFT_SET_CONSTANT, NFT_SET_INTERVAL, NFT_SET_MAP, NFT_SET_TIMEOUT,
    sort_unique,
};
use super::values::{TYPE_BITS, TYPE_INET_PROTOCOL, TYPE_INET_SERVICE};
use super::*;
use crate::decode::nftables::json::render_expr_string;

/// kube-proxy's `service-nodeports`: `inet_proto . inet_service : verdict`.
fn nodeports_map() -> SetInfo {
    SetInfo {
        handle: None,
        name: "service-nodeports".into(),
        flags: NFT_SET_MAP,
        key_type: (TYPE_INET_PROTOCOL << TYPE_BITS) | TYPE_INET_SERVICE,
        key_len: 8,
        size: None,
    }
}

#[test]
fn concatenated_keys_render_as_nft_prints_them() {
    let set = nodeports_map();
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

#[test]
fn recorded_messages_decode_as_nft_lists_the_tables() {
    let recorded = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/netlink/nft-kube-proxy.messages"
    ));
    let json = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/netlink/nft-kube-proxy.json"
    ));
    let decoded = decode_rule_dumps(recorded, "recorded").unwrap();
    let listed = crate::decode::nftables::parse_ruleset_json(json, "recorded").unwrap();
    assert_eq!(decoded.len(), 2);
    assert!(
        decoded
            .iter()
            .all(|s| s.has_kube_proxy && !s.nodeports.is_empty()),
        "{decoded:#?}"
    );
    assert_eq!(format!("{decoded:#?}"), format!("{listed:#?}"));
    assert!(decode_rule_dumps(&recorded[..recorded.len() - 3], "recorded").is_err());
}

#[test]
fn a_dump_repeating_a_key_is_told_apart() {
    let element = |port: u16| RawElement {
        key: [6, 0, 0, 0, (port >> 8) as u8, port as u8, 0, 0].to_vec(),
        data: ElementData::None,
        comment: None,
    };
    let mut set = nodeports_map();
    let mut dump = vec![element(30002), element(30000), element(30001)];
    assert!(sort_unique(&set, &mut dump), "distinct keys");
    let ports: Vec<u8> = dump.iter().map(|e| e.key[5]).collect();
    assert_eq!(ports, [0x30, 0x31, 0x32], "sorted by key");
    let mut disturbed = vec![element(30001), element(30000), element(30001)];
    assert!(!sort_unique(&set, &mut disturbed), "a key twice");
    // An interval set's range end may equal the next range's start.
    set.flags |= NFT_SET_INTERVAL;
    assert!(sort_unique(&set, &mut disturbed));
}

/// An anonymous constant map with 32-bit keys, as `numgen … vmap { … }` binds.
fn numgen_map() -> SetInfo {
    SetInfo {
        handle: Some(7),
        name: "__map0".into(),
        flags: NFT_SET_ANONYMOUS | NFT_SET_CONSTANT | NFT_SET_MAP,
        key_type: 0,
        key_len: 4,
        size: Some(3),
    }
}

#[test]
fn a_sets_flags_say_what_it_is() {
    let mut set = numgen_map();
    assert!(set.is_map() && set.is_anonymous() && set.is_constant_map() && set.has_single_keys());
    set.flags |= NFT_SET_TIMEOUT;
    assert!(!set.is_constant_map(), "elements that time out change");
    set.flags = NFT_SET_MAP | NFT_SET_CONCAT;
    assert!(set.is_map() && !set.is_anonymous() && !set.is_constant_map() && !set.has_single_keys());
}

fn element(key: u32, code: i32, chain: Option<&str>) -> RawElement {
    RawElement {
        key: key.to_ne_bytes().to_vec(),
        data: ElementData::Verdict {
            code,
            chain: chain.map(Arc::from),
        },
        comment: None,
    }
}

#[test]
fn kept_maps_give_back_the_elements_they_were_read_with() {
    let set = numgen_map();
    let goto = |key: u32| element(key, -4, Some(&format!("endpoint-{key}")));
    let maps = [
        // kube-proxy's endpoint dispatch: its chains are all that is kept.
        (vec![goto(0), goto(1), goto(2)], true),
        (vec![goto(0), goto(2)], false),
        (vec![goto(1), goto(2)], false),
        (vec![goto(0), element(1, -3, Some("endpoint-1"))], false),
        (vec![goto(0), element(1, 0, None)], false),
        (vec![], false),
    ];
    for (elements, numbered) in maps {
        let copy: Vec<RawElement> = elements
            .iter()
            .map(|e| RawElement {
                key: e.key.clone(),
                data: e.data.clone(),
                comment: None,
            })
            .collect();
        let (kept, entries) = KeptEntries::of(&set, elements);
        assert_eq!(matches!(kept, KeptEntries::Numbered { .. }), numbered, "{kept:?}");
        let read = format!("{:?}", inline_entries(&set, copy));
        assert_eq!(format!("{entries:?}"), read);
        assert_eq!(format!("{:?}", kept.entries(&set)), read);
    }
}

#[test]
fn kept_maps_take_the_names_they_are_given() {
    let set = numgen_map();
    let shared: Arc<str> = Arc::from("endpoint-0");
    for elements in [
        vec![element(0, -4, Some("endpoint-0"))],
        vec![element(5, -4, Some("endpoint-0"))],
    ] {
        let (mut kept, _) = KeptEntries::of(&set, elements);
        kept.share_names(&|name| (name == "endpoint-0").then(|| shared.clone()));
        let ElementData::Verdict {
            chain: Some(chain), ..
        } = &kept.entries(&set)[0].1
        else {
            panic!("{kept:?}")
        };
        assert!(Arc::ptr_eq(chain, &shared), "{kept:?}");
    }
}
