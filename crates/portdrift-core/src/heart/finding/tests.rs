use super::*;

/// `Kind::ALL` is what the metrics export a gauge for and what tests/alerts.rs checks
/// every kind pages from: it lists the kinds in the order they are declared. A kind
/// declared among the others shifts their discriminants and fails this until it is
/// listed in its place; one declared last must take `IdleAcceptance`'s place below.
#[test]
fn all_lists_every_kind_in_declaration_order() {
    for (i, kind) in Kind::ALL.iter().enumerate() {
        assert_eq!(*kind as usize, i, "{kind}");
    }
    assert_eq!(Kind::MapNearlyFull as usize + 1, Kind::ALL.len());
    let names: std::collections::BTreeSet<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(names.len(), Kind::ALL.len(), "each kind's label is its own");
}
