use super::*;
use crate::heart::observed::IpvsTraces;
use std::time::Duration;

#[test]
fn ipvs_traces_are_read_from_proc_net() {
    let dev = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo:  1296      16    0    0    0     0          0         0     1296      16    0    0    0     0       0          0\nkube-ipvs0:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n";
    assert!(net_dev_has(dev, "kube-ipvs0"));
    assert!(net_dev_has(dev, "lo"));
    assert!(!net_dev_has(dev, "eth0"));
    assert!(!net_dev_has(dev, "Receive"));
    let ip_vs = "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\nTCP  0A600001:01BB rr\n  -> AC110002:192B      Masq    1      0          0\nUDP  0A60000A:0035 rr\n";
    assert_eq!(count_ip_vs_services(ip_vs), 2);
    assert_eq!(count_ip_vs_services(""), 0);
    let traces = IpvsTraces {
        interface: true,
        virtual_servers: Some(2),
    };
    assert_eq!(
        traces.describe(),
        ["interface kube-ipvs0", "2 IPVS virtual servers"]
    );
    assert!(IpvsTraces::default().describe().is_empty());
}

#[test]
fn the_local_port_range_parses_as_the_kernel_prints_it() {
    assert_eq!(parse_local_port_range("32768\t60999\n"), Ok(32768..=60999));
    assert_eq!(parse_local_port_range("  1024   65535  "), Ok(1024..=65535));
    assert_eq!(parse_local_port_range("30000 30000"), Ok(30000..=30000));
}

#[test]
fn odd_local_port_ranges_are_errors() {
    assert!(matches!(
        parse_local_port_range(""),
        Err(SysctlParseError::NotARange(_))
    ));
    assert!(matches!(
        parse_local_port_range("32768"),
        Err(SysctlParseError::NotARange(_))
    ));
    assert!(matches!(
        parse_local_port_range("1 2 3"),
        Err(SysctlParseError::NotARange(_))
    ));
    assert!(matches!(
        parse_local_port_range("32768 70000"),
        Err(SysctlParseError::NotAPort(_))
    ));
    assert!(matches!(
        parse_local_port_range("-1 5"),
        Err(SysctlParseError::NotAPort(_))
    ));
    assert_eq!(
        parse_local_port_range("60999 32768"),
        Err(SysctlParseError::Reversed(60999, 32768))
    );
    assert!(parse_local_port_range("\u{0}\u{ff}garbage").is_err());
}

#[test]
fn reserved_ports_parse_ports_and_ranges() {
    assert_eq!(parse_reserved_ports(""), (vec![], vec![]));
    assert_eq!(parse_reserved_ports("\n"), (vec![], vec![]));
    assert_eq!(
        parse_reserved_ports("8080,30000-32767\n"),
        (vec![8080..=8080, 30000..=32767], vec![])
    );
    assert_eq!(
        parse_reserved_ports(" 22 , 1000 - 1010,,"),
        (vec![22..=22, 1000..=1010], vec![])
    );
}

#[test]
fn odd_reserved_ports_keep_the_good_items() {
    let (ranges, errors) = parse_reserved_ports("80,abc,90-70,65536,100-,443");
    assert_eq!(ranges, vec![80..=80, 443..=443]);
    assert_eq!(errors.len(), 4, "{errors:?}");
    assert!(errors.contains(&SysctlParseError::Reversed(90, 70)));
}

#[test]
fn go_and_rfc3339_times_parse() {
    let t = |s| parse_go_time(s).map(|t| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs());
    assert_eq!(t("1970-01-01 00:01:00 +0000 UTC"), Some(60));
    assert_eq!(t("1970-01-01 01:01:00.999 +0100 CET m=+0.5"), Some(60));
    assert_eq!(t("1970-01-01 00:00:00 -0001 X"), Some(60));
    assert_eq!(t("1970-01-01T00:01:00Z"), Some(60));
    assert_eq!(t("1970-01-01T00:01:00.5Z"), Some(60));
    assert_eq!(t("1970-01-01T01:01:00+01:00"), Some(60));
    assert_eq!(t("0001-01-01 00:00:00 +0000 UTC"), None);
    assert_eq!(t("yesterday"), None);
    assert_eq!(t(""), None);
    assert_eq!(t("1970-01-01 00:01:00 +01 UTC"), None);
}

#[test]
fn kube_proxy_health_reads_what_it_can() {
    let h = KubeProxyHealth::from_body(
        true,
        br#"{"lastUpdated": "2025-11-30 10:00:00.123456789 +0000 UTC m=+12.3", "currentTime": "x"}"#,
    )
    .unwrap();
    assert_eq!(h.since_last_update, None);
    assert!(h.last_updated.is_some());

    let h = KubeProxyHealth::from_body(
            false,
            br#"{"lastUpdated":"2025-11-30T10:00:00.5Z","currentTime":"2025-11-30T10:02:05.5Z","nodeEligible":false,"extra":[1]}"#,
        )
        .unwrap();
    assert!(!h.healthy);
    assert_eq!(h.since_last_update, Some(Duration::from_secs(125)));
    assert_eq!(h.node_eligible, Some(false));
    assert!(
        h.describe().iter().any(|n| n.contains("2m 5s")),
        "{:?}",
        h.describe()
    );

    // What kube-proxy really prints: Go's time.Time.String() through %q.
    let h = KubeProxyHealth::from_body(
            true,
            br#"{"lastUpdated": "2025-11-30 10:00:00.25 +0100 CET m=+3.1","currentTime": "2025-11-30 09:00:07.25 +0000 UTC m=+10.1", "nodeEligible": true}"#,
        )
        .unwrap();
    assert_eq!(h.since_last_update, Some(Duration::from_secs(7)));
    assert_eq!(h.node_eligible, Some(true));

    assert!(KubeProxyHealth::from_body(true, b"ok").is_err());
    assert!(KubeProxyHealth::from_body(true, b"[1,2]").is_err());
    assert!(KubeProxyHealth::from_body(true, b"{}").unwrap().describe().len() == 1);
}

#[test]
fn kube_proxys_mode_answer_is_read_and_others_are_not() {
    assert_eq!(parse_proxy_mode("iptables\n"), Some(ProxyMode::Iptables));
    assert_eq!(parse_proxy_mode(" nftables "), Some(ProxyMode::Nftables));
    assert_eq!(parse_proxy_mode("ipvs"), Some(ProxyMode::Ipvs));
    for other in ["kernelspace", "userspace", "", "IPTABLES", "<html>"] {
        assert_eq!(parse_proxy_mode(other), None, "{other:?}");
    }
}
