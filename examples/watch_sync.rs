//! Times the API side of the desired state against a kubeconfig's cluster: the
//! daemon's initial sync (reflectors until synced) and one desired-state build, or with
//! `--once` the one-shot list of `portdrift scan`. Prints one JSON line of figures; run
//! it under `/usr/bin/time -v` for peak RSS (`scripts/bench-watch.sh` does).
//!
//! ```text
//! cargo run --release --example watch_sync -- --kubeconfig /tmp/fake/kubeconfig --node worker-1
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use portdrift::agent::watch::{ClusterView, WatchOptions};
use portdrift::sources::kube_client::{kube_client, kube_config, load_once};

/// The binary's allocator, so that memory figures are the daemon's (see src/main.rs).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    kubeconfig: PathBuf,
    #[arg(long, default_value = "worker-1")]
    node: String,
    /// The one-shot list (`load_once`) instead of the watch.
    #[arg(long)]
    once: bool,
    /// After the build, wait for one relist (a server started with `--gone-every`) to
    /// complete: the reflectors hold the old and the new list at once.
    #[arg(long)]
    relist: bool,
    /// Lists with `resourceVersion=0` instead of streaming lists.
    #[arg(long)]
    no_streaming_lists: bool,
}

/// This process's resident set now, in MiB (Linux; 0 elsewhere).
fn rss_mib() -> f64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1024.0 * 1024.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = kube_config(Some(&args.kubeconfig)).await?;
    let start = Instant::now();
    if args.once {
        let state = load_once(kube_client(config)?, Some(&args.node), Duration::from_secs(120)).await?;
        let listed = start.elapsed();
        println!(
            "{{\"mode\":\"once\",\"list_and_build_s\":{:.3},\"ports\":{}}}",
            listed.as_secs_f64(),
            state.ports.len()
        );
        return Ok(());
    }
    let options = WatchOptions {
        streaming_lists: !args.no_streaming_lists,
        ..WatchOptions::default()
    };
    let view = ClusterView::start(config, Some(&args.node), options)?;
    tokio::time::timeout(Duration::from_secs(120), view.wait_synced())
        .await
        .context("the view did not sync within 120 s")?;
    let synced = start.elapsed();
    let rss_synced = rss_mib();
    let state = view.desired_state()?;
    let built = start.elapsed();
    let rss_built = rss_mib();
    let mut status = view.status();
    let mut relisted = None;
    if args.relist {
        let relist_start = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            status = view.status();
            if status.services.relists >= 1 && status.endpoint_slices.relists >= 1 && status.fresh {
                break;
            }
            anyhow::ensure!(
                relist_start.elapsed() < Duration::from_secs(120),
                "no relist within 120 s"
            );
        }
        relisted = Some(rss_mib());
    }
    println!(
        "{{\"mode\":\"watch\",\"sync_s\":{:.3},\"build_s\":{:.3},\"total_s\":{:.3},\"services\":{},\"endpoint_slices\":{},\"ports\":{},\"endpoints\":{},\"rss_synced_mib\":{:.1},\"rss_built_mib\":{:.1},\"rss_relisted_mib\":{}}}",
        synced.as_secs_f64(),
        (built - synced).as_secs_f64(),
        built.as_secs_f64(),
        status.services.objects,
        status.endpoint_slices.objects,
        state.ports.len(),
        state
            .ports
            .iter()
            .flat_map(|p| &p.endpoints)
            .map(|(_, e)| e.listed.len())
            .sum::<usize>(),
        rss_synced,
        rss_built,
        relisted.map_or("null".to_string(), |r| format!("{r:.1}")),
    );
    Ok(())
}
