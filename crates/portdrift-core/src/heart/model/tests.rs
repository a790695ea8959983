use super::*;

#[test]
fn service_port_ref_round_trips_kube_proxy_names() {
    let named = ServicePortRef::parse("ns1/svc1:p80").unwrap();
    assert_eq!(named.port_name, "p80");
    assert_eq!(named.kube_proxy_name(), "ns1/svc1:p80");
    let unnamed = ServicePortRef::parse("default/nginx").unwrap();
    assert_eq!(unnamed.port_name, "");
    assert_eq!(unnamed.kube_proxy_name(), "default/nginx");
    assert!(ServicePortRef::parse("has no endpoints").is_none());
    assert!(ServicePortRef::parse("a/b c").is_none());
}

#[test]
fn ipv6_targets_are_bracketed() {
    let a: SocketAddr = "[fd00::1]:80".parse().unwrap();
    // Findings' `target` is the address's Display form, which must bracket IPv6.
    assert_eq!(a.to_string(), "[fd00::1]:80");
}
