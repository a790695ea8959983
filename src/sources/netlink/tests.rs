use super::*;

#[test]
fn attributes_are_walked_with_bounds_checks() {
    let mut data = Vec::new();
    data.extend_from_slice(&6u16.to_ne_bytes());
    data.extend_from_slice(&1u16.to_ne_bytes());
    data.extend_from_slice(b"ab\0\0");
    data.extend_from_slice(&8u16.to_ne_bytes());
    data.extend_from_slice(&(2u16 | 0x8000).to_ne_bytes());
    data.extend_from_slice(&7u32.to_be_bytes());
    let attrs: Vec<_> = Attrs::new(&data).collect::<Result<_, _>>().unwrap();
    assert_eq!(attrs, vec![(1, &b"ab"[..]), (2, &7u32.to_be_bytes()[..])]);
    // A length past the end, a length below the header: errors, not panics.
    let mut bad = data.clone();
    bad[0] = 200;
    assert!(Attrs::new(&bad).any(|a| a.is_err()));
    assert!(Attrs::new(&[2, 0, 1, 0]).next().unwrap().is_err());
    assert!(Attrs::new(&[9]).next().unwrap().is_err());
}

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
