//! `sources::owners` on the real `/proc`: real processes listening on real sockets.
//!
//! The squatter is python3 run through a symlink named `squatterd`, so the kernel's
//! `comm` for it is `squatterd`. These tests need no privilege, except the one that
//! drops to `nobody` to see what a walk without `CAP_SYS_PTRACE` reports.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use portdrift::decode::proc_process::{ArgvEvidence, parse_cgroup};
use portdrift::decode::sockets::parse_proc_net;
use portdrift::heart::model::Protocol;
use portdrift::sources::owners::{Owners, find_owners};

/// Listens on 127.0.0.1:<any>, prints `<port> <worker pid>`, and waits for stdin to
/// close. With `fork`, a worker process shares the listening socket.
const SQUATTER: &str = r#"
import os, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0))
s.listen(16)
worker = 0
if sys.argv[1:] == ["fork"]:
    worker = os.fork()
    if worker == 0:
        sys.stdin.read()
        os._exit(0)
print(s.getsockname()[1], worker, flush=True)
sys.stdin.read()
"#;

/// The real python3 executable (not a pyenv shim), or None when there is none.
fn python3() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && path.is_absolute()).then_some(path)
}

fn have_python(test: &str) -> Option<PathBuf> {
    let python = python3();
    if python.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test} needs python3, and CI must not skip it"
        );
        eprintln!("skipping {test}: needs python3");
    }
    python
}

/// A running `squatterd`; killed when dropped.
struct Squatter {
    child: Child,
    port: u16,
    worker: u32,
    _dir: tempfile::TempDir,
}

impl Squatter {
    fn start(python: &Path, fork: bool) -> Squatter {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("squatterd");
        std::os::unix::fs::symlink(python, &exe).unwrap();
        let mut cmd = Command::new(&exe);
        cmd.args(["-c", SQUATTER]);
        if fork {
            cmd.arg("fork");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("squatterd starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let mut words = line.split_whitespace();
        let (Some(port), Some(worker)) = (words.next(), words.next()) else {
            let _ = child.kill();
            panic!("squatterd printed {line:?}");
        };
        Squatter {
            child,
            port: port.parse().unwrap(),
            worker: worker.parse().unwrap(),
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The inode of its listening socket, from the real `/proc/net/tcp`.
    fn inode(&self) -> u64 {
        let tcp = std::fs::read("/proc/net/tcp").unwrap();
        let (listeners, unparsed) = parse_proc_net(&tcp, Protocol::Tcp, false, "/proc/net/tcp");
        assert!(unparsed.is_empty(), "{unparsed:?}");
        listeners
            .iter()
            .find(|l| l.port == self.port && l.addr == IpAddr::V4(Ipv4Addr::LOCALHOST))
            .unwrap_or_else(|| panic!("no listener on 127.0.0.1:{} in /proc/net/tcp", self.port))
            .inode
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Squatter {
    fn drop(&mut self) {
        // Closing stdin ends the forked worker too.
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn proc_root() -> &'static Path {
    Path::new("/proc")
}

fn set(inodes: &[u64]) -> HashSet<u64> {
    inodes.iter().copied().collect()
}

#[test]
fn finds_a_real_listener_by_its_inode() {
    let Some(python) = have_python("finds_a_real_listener_by_its_inode") else {
        return;
    };
    let squatter = Squatter::start(&python, false);
    let inode = squatter.inode();

    let owners = find_owners(proc_root(), &set(&[inode]), ArgvEvidence::Redacted);
    let owner = owners
        .by_inode
        .get(&inode)
        .unwrap_or_else(|| panic!("no owner for inode {inode}: {owners:?}"));
    assert_eq!(owner.pid, squatter.pid());
    assert_eq!(owner.name, "squatterd");
    let cmdline = owner.cmdline.as_deref().unwrap();
    assert!(cmdline.contains("squatterd -c"), "{cmdline}");
    assert!(cmdline.chars().count() <= 256);
    // The child lives in this test's cgroup, so it is in the same container and pod.
    let ours = parse_cgroup(&std::fs::read_to_string("/proc/self/cgroup").unwrap());
    assert_eq!((&owner.container, &owner.pod), (&ours.container, &ours.pod));
    assert_eq!(owners.failed, 0);
    // Found, so whatever could not be read did not matter.
    assert!(owners.notes.is_empty(), "{:?}", owners.notes);

    // The JSON contract: `process` has at least pid, name, container, pod.
    let json = serde_json::to_value(owner).unwrap();
    for field in ["pid", "name", "container", "pod"] {
        assert!(json.get(field).is_some(), "{field} missing from {json}");
    }
    assert_eq!(json["name"], "squatterd");
}

#[test]
fn a_shared_socket_belongs_to_the_parent() {
    let Some(python) = have_python("a_shared_socket_belongs_to_the_parent") else {
        return;
    };
    let squatter = Squatter::start(&python, true);
    assert!(squatter.worker > 0 && squatter.worker != squatter.pid());
    let inode = squatter.inode();
    // The worker really holds the socket too.
    let worker_fds = std::fs::read_dir(format!("/proc/{}/fd", squatter.worker)).unwrap();
    let link = format!("socket:[{inode}]");
    assert!(
        worker_fds
            .flatten()
            .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == link.as_str())),
        "the forked worker does not hold {link}"
    );

    let owners = find_owners(proc_root(), &set(&[inode]), ArgvEvidence::Omitted);
    // pids grow, so the parent's is the lower one (unless pids wrapped in between).
    assert_eq!(owners.by_inode[&inode].pid, squatter.pid().min(squatter.worker));
    assert_eq!(owners.by_inode[&inode].pid, squatter.pid());
}

#[test]
fn an_exited_process_is_simply_absent() {
    let Some(python) = have_python("an_exited_process_is_simply_absent") else {
        return;
    };
    let squatter = Squatter::start(&python, false);
    let (inode, pid) = (squatter.inode(), squatter.pid());
    squatter.stop();
    assert!(!Path::new(&format!("/proc/{pid}")).exists());

    let owners = find_owners(proc_root(), &set(&[inode]), ArgvEvidence::Omitted);
    assert!(owners.by_inode.is_empty(), "{:?}", owners.by_inode);
    assert_eq!(owners.failed, 0, "{:?}", owners.notes);
    // Only permission problems (when not root) may be told; an exit is not one.
    assert!(
        owners.notes.iter().all(|n| n.contains("CAP_SYS_PTRACE")),
        "{:?}",
        owners.notes
    );
}

#[test]
fn walks_race_with_processes_that_come_and_go() {
    let Some(python) = have_python("walks_race_with_processes_that_come_and_go") else {
        return;
    };
    let squatter = Squatter::start(&python, false);
    let inode = squatter.inode();

    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut spawned = 0u32;
            while !stop.load(Ordering::Relaxed) {
                // Short-lived processes with a few fds each, exiting during the walks.
                if let Ok(mut c) = Command::new("sh")
                    .args(["-c", "exec 3</dev/null 4</dev/null; :"])
                    .stdin(Stdio::null())
                    .spawn()
                {
                    let _ = c.wait();
                    spawned += 1;
                }
            }
            spawned
        })
    };

    let deadline = Instant::now() + Duration::from_secs(2);
    let mut walks = 0;
    while walks < 20 || Instant::now() < deadline {
        // u64::MAX is nobody's: every walk goes through every process.
        let owners = find_owners(proc_root(), &set(&[inode, u64::MAX]), ArgvEvidence::Omitted);
        assert_eq!(owners.by_inode[&inode].name, "squatterd");
        assert_eq!(owners.failed, 0, "{:?}", owners.notes);
        walks += 1;
        if walks >= 200 {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let spawned = churn.join().unwrap();
    eprintln!("{walks} walks while {spawned} processes came and went");
    assert!(spawned > 0);
}

/// Env var that turns [`helper_unprivileged_walk`] on, with the inode to look for.
const HELPER_ENV: &str = "PORTDRIFT_OWNERS_HELPER_INODE";
/// What precedes the helper's result (the harness may print its own words first).
const HELPER_PREFIX: &str = "OWNERS-RESULT ";

/// Not a test by itself: [`without_ptrace_access_owners_are_unknown`] runs this test
/// binary again as `nobody` with [`HELPER_ENV`] set, and this is what runs there.
#[test]
fn helper_unprivileged_walk() {
    let Some(inode) = std::env::var(HELPER_ENV).ok().and_then(|v| v.parse::<u64>().ok()) else {
        return;
    };
    let Owners {
        by_inode,
        notes,
        processes,
        denied,
        failed,
    } = find_owners(proc_root(), &set(&[inode]), ArgvEvidence::Omitted);
    let result = serde_json::json!({
        "found": by_inode.contains_key(&inode),
        "notes": notes,
        "processes": processes,
        "denied": denied,
        "failed": failed,
    });
    let mut out = std::io::stdout().lock();
    writeln!(out, "{HELPER_PREFIX}{result}").unwrap();
}

#[test]
fn without_ptrace_access_owners_are_unknown() {
    let test = "without_ptrace_access_owners_are_unknown";
    if !support::require_root(test) {
        return;
    }
    let Some(python) = have_python(test) else {
        return;
    };
    // A root-owned squatter; `nobody` may not read its fds.
    let squatter = Squatter::start(&python, false);
    let inode = squatter.inode();

    // A copy of this test binary that `nobody` can run.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("owners-test");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut attempts = 0;
    let out = loop {
        let run = Command::new(&exe)
            .args([
                "--exact",
                "helper_unprivileged_walk",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER_ENV, inode.to_string())
            .current_dir(dir.path())
            .uid(65534)
            .gid(65534)
            .output();
        match run {
            // Another test thread forked while the copy was open for writing, and its
            // child still holds that fd until it execs: wait for it.
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && attempts < 50 => {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            run => break run.expect("the test binary runs as nobody"),
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "helper failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once(HELPER_PREFIX).map(|(_, result)| result))
        .unwrap_or_else(|| panic!("the helper printed no result: {stdout}"));
    let result: serde_json::Value = serde_json::from_str(line).unwrap();

    assert_eq!(result["found"], false, "{result}");
    assert!(result["denied"].as_u64().unwrap() >= 1, "{result}");
    assert_eq!(result["failed"], 0, "{result}");
    // Its own process it can read.
    assert!(result["processes"].as_u64().unwrap() >= 1, "{result}");
    let notes = result["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{result}");
    let note = notes[0].as_str().unwrap();
    assert!(
        note.starts_with("could not read the file descriptors of ")
            && note.ends_with("(needs CAP_SYS_PTRACE): owners of some sockets are unknown"),
        "{note}"
    );
    drop(squatter);
}
