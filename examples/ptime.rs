#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use portdrift::observed::iptables::{SourceHint, parse_save};
fn main() {
    let text = std::fs::read("/tmp/node-10k/iptables-nft-save.txt").unwrap();
    let desired = portdrift::desired::read_cluster_state(
        std::fs::File::open("/tmp/node-10k/cluster.json").unwrap(),
        Some("worker-1"),
    )
    .unwrap();
    let n: usize = std::env::args().nth(1).map(|a| a.parse().unwrap()).unwrap_or(1);
    for _ in 0..n {
        let s = parse_save(&text[..], "x", SourceHint::default()).unwrap();
        let obs = portdrift::observed::Observed {
            sources: vec![s],
            ..Default::default()
        };
        let f = portdrift::detect::detect(
            Some(&desired),
            &obs,
            &portdrift::detect::DetectConfig {
                nodeport_range: 20000..=32767,
            },
        );
        assert!(f.is_empty());
    }
}
