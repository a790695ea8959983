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

/// Runs `future` to its end for a blocking caller of the async clients (kube, hyper),
/// on a runtime of its own. One thread: such a call waits on the network, and the
/// requests it makes at once are futures on that thread. Err only when the runtime
/// cannot start.
pub fn block_on<F: std::future::Future>(future: F) -> std::io::Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(runtime.block_on(future))
}
