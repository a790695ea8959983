use super::build::parse_nodeport_key;
use super::*;
use crate::heart::model::Protocol;

#[test]
fn only_ip_and_ip6_kube_proxy_tables_are_kube_proxys() {
    assert_eq!(kube_proxy_family("ip", "kube-proxy"), Some(Family::Ipv4));
    assert_eq!(kube_proxy_family("ip6", "kube-proxy"), Some(Family::Ipv6));
    assert_eq!(kube_proxy_family("inet", "kube-proxy"), None);
    assert_eq!(kube_proxy_family("ip", "nat"), None);
}

#[test]
fn nodeport_keys_need_protocol_and_port() {
    assert_eq!(parse_nodeport_key("tcp . 30080"), Some((Protocol::Tcp, 30080)));
    assert_eq!(parse_nodeport_key("udp . 53"), Some((Protocol::Udp, 53)));
    assert_eq!(parse_nodeport_key("tcp . 3000-3005"), None);
    assert_eq!(parse_nodeport_key("30080"), None);
}

#[test]
fn readable_cuts_on_char_boundaries() {
    let long = "é".repeat(300);
    let cut = readable(&long);
    assert!(cut.len() < long.len());
    assert!(cut.ends_with('…'));
}
