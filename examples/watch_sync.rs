//! Times the API side of the desired state against a kubeconfig's cluster: the
//! daemon's initial sync (reflectors until synced) and one desired-state build, or with
//! `--once` the one-shot list of `portdrift scan`. Prints one JSON line of figures; run
//! it under `/usr/bin/time -v` for peak RSS (`scripts/bench-watch.sh` does).
//!
//! ```text
//! cargo run --release --example watch_sync -- --kubeconfig /tmp/fake/kubeconfig --node worker-1
//! ```
//!
//! `--settle S` also prints the resident set the synced view keeps (`scripts/bench-watch.sh`);
//! `--agents N` starts N agents' views at once instead (`scripts/bench-api.sh`).

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
    /// Start this many agents' views at once, each as its own agent would (its own
    /// client and stores) for nodes worker-1 … worker-N; with `--relist`, then wait until
    /// every view has relisted (a `gone` the server is told) and is fresh again.
    #[arg(long, default_value_t = 1)]
    agents: usize,
    /// With `--agents`: create this file once every view is synced.
    #[arg(long)]
    synced_file: Option<PathBuf>,
    /// After the build, give jemalloc's background thread this long (seconds) to return
    /// freed pages, as in the daemon, and print the resident set the view keeps.
    #[arg(long)]
    settle: Option<u64>,
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
    if args.agents > 1 {
        return many_agents(&args).await;
    }
    if args.settle.is_some() {
        keep_idle_memory_returned()?;
    }
    let config = kube_config(Some(&args.kubeconfig)).await?;
    let rss_before = rss_mib();
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
    if let Some(seconds) = args.settle {
        drop(state);
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let rss_settled = rss_mib();
        let kept = (rss_settled - rss_before) * 1024.0 * 1024.0;
        println!(
            "{{\"mode\":\"kept\",\"settle_s\":{seconds},\"rss_before_mib\":{rss_before:.1},\"rss_settled_mib\":{rss_settled:.1},\"services\":{},\"kept_bytes_per_service\":{:.0}}}",
            status.services.objects,
            kept / status.services.objects.max(1) as f64,
        );
    }
    Ok(())
}

/// As the daemon does (src/main.rs): freed pages go back to the kernel after jemalloc's
/// decay delay even when nothing else is allocated.
fn keep_idle_memory_returned() -> anyhow::Result<()> {
    tikv_jemalloc_ctl::max_background_threads::write(1)
        .and_then(|()| tikv_jemalloc_ctl::background_thread::write(true))
        .map_err(|e| anyhow::anyhow!("cannot start jemalloc's background thread: {e}"))
}

/// `--agents N`: N views at once against one server, as N agents starting together;
/// prints one JSON line of figures.
async fn many_agents(args: &Args) -> anyhow::Result<()> {
    let limit = Duration::from_secs(600);
    let start = Instant::now();
    let mut views = Vec::with_capacity(args.agents);
    for i in 1..=args.agents {
        let options = WatchOptions {
            streaming_lists: !args.no_streaming_lists,
            ..WatchOptions::default()
        };
        let config = kube_config(Some(&args.kubeconfig)).await?;
        views.push(ClusterView::start(config, Some(&format!("worker-{i}")), options)?);
    }
    let synced = futures::future::join_all(views.iter().map(ClusterView::wait_synced));
    tokio::time::timeout(limit, synced)
        .await
        .with_context(|| format!("the views did not sync within {limit:?}"))?;
    let synced = start.elapsed();
    let rss_synced = rss_mib();
    if let Some(path) = &args.synced_file {
        std::fs::write(path, b"")?;
    }
    let mut relist = None;
    if args.relist {
        // Timed from the first sign of the 410 (a view no longer fresh, or relisted).
        let waited = Instant::now();
        let mut begun = None;
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let statuses: Vec<_> = views.iter().map(ClusterView::status).collect();
            let relisted = |s: &portdrift::agent::watch::ViewStatus| {
                s.services.relists >= 1
                    && s.endpoint_slices.relists >= 1
                    && s.node.as_ref().is_none_or(|n| n.relists >= 1)
            };
            if begun.is_none() && statuses.iter().any(|s| !s.fresh || relisted(s)) {
                begun = Some(Instant::now());
            }
            if statuses.iter().all(|s| relisted(s) && s.fresh) {
                break;
            }
            anyhow::ensure!(
                waited.elapsed() < limit,
                "the views did not relist within {limit:?}"
            );
        }
        relist = Some((begun.unwrap_or(waited).elapsed(), rss_mib()));
    }
    let status = views[0].status();
    println!(
        "{{\"mode\":\"agents\",\"agents\":{},\"sync_s\":{:.3},\"relist_s\":{},\"services\":{},\"endpoint_slices\":{},\"rss_synced_mib\":{rss_synced:.1},\"rss_relisted_mib\":{}}}",
        args.agents,
        synced.as_secs_f64(),
        relist.map_or("null".to_string(), |(t, _)| format!("{:.3}", t.as_secs_f64())),
        status.services.objects,
        status.endpoint_slices.objects,
        relist.map_or("null".to_string(), |(_, r)| format!("{r:.1}")),
    );
    Ok(())
}
