use super::*;
use crate::decode::netlink::request;
use crate::heart::model::Family;

/// Rules of one long chain, as iptables-nft-restore loads them.
const LONG_CHAIN_RULES: usize = 4000;

/// A dump cut short by a commit ends at the first part the kernel marks interrupted:
/// reading it to its end would have the kernel walk the rest of the chain for nothing
/// (quadratically: each part resumes from the chain's first rule). The connection then
/// reads the chain whole, as if nothing had happened. Run in a fresh network namespace
/// (the test binary runs itself there), never the host's.
#[test]
fn a_dump_cut_short_by_a_commit_stops_there_and_the_next_reads_whole() {
    if !rustix::process::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "reading a dump cut short needs root, and CI must not skip it"
        );
        eprintln!("skipping: reading a dump cut short needs root (CI has it)");
        return;
    }
    let me = std::env::current_exe().unwrap();
    let run = std::process::Command::new("unshare")
        .arg("-n")
        .arg(me)
        .args([
            "--exact",
            "sources::netlink::tests::dump_cut_short_in_this_namespace",
            "--ignored",
            "--nocapture",
        ])
        .env("PORTDRIFT_FRESH_NETNS", "1")
        .output()
        .expect("unshare runs");
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && out.contains("1 passed"),
        "{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
#[ignore = "run in a fresh network namespace by a_dump_cut_short_by_a_commit_stops_there_and_the_next_reads_whole"]
fn dump_cut_short_in_this_namespace() {
    assert!(
        std::env::var_os("PORTDRIFT_FRESH_NETNS").is_some(),
        "only in a fresh namespace"
    );
    use std::fmt::Write as _;
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut restore = String::from("*nat\n:KUBE-NODEPORTS - [0:0]\n");
    for i in 0..LONG_CHAIN_RULES {
        let _ = writeln!(
            restore,
            "-A KUBE-NODEPORTS -p tcp -m comment --comment \"ns/svc-{i}:http\" -m tcp --dport {} -j ACCEPT",
            20000 + i
        );
    }
    restore.push_str("COMMIT\n");
    let mut child = Command::new("iptables-nft-restore")
        .stdin(Stdio::piped())
        .spawn()
        .expect("iptables-nft-restore runs");
    child.stdin.take().unwrap().write_all(restore.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success(), "the chain loads");

    let limits = NetlinkLimits {
        timeout: Duration::from_secs(30),
        max_bytes: 1 << 30,
    };
    let mut conn = Conn::open(limits, Instant::now() + limits.timeout, None).unwrap();
    let rules_request = request::rules(Family::Ipv4, "nat", "KUBE-NODEPORTS");
    let mut handed = 0;
    let cut = conn.exchange("the rules", &rules_request, |_| {
        handed += 1;
        if handed == 1 {
            // A commit while the dump is under way.
            let added = Command::new("iptables-nft")
                .args([
                    "-t",
                    "nat",
                    "-A",
                    "KUBE-NODEPORTS",
                    "-p",
                    "tcp",
                    "--dport",
                    "39999",
                    "-j",
                    "ACCEPT",
                ])
                .status()
                .expect("iptables-nft runs");
            assert!(added.success());
        }
        Ok(())
    });
    assert!(matches!(cut, Err(NetlinkError::Unstable(1))), "{cut:?}");
    let cut_bytes = conn.bytes;

    let mut rules = 0;
    conn.exchange("the rules", &rules_request, |_| {
        rules += 1;
        Ok(())
    })
    .expect("the same connection reads the chain whole");
    let whole_bytes = conn.bytes - cut_bytes;
    assert_eq!(
        rules,
        LONG_CHAIN_RULES + 1,
        "every rule, the one the commit added too"
    );
    // The parts read before the commit was seen (the kernel prepares one ahead), not
    // the chain's remaining hundred.
    assert!(
        handed < LONG_CHAIN_RULES / 10 && cut_bytes * 10 < whole_bytes,
        "the cut dump was read on: {handed} rules, {cut_bytes} bytes of {whole_bytes}"
    );
}
