//! Faults around the agent and the snapshot writer that the other suites do not make:
//! the listen port already taken, and a disk that fills while a snapshot is written.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_listen_port_already_taken_is_a_clear_error_and_a_non_zero_exit() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let free = "127.0.0.1:0";
    // Either listener: the public one, then the loopback one of /findings.
    for (listen, findings, flag) in [
        (addr.as_str(), "off", ""),
        (free, addr.as_str(), " (--findings-listen)"),
    ] {
        refused_at_once(
            &["--listen", listen, "--findings-listen", findings],
            &format!("cannot listen on {addr}{flag}"),
        );
    }
    drop(taken);
}

/// `portdrift run ARGS` exits 2 at once, saying `said` and that the address is in use.
fn refused_at_once(args: &[&str], said: &str) {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_portdrift"))
        .args(["run", "--node", "node-1", "--interval", "1s"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It must give up, not wait for the port.
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the agent kept running with its port taken");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(said) && stderr.contains("in use"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_disk_that_fills_while_a_snapshot_is_written_is_a_clear_error() {
    if !support::require_root("a_disk_that_fills_while_a_snapshot_is_written_is_a_clear_error") {
        return;
    }
    // A real full disk: a 64 KiB tmpfs, mostly filled, in a mount namespace of its own
    // (nothing outside it sees the mount). The bundle's files do not fit.
    let script = r#"
set -eu
pd=$1; cluster=$2
mnt=$(mktemp -d)
mount -t tmpfs -o size=64k tmpfs "$mnt"
head -c 56000 /dev/zero >"$mnt/filler"
set +e
"$pd" snapshot --out "$mnt/snap" --cluster-state "$cluster" --node node-1 --kube-proxy-healthz off
echo "exit=$?" >&2
find "$mnt/snap" -type f >&2
"#;
    let cluster = support::root().join("testdata/clean-iptables/cluster.json");
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "bash", "-c", script, "bash"])
        .arg(env!("CARGO_BIN_EXE_portdrift"))
        .arg(&cluster)
        .output()
        .expect("unshare runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("exit=2"), "{stderr}");
    assert!(
        stderr.contains("cannot write a snapshot") && stderr.contains("No space left on device"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Nothing half-written passes for a bundle: no manifest, and no file left under a
    // temporary name.
    assert!(!stderr.contains("snapshot.json"), "{stderr}");
    assert!(!stderr.contains(".partial"), "{stderr}");
}
