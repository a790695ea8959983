use super::*;

fn endpoint(addr: &str, local: bool) -> MergedEndpoint {
    MergedEndpoint {
        addr: addr.parse().unwrap(),
        ready: true,
        serving: true,
        terminating: false,
        local,
        zone_hints: Vec::new(),
        node_hint: NodeHint::Absent,
    }
}

const VIEW: NodeView = NodeView {
    node_known: true,
    zone: ZoneView::Unknown,
};

#[test]
fn internal_local_policy_without_external_access_uses_no_cluster_set() {
    // Only reachable for a port without nodePort, LB VIP or externalIP; kept to
    // document kube-proxy's rule.
    let policy = PortPolicy {
        internal_local: true,
        external_local: false,
        externally_accessible: false,
    };
    let endpoints = [endpoint("10.0.0.1:80", true), endpoint("10.0.0.2:80", false)];
    let categorized = categorize(&endpoints, policy, VIEW);
    assert!(categorized.cluster.is_empty());
    assert_eq!(categorized.local.len(), 1);
    assert!(categorized.has_endpoints, "a ready endpoint exists somewhere");
}

#[test]
fn externally_accessible_ports_always_use_the_cluster_set() {
    for (internal_local, external_local) in [(false, false), (true, false), (false, true), (true, true)] {
        let policy = PortPolicy {
            internal_local,
            external_local,
            externally_accessible: true,
        };
        assert!(policy.uses_cluster_endpoints());
        let categorized = categorize(&[endpoint("10.0.0.2:80", false)], policy, VIEW);
        assert_eq!(categorized.cluster.len(), 1);
    }
}
