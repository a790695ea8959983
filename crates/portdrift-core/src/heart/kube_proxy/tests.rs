use super::*;

fn svc(s: &str) -> ServicePortRef {
    ServicePortRef::parse(s).unwrap()
}

// Expectations from kube-proxy's own proxier tests and real dumps.
#[test]
fn iptables_hashes_match_kube_proxy() {
    assert_eq!(
        service_chain_hash(&svc("ns1/svc1:p80"), Protocol::Tcp),
        "XPGD46QRK7WJZT7O"
    );
    assert_eq!(
        service_chain_hash(&svc("ns2/svc2:p80"), Protocol::Tcp),
        "GNZBNJ2PO5MGZ6GT"
    );
    assert_eq!(
        service_chain_hash(&svc("kube-system/kube-dns:dns"), Protocol::Udp),
        "TCOU7JCQXEZGVUNU"
    );
    assert_eq!(
        service_chain_hash(&svc("default/kubernetes:https"), Protocol::Tcp),
        "NPX46M4PTMTKRN6Y"
    );
    assert_eq!(
        service_chain_hash(&svc("default/nginx"), Protocol::Tcp),
        "2CMXP7HKUVJN7L6M"
    );
    let ep: SocketAddr = "10.180.0.1:80".parse().unwrap();
    assert_eq!(
        endpoint_chain_hash(&svc("ns1/svc1:p80"), Protocol::Tcp, &ep),
        "SXIVWICOYRO3J4NJ"
    );
    let ep: SocketAddr = "10.180.0.3:80".parse().unwrap();
    assert_eq!(
        endpoint_chain_hash(&svc("ns5/svc5:p80"), Protocol::Tcp, &ep),
        "I77PXRDZVX7PMWMN"
    );
}

#[test]
fn nftables_names_match_kube_proxy() {
    assert_eq!(
        nft_service_chain("service", &svc("ns1/svc1:p80"), Protocol::Tcp),
        "service-ULMVA6XW-ns1/svc1/tcp/p80"
    );
    assert_eq!(
        nft_service_chain("external", &svc("ns2/svc2:p80"), Protocol::Tcp),
        "external-42NFTM6N-ns2/svc2/tcp/p80"
    );
    let (s, p) = parse_nft_service_chain("endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80").unwrap();
    assert_eq!((s.kube_proxy_name().as_str(), p), ("ns1/svc1:p80", Protocol::Tcp));
    let (s, _) = parse_nft_service_chain("external-AAAAAAAA-default/nginx/tcp/").unwrap();
    assert_eq!(s.kube_proxy_name(), "default/nginx");
}

#[test]
fn chain_hash_only_for_service_chains() {
    assert_eq!(chain_hash("KUBE-EXT-XPGD46QRK7WJZT7O"), Some("XPGD46QRK7WJZT7O"));
    assert_eq!(chain_hash("KUBE-NODEPORTS"), None);
    assert_eq!(chain_hash("KUBE-MARK-MASQ"), None);
}
