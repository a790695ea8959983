//! All I/O that reads the node: the kernel over netlink, the dump tools, `/proc`,
//! kube-proxy's HTTP endpoints and bundle files, behind one [`source::Source`] trait;
//! and the fleet's agents, Prometheus and manifest files for the cluster-wide views.

pub mod bundle;
pub mod fleet_client;
pub mod fleet_prometheus;
pub mod kube_client;
pub mod kube_proxy_http;
pub mod live;
pub mod manifest_files;
pub mod netlink;
pub mod owners;
pub mod rule_changes;
pub mod self_usage;
pub mod source;
pub mod tools;
