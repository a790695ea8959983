use super::*;

#[test]
fn the_finder_sees_needles_across_chunks() {
    let needle: &'static [u8] = br#"{"table":"#;
    let text = br#"{"nftables": [{"metainfo": {}}, {"table": {"family": "ip"}}]}"#;
    for size in 1..text.len() {
        let mut f = Finder {
            needle,
            carry: Vec::new(),
            found: false,
        };
        for chunk in text.chunks(size) {
            f.feed(chunk);
        }
        assert!(f.found, "chunks of {size}");
    }
    let mut f = Finder {
        needle,
        carry: Vec::new(),
        found: false,
    };
    for chunk in br#"{"nftables": [{"rule": {"family": "ip", "table": "nat"}}]}"#.chunks(3) {
        f.feed(chunk);
    }
    assert!(!f.found);
}
