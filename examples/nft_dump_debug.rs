fn main() {
    let path = std::env::args().nth(1).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let sources = if path.ends_with(".json") {
        portdrift::observed::nftables::parse_ruleset_json(&bytes, &path).unwrap()
    } else {
        portdrift::observed::nftables::parse_ruleset_text(std::str::from_utf8(&bytes).unwrap(), &path)
            .unwrap()
    };
    for s in sources {
        println!(
            "== {} {:?} kube_rule_count={} complete={} unparsed={:?}",
            s.origin, s.family, s.kube_rule_count, s.complete, s.unparsed
        );
        for r in &s.nodeports {
            println!(
                "{} {}/{} {:?} svc={:?} hash={:?} dangling={:?} line={} text={:?}",
                r.family,
                r.protocol,
                r.port,
                r.verdict,
                r.comment_service.as_ref().map(|s| s.to_string()),
                r.chain_hash,
                r.dangling,
                r.rule.line,
                r.rule.text
            );
            println!("   path={:?}", r.path);
            for t in &r.targets {
                println!(
                    "   -> {} in {} line {} {:?} {:?}",
                    t.addr, t.chain, t.rule.line, t.rule.text, t.identity
                );
            }
        }
        for o in &s.orphans {
            println!("orphan {} line {}", o.chain, o.line);
        }
    }
}
