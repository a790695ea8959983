use super::*;
use crate::decode::netlink::{Attrs, NFPROTO_IPV4, split_message};

#[test]
fn a_request_is_split_again_with_bounds_checks() {
    let request = rules(Family::Ipv4, "kube-proxy", "services").encode(7);
    assert_eq!(request.len() % 4, 0);
    let (header, payload, rest) = split_message(&request).unwrap();
    assert_eq!((header.kind, header.flags, header.seq), ((10 << 8) | 7, 0x301, 7));
    assert!(rest.is_empty());
    assert_eq!(payload[0], NFPROTO_IPV4);
    let attrs: Vec<_> = Attrs::new(&payload[4..]).collect::<Result<_, _>>().unwrap();
    assert_eq!(attrs, vec![(1, &b"kube-proxy\0"[..]), (2, &b"services\0"[..])]);
    assert!(split_message(&request[..10]).is_err());
    let mut long = request.clone();
    long[0] = 255;
    assert!(split_message(&long).is_err());
}

#[test]
fn each_request_asks_for_its_answer() {
    assert_eq!(generation().answer(), Answer::One);
    assert_eq!(table(Family::Ipv6, "nat").answer(), Answer::One);
    assert_eq!(chains(Family::Ipv4).answer(), Answer::Dump);
    assert_eq!(sets(Family::Ipv4, "kube-proxy").answer(), Answer::Dump);
    assert_eq!(
        set_elements(Family::Ipv4, "kube-proxy", "m").answer(),
        Answer::Dump
    );
    let by_key = set_elements_by_key(Family::Ipv4, "kube-proxy", "__map1", 3);
    assert_eq!(by_key.answer(), Answer::UntilAck);
    let encoded = by_key.encode(1);
    let (header, payload, _) = split_message(&encoded).unwrap();
    assert_eq!(header.flags, 0x5);
    let attrs: Vec<_> = Attrs::new(&payload[4..]).collect::<Result<_, _>>().unwrap();
    assert_eq!(attrs.len(), 3);
    // Three keys, each a list element holding a key holding a value.
    assert_eq!(Attrs::new(attrs[2].1).count(), 3);
}
