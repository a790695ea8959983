use super::*;

fn claim(port: u16, protocol: Protocol, service: &str, health_check: bool) -> Claim {
    Claim {
        port,
        protocol,
        service: service.to_string(),
        port_name: (!health_check).then(|| "p".to_string()),
        service_type: "NodePort".to_string(),
        health_check,
    }
}

#[test]
fn collisions_across_namespaces_and_protocols_are_flagged() {
    let claims = vec![
        claim(30080, Protocol::Tcp, "shop/web", false),
        claim(30080, Protocol::Tcp, "team-b/api", false),
        claim(30053, Protocol::Tcp, "kube-system/dns", false),
        claim(30053, Protocol::Udp, "kube-system/dns", false),
        claim(30500, Protocol::Udp, "a/syslog", false),
        claim(30500, Protocol::Tcp, "b/web", false),
        claim(32000, Protocol::Tcp, "edge/gw", true),
        claim(32000, Protocol::Tcp, "other/x", false),
    ];
    let table = allocation_table(claims, 30000..=32767, 3, Vec::new());
    let ports: Vec<(u16, bool)> = table
        .collisions
        .iter()
        .map(|c| (c.port, c.same_protocol))
        .collect();
    assert_eq!(ports, [(30080, true), (30500, false), (32000, true)]);
    let dns: Vec<&Allocation> = table
        .allocations
        .iter()
        .filter(|a| a.claim.port == 30053)
        .collect();
    assert_eq!(dns.len(), 2);
    assert!(dns.iter().all(|a| a.shared_across_protocols && !a.collision));
    assert!(
        !table
            .allocations
            .iter()
            .any(|a| a.claim.port == 30500 && a.shared_across_protocols)
    );
    assert_eq!(table.services, 7);
    assert_eq!(table.exit_code(), 1);
    assert_eq!(table.free.count, 2768 - 4);
}

#[test]
fn free_blocks_count_and_sort() {
    let taken = [30000, 30003, 30010];
    let blocks = free_blocks(&(30000..=30012), &taken);
    assert_eq!(
        blocks,
        [
            Block::new(30001, 30002),
            Block::new(30004, 30009),
            Block::new(30011, 30012)
        ]
    );
    let free = free_ports(&(30000..=30012), &taken, 4);
    assert_eq!(free.count, 10);
    assert_eq!(free.largest_blocks[0], Block::new(30004, 30009));
    assert_eq!(free.largest_blocks[1], Block::new(30001, 30002));
    assert_eq!(free.next, [30001, 30002, 30004, 30005]);
    // The top of u16 does not overflow.
    assert_eq!(
        free_blocks(&(65534..=65535), &[65535]),
        [Block::new(65534, 65534)]
    );
    assert_eq!(free_blocks(&(65534..=65535), &[65534, 65535]), []);
}

#[test]
fn an_exhausted_range_has_nothing_to_hand_out() {
    let claims = (30000..=30015)
        .map(|p| claim(p, Protocol::Tcp, &format!("ns/s{p}"), false))
        .collect();
    let table = allocation_table(claims, 30000..=30015, 5, Vec::new());
    assert_eq!(table.free.count, 0);
    assert!(table.free.largest_blocks.is_empty() && table.free.next.is_empty());
    assert_eq!(table.exit_code(), 0);
    assert!(render_table(&table).contains("the range is exhausted"));
}

#[test]
fn the_static_band_follows_the_api_servers_formula() {
    assert_eq!(static_band(&(30000..=32767)), Block::new(30000, 30085));
    assert_eq!(static_band(&(30000..=30099)), Block::new(30000, 30015));
    assert_eq!(static_band(&(20000..=32767)), Block::new(20000, 20127));
    assert_eq!(static_band(&(30000..=30004)), Block::new(30000, 30004));
}

#[test]
fn ports_outside_the_range_are_shown_and_not_counted_free() {
    let claims = vec![claim(8080, Protocol::Tcp, "a/b", false)];
    let table = allocation_table(claims, 30000..=30009, 1, Vec::new());
    assert!(!table.allocations[0].in_range);
    assert_eq!(table.free.count, 10);
    assert!(render_table(&table).contains("outside the range"));
}

#[test]
fn the_text_is_sorted_by_port_and_aligned() {
    let claims = vec![
        claim(30100, Protocol::Tcp, "z/last", false),
        claim(30001, Protocol::Udp, "a-much-longer-namespace/first", false),
    ];
    let text = render_table(&allocation_table(claims, 30000..=32767, 2, Vec::new()));
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("30")).collect();
    assert!(
        rows[0].starts_with("30001") && rows[1].starts_with("30100"),
        "{text}"
    );
    let column = |row: &str| row.find("NodePort");
    assert_eq!(column(rows[0]), column(rows[1]), "{text}");
    assert!(text.contains("next free: 30000 30002"), "{text}");
}
