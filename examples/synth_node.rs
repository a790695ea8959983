//! Writes a synthetic node bundle of any size (kube-proxy-shaped
//! `iptables-nft-save.txt`, the same Services in nftables mode as `kube-proxy.nft`, an
//! `nft -f` script to load into a namespace, the matching `cluster.json`, and `node`),
//! for benchmarks and scale tests:
//!
//! ```text
//! cargo run --release --example synth_node -- --services 10000 --out /tmp/node-10k
//! ```

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use portdrift_test_support::synth::{ChainOrder, SynthConfig, generate};

#[derive(Parser)]
struct Args {
    /// How many NodePort Services.
    #[arg(long, default_value_t = 10_000)]
    services: usize,
    /// Endpoints per Service.
    #[arg(long, default_value_t = 4)]
    endpoints: usize,
    /// The first nodePort (Services take consecutive ports; scan with a matching
    /// --nodeport-range).
    #[arg(long, default_value_t = 20000)]
    first_node_port: u16,
    /// Drift to inject into the nftables script: stale NodePorts.
    #[arg(long, default_value_t = 0)]
    stale: usize,
    /// The chains of the iptables dump grouped by Service, as kube-proxy writes them in
    /// one restore (the order on a node it programmed), instead of sorted by name.
    #[arg(long)]
    grouped: bool,
    /// The bundle directory to write.
    #[arg(long)]
    out: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = SynthConfig {
        services: args.services,
        endpoints_per_service: args.endpoints,
        first_node_port: args.first_node_port,
        stale: args.stale,
        chain_order: if args.grouped {
            ChainOrder::Grouped
        } else {
            ChainOrder::Sorted
        },
        ..SynthConfig::default()
    };
    let node = generate(&config);
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    std::fs::write(args.out.join("iptables-nft-save.txt"), &node.iptables_save)?;
    std::fs::write(args.out.join("cluster.json"), &node.cluster_json)?;
    std::fs::write(
        args.out.join("kube-proxy.nft"),
        portdrift_test_support::synth::nft_script(&config),
    )?;
    std::fs::write(args.out.join("node"), format!("{}\n", config.node))?;
    eprintln!(
        "wrote {}: {} iptables-save lines, cluster.json {} bytes",
        args.out.display(),
        node.iptables_save.lines().count(),
        node.cluster_json.len()
    );
    Ok(())
}
