//! A tiny network of private namespaces for real-packet tests: a client, a node, and a
//! pod with a real HTTP server, joined by veth pairs and routed through the node:
//!
//! ```text
//!  client 10.77.1.2 ── 10.77.1.1 node 10.77.2.1 ── 10.77.2.2 pod (HTTP :8080)
//! ```
//!
//! Everything is created under unique names and removed on drop, also when a test
//! fails. Nothing touches the host's own namespace beyond creating the veth pairs
//! there for the instant before they move.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const NODE_IP: &str = "10.77.1.1";
pub const POD_IP: &str = "10.77.2.2";
pub const POD_PORT: u16 = 8080;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The namespaces of one test, deleted on drop.
pub struct Lab {
    pub client: String,
    pub node: String,
    pub pod: String,
    server: Option<Child>,
    _www: tempfile::TempDir,
}

fn ip(args: &[&str]) {
    run_ok("ip", args);
}

/// Runs a command and panics with its output when it fails.
pub fn run_ok(program: &str, args: &[&str]) -> Output {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} does not run: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A veth pair between two namespaces: (name, namespace, address) for each end.
fn link(a: (&str, &str, &str), b: (&str, &str, &str)) {
    ip(&["link", "add", a.0, "type", "veth", "peer", "name", b.0]);
    for (name, ns, addr) in [a, b] {
        ip(&["link", "set", name, "netns", ns]);
        ip(&["-n", ns, "addr", "add", addr, "dev", name]);
        ip(&["-n", ns, "link", "set", name, "up"]);
    }
}

impl Lab {
    /// Builds the three namespaces and starts the pod's HTTP server, which answers
    /// `pod-a` on `/`.
    #[expect(
        clippy::new_without_default,
        reason = "it creates namespaces in the kernel and starts a server: no default value"
    )]
    pub fn new() -> Lab {
        let id = format!(
            "{}{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let www = tempfile::TempDir::new().unwrap();
        std::fs::write(www.path().join("index.html"), "pod-a\n").unwrap();
        let mut lab = Lab {
            client: format!("pdr{id}c"),
            node: format!("pdr{id}n"),
            pod: format!("pdr{id}p"),
            server: None,
            _www: www,
        };
        for ns in [&lab.client, &lab.node, &lab.pod] {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        let (client, node, pod) = (lab.client.clone(), lab.node.clone(), lab.pod.clone());
        link(
            (&format!("pc{id}"), &client, "10.77.1.2/24"),
            (&format!("pn{id}"), &node, "10.77.1.1/24"),
        );
        link(
            (&format!("pq{id}"), &node, "10.77.2.1/24"),
            (&format!("pp{id}"), &pod, "10.77.2.2/24"),
        );
        ip(&["-n", &lab.client, "route", "add", "default", "via", NODE_IP]);
        ip(&["-n", &lab.pod, "route", "add", "default", "via", "10.77.2.1"]);
        lab.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        lab.start_server();
        lab
    }

    fn start_server(&mut self) {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.pod, "python3", "-m", "http.server"])
            .arg(POD_PORT.to_string())
            .args(["--bind", POD_IP, "--directory"])
            .arg(self._www.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs");
        self.server = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let out = self.curl_from(&self.node, &format!("http://{POD_IP}:{POD_PORT}/"));
            if out.as_deref() == Some("pod-a") {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the pod's HTTP server did not come up");
    }

    /// Runs a command inside the node's namespace.
    pub fn exec(&self, cmd: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.node])
            .args(cmd)
            .output()
            .expect("ip netns exec runs")
    }

    /// Runs a command inside the node's namespace with `input` on stdin.
    pub fn exec_with_input(&self, cmd: &[&str], input: &str) -> Output {
        exec_in_with_input(&self.node, cmd, input)
    }

    /// Loads iptables-restore input into the node (no flush of what is there).
    pub fn restore(&self, tool: &str, rules: &str) {
        let out = self.exec_with_input(&[tool, "--noflush", "-w"], rules);
        assert!(
            out.status.success(),
            "{tool} failed: {}\n{rules}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The body of `GET url` from `ns`, or None when the request fails (2 s limit).
    pub fn curl_from(&self, ns: &str, url: &str) -> Option<String> {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "curl", "-sS", "--max-time", "2", url])
            .output()
            .expect("curl runs");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// `GET http://node:port/` from the client.
    pub fn curl_nodeport(&self, port: u16) -> Option<String> {
        self.curl_from(&self.client, &format!("http://{NODE_IP}:{port}/"))
    }

    /// A dump of the node's ruleset with counters zeroed and date comments dropped, so
    /// two dumps compare by content.
    pub fn ruleset(&self, tool: &str) -> Vec<String> {
        let out = self.exec(&[tool]);
        assert!(
            out.status.success(),
            "{tool}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        normalise(&String::from_utf8_lossy(&out.stdout))
    }

    /// Runs the portdrift binary (`portdrift`: its path) in the node's namespace.
    pub fn portdrift(&self, portdrift: &Path, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.node])
            .arg(portdrift)
            .args(args)
            .output()
            .expect("portdrift runs")
    }

    pub fn path_of(&self, p: &Path) -> String {
        p.to_str().expect("utf-8 path").to_string()
    }
}

/// Runs a command inside namespace `ns` with `input` on stdin.
pub fn exec_in_with_input(ns: &str, cmd: &[&str], input: &str) -> Output {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(cmd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ip netns exec runs");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// Drops comments and zeroes `[packets:bytes]` counters.
pub fn normalise(dump: &str) -> Vec<String> {
    dump.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| match (l.starts_with(':'), l.rfind(" [")) {
            (true, Some(at)) => format!("{} [0:0]", &l[..at]),
            _ => l.to_string(),
        })
        .collect()
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        for ns in [&self.client, &self.node, &self.pod] {
            // Deleting a namespace takes its end of every veth pair, and the pair with it.
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}
