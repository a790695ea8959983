use super::*;

// Captured from this project's dev machine (Linux 6.x, x86_64) inside `unshare -n`,
// with python3 listeners: see tests/fixtures/proc-net/README.md.
const TCP: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/proc-net/tcp"
));
const TCP6: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/proc-net/tcp6"
));
const UDP: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/proc-net/udp"
));
const UDP6: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/proc-net/udp6"
));

fn le(input: &[u8], protocol: Protocol, v6: bool) -> (Vec<Listener>, Vec<Unparsed>) {
    parse_proc_net_with(input, protocol, v6, "proc/net/test", WordOrder::Little)
}

fn summary(listeners: &[Listener]) -> Vec<(Family, String, u16, u32, u64, u32)> {
    listeners
        .iter()
        .map(|l| (l.family, l.addr.to_string(), l.port, l.uid, l.inode, l.line))
        .collect()
}

#[test]
fn tcp_v4_keeps_listeners_only() {
    let (listeners, unparsed) = le(TCP, Protocol::Tcp, false);
    assert!(unparsed.is_empty(), "{unparsed:?}");
    assert_eq!(
        summary(&listeners),
        vec![
            (Family::Ipv4, "0.0.0.0".into(), 31500, 65534, 15943, 2),
            (Family::Ipv4, "0.0.0.0".into(), 30080, 0, 16400, 3),
            (Family::Ipv4, "127.0.0.1".into(), 10249, 0, 16401, 4),
        ]
    );
    assert!(listeners.iter().all(|l| l.protocol == Protocol::Tcp));
    assert!(listeners.iter().all(|l| l.origin == "proc/net/test"));
}

#[test]
fn tcp6_v6_only_dual_stack_and_mapped() {
    let (listeners, unparsed) = le(TCP6, Protocol::Tcp, true);
    assert!(unparsed.is_empty(), "{unparsed:?}");
    assert_eq!(
        summary(&listeners),
        vec![
            // [::]:30443 with IPV6_V6ONLY
            (Family::Ipv6, "::".into(), 30443, 0, 16402, 2),
            // [::]:22 dual-stack: the kernel shows it once, in tcp6
            (Family::Ipv6, "::".into(), 22, 0, 16403, 3),
            // [::ffff:10.0.0.5]:31000 is an IPv4 listener
            (Family::Ipv4, "10.0.0.5".into(), 31000, 0, 16404, 4),
        ]
    );
}

#[test]
fn udp_v4_keeps_unconnected_only() {
    let (listeners, unparsed) = le(UDP, Protocol::Udp, false);
    assert!(unparsed.is_empty(), "{unparsed:?}");
    // Line 2 is a connected UDP socket (state 01): not a listener.
    assert_eq!(
        summary(&listeners),
        vec![
            (Family::Ipv4, "127.0.0.1".into(), 8125, 65534, 15944, 3),
            (Family::Ipv4, "0.0.0.0".into(), 30514, 0, 16405, 4),
        ]
    );
    assert!(listeners.iter().all(|l| l.protocol == Protocol::Udp));
}

#[test]
fn udp6_any_and_specific_address() {
    let (listeners, unparsed) = le(UDP6, Protocol::Udp, true);
    assert!(unparsed.is_empty(), "{unparsed:?}");
    assert_eq!(
        summary(&listeners),
        vec![
            (Family::Ipv6, "::".into(), 30053, 0, 16406, 2),
            (Family::Ipv6, "fd00:10:180::1".into(), 30054, 0, 16407, 3),
        ]
    );
}

#[test]
fn big_endian_words_decode() {
    let line = b"   0: 7F000001:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 42 1 0 100 0 0 10 0\n";
    let (listeners, unparsed) = parse_proc_net_with(line, Protocol::Tcp, false, "x", WordOrder::Big);
    assert!(unparsed.is_empty());
    assert_eq!(listeners[0].addr.to_string(), "127.0.0.1");
    assert_eq!(listeners[0].port, 8080);
}

#[test]
fn native_order_matches_this_kernel() {
    if cfg!(target_endian = "little") {
        let (a, _) = parse_proc_net(TCP, Protocol::Tcp, false, "proc/net/test");
        let (b, _) = le(TCP, Protocol::Tcp, false);
        assert_eq!(a, b);
    }
}

#[test]
fn odd_lines_become_unparsed_with_line_numbers() {
    let mut input = Vec::new();
    input.extend_from_slice(&TCP[..TCP.iter().position(|&b| b == b'\n').unwrap() + 1]);
    input.extend_from_slice(b"   0: 00000000:7580 00000000:0000 0A\n"); // 2: too few fields
    input.extend_from_slice(
        b"   1: 0000ZZ00:7580 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n",
    ); // 3: bad hex address
    input.extend_from_slice(
        b"   2: 00000000:75G0 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n",
    ); // 4: bad hex port
    input.extend_from_slice(
        b"   3: 00000000:7580 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 \xff\xfe 1\n",
    ); // 5: not UTF-8
    input.extend_from_slice(
        b"   4: 0000000000:7580 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n",
    ); // 6: wrong address length
    input.extend_from_slice(
        b"   5: 00000000:7580 00000000:0000 0A 00000000:00000000 00:00000000 00000000 x 0 1 1\n",
    ); // 7: bad uid
    input.extend_from_slice(b"\n"); // 8: blank, ignored
    input.extend_from_slice(
        b"   6: 00000000:7581 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 77 1\n",
    ); // 9: fine
    input.extend_from_slice(b"garbage"); // 10: no trailing newline, no slot
    let (listeners, unparsed) = le(&input, Protocol::Tcp, false);
    assert_eq!(
        summary(&listeners),
        vec![(Family::Ipv4, "0.0.0.0".into(), 30081, 0, 77, 9)]
    );
    let lines: Vec<u32> = unparsed.iter().map(|u| u.line).collect();
    assert_eq!(lines, vec![2, 3, 4, 5, 6, 7, 10]);
    // The stray byte is named, not replaced by U+FFFD.
    assert!(
        unparsed[3].text.contains("\\xff") && !unparsed[3].text.contains('\u{fffd}'),
        "{}",
        unparsed[3].text
    );
    assert!(unparsed.iter().all(|u| !u.reason.is_empty()));
}

#[test]
fn v4_line_in_a_v6_file_is_unparsed() {
    let (listeners, unparsed) = le(TCP, Protocol::Tcp, true);
    assert!(listeners.is_empty());
    assert_eq!(unparsed.len(), 5);
}

#[test]
fn never_panics_on_arbitrary_bytes() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..2000 {
        let mut buf = TCP6.to_vec();
        for _ in 0..8 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = (seed as usize) % buf.len();
            buf[at] = (seed >> 32) as u8;
        }
        let _ = le(&buf, Protocol::Tcp, true);
        let _ = le(&buf[..(seed as usize) % buf.len()], Protocol::Udp, false);
    }
}

#[test]
fn long_unparsed_text_is_cut() {
    let line = format!("   0: {}", "x".repeat(1000));
    let (_, unparsed) = le(line.as_bytes(), Protocol::Tcp, false);
    assert_eq!(unparsed.len(), 1);
    assert!(unparsed[0].text.chars().count() <= MAX_UNPARSED_TEXT + 1);
}
