use super::*;
use crate::decode::netlink::{Attrs, NFPROTO_IPV4, NLM_F_REQUEST, split_message};

#[test]
fn messages_are_split_with_bounds_checks() {
    let request = encode_request(7, NLM_F_REQUEST, NFPROTO_IPV4, 7, &[(1, b"kube-proxy\0")]);
    assert_eq!(request.len() % 4, 0);
    let (header, payload, rest) = split_message(&request).unwrap();
    assert_eq!((header.kind, header.seq), ((10 << 8) | 7, 7));
    assert!(rest.is_empty());
    let attrs: Vec<_> = Attrs::new(&payload[4..]).collect::<Result<_, _>>().unwrap();
    assert_eq!(attrs, vec![(1, &b"kube-proxy\0"[..])]);
    assert!(split_message(&request[..10]).is_err());
    let mut long = request.clone();
    long[0] = 255;
    assert!(split_message(&long).is_err());
}
