use std::sync::Arc;

use super::*;

/// Tables large enough for many blocks, every field kind, and an empty field last.
fn tables() -> ParsedRuleset<'static> {
    let mut parsed = ParsedRuleset::default();
    for family in [Family::Ipv4, Family::Ipv6] {
        let table = parsed.table_mut(family);
        for c in 0..3000 {
            let name = format!(
                "endpoint-{c:05}-team-{c}/svc-{c}/tcp/http__10.244.{}.{}/8080",
                c / 250,
                c % 250
            );
            let chain = table.chain_mut(Cow::Owned(name), 0);
            chain.rules.push(RuleIr {
                handle: Some(c),
                line: 0,
                jumps: vec![Cow::Owned("mark-for-masquerade".into())],
                dnat: None,
            });
            chain.rules.push(RuleIr {
                handle: None,
                line: 7,
                jumps: Vec::new(),
                dnat: Some(Box::new(DnatIr {
                    addr: "10.244.0.1:8080".parse().unwrap(),
                    text: Arc::from("meta l4proto tcp dnat to 10.244.0.1:8080"),
                })),
            });
        }
        let element = |key: String, verdict| ElementIr {
            key,
            comment: Some(Cow::Owned("ns/svc:http".into())),
            verdict,
            line: 0,
        };
        table.maps.push(MapIr {
            name: Cow::Owned("service-nodeports".into()),
            elements: (0..2000)
                .map(|p| {
                    element(
                        format!("tcp . {}", 30000 + p),
                        ElementVerdict::Goto(Cow::Owned("x".into())),
                    )
                })
                .chain([
                    element("tcp . 1".into(), ElementVerdict::Jump(Cow::Owned("y".into()))),
                    element("tcp . 2".into(), ElementVerdict::Accept),
                    element("tcp . 3".into(), ElementVerdict::Other("return".into())),
                    element("tcp . 4".into(), ElementVerdict::Drop),
                ])
                .collect(),
        });
    }
    parsed
}

#[test]
fn tables_unpack_as_they_were_packed() {
    let parsed = tables();
    let packed = pack(&parsed);
    assert!(packed.0.len() > 2, "{} blocks", packed.0.len());
    assert!(packed.bytes() * 4 < parsed.tables.iter().map(TableIr::heap_bytes).sum::<usize>());
    let unpacked = unpack(&packed).unwrap();
    assert_eq!(unpacked.tables.len(), 2);
    for (a, b) in parsed.tables.iter().zip(&unpacked.tables) {
        assert_eq!(a.family, b.family);
        assert_eq!(format!("{:?}", a.chains), format!("{:?}", b.chains));
        assert_eq!(format!("{:?}", a.maps), format!("{:?}", b.maps));
        let last = &a.chains.last().unwrap().name;
        assert_eq!(b.chain(last).map(|(i, _)| i), Some(a.chains.len() - 1));
    }
}

#[test]
fn a_damaged_pack_is_an_error() {
    let mut packed = pack(&tables());
    packed.0.pop();
    assert!(unpack(&packed).is_err());
}
