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
