//! Prints what portdrift reads from an nftables dump: `nft -j list ruleset` (a `.json`
//! file) or `nft list ruleset` text. `--summary` prints counts and the parse time only.
//!
//! ```sh
//! cargo run --example nft_dump -- testdata/nft/basic.json
//! ```

use std::time::Instant;

use portdrift::decode::nftables::{parse_ruleset_json, parse_ruleset_text};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let summary = args.iter().any(|a| a == "--summary");
    let Some(path) = args.iter().find(|a| !a.starts_with("--")) else {
        anyhow::bail!("usage: nft_dump [--summary] FILE(.json|.txt)");
    };
    let bytes = std::fs::read(path)?;
    let started = Instant::now();
    let sources = if path.ends_with(".json") {
        parse_ruleset_json(&bytes, path)?
    } else {
        parse_ruleset_text(std::str::from_utf8(&bytes)?, path)?
    };
    let elapsed = started.elapsed();
    for s in &sources {
        let targets: usize = s.nodeports.iter().map(|r| r.targets.len()).sum();
        println!(
            "{} {}: {} NodePort rules, {} DNAT targets, {} orphans, {} unparsed, {} rules+elements, complete={}",
            s.origin,
            s.family,
            s.nodeports.len(),
            targets,
            s.orphans.len(),
            s.unparsed.len(),
            s.kube_rule_count,
            s.complete
        );
        if summary {
            continue;
        }
        for u in &s.unparsed {
            println!("  unparsed line {}: {} ({})", u.line, u.text, u.reason);
        }
        for r in &s.nodeports {
            let service = r
                .comment_service
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            println!(
                "  {}/{} {:?} {service} [{}]",
                r.protocol, r.port, r.verdict, r.rule.text
            );
            println!("    path {}", r.path.join(" → "));
            for t in r.targets.iter() {
                println!("    → {} ({}: {})", t.addr, t.chain, t.rule.text);
            }
            if let Some(d) = &r.dangling {
                println!("    dangling: {d}");
            }
        }
        for o in &s.orphans {
            println!("  orphan {} (line {})", o.chain, o.line);
        }
    }
    println!(
        "parsed {} bytes in {:.1} ms",
        bytes.len(),
        elapsed.as_secs_f64() * 1000.0
    );
    Ok(())
}
