//! A node and a client in private network namespaces, for proving `portdrift explain`
//! against the kernel: the node loads a bundle's rules in kube-proxy's own format, the
//! client opens real connections to a NodePort, and the kernel's trace (`nft monitor
//! trace`) and conntrack table say where each one went.
//!
//! ```text
//!  client 10.78.1.2 ── 10.78.1.1 node 10.78.2.1 ── 10.78.2.2 sink
//!                                  (10.244.0.0/16, 10.245.0.0/16 via the sink)
//! ```
//!
//! Endpoints need not answer: conntrack records a DNAT on the first SYN, confirmed as
//! the node forwards it, and the sink (which forwards nothing) swallows it. Everything
//! is removed on drop.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::netns::{exec_in_with_input, run_ok};

pub const NODE_IP: &str = "10.78.1.1";
pub const CLIENT_IP: &str = "10.78.1.2";

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct TraceLab {
    pub client: String,
    pub node: String,
    pub sink: String,
}

/// One traced packet: the rules it matched, as `("ip nat", "KUBE-NODEPORTS")`.
pub type Trace = Vec<(String, String)>;

impl TraceLab {
    /// Builds the three namespaces, joined and routed as drawn above.
    #[expect(
        clippy::new_without_default,
        reason = "it creates namespaces in the kernel: no default value"
    )]
    pub fn new() -> TraceLab {
        let id = format!(
            "{}{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let lab = TraceLab {
            client: format!("pdx{id}c"),
            node: format!("pdx{id}n"),
            sink: format!("pdx{id}s"),
        };
        for ns in [&lab.client, &lab.node, &lab.sink] {
            run_ok("ip", &["netns", "add", ns]);
            run_ok("ip", &["-n", ns, "link", "set", "lo", "up"]);
        }
        link(
            (&format!("xc{id}"), &lab.client, "10.78.1.2/24"),
            (&format!("xn{id}"), &lab.node, "10.78.1.1/24"),
        );
        link(
            (&format!("xm{id}"), &lab.node, "10.78.2.1/24"),
            (&format!("xs{id}"), &lab.sink, "10.78.2.2/24"),
        );
        run_ok(
            "ip",
            &["-n", &lab.client, "route", "add", "default", "via", NODE_IP],
        );
        for net in ["10.244.0.0/16", "10.245.0.0/16"] {
            run_ok("ip", &["-n", &lab.node, "route", "add", net, "via", "10.78.2.2"]);
        }
        lab.exec_ok(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        lab
    }

    pub fn exec_ok(&self, cmd: &[&str]) -> String {
        let mut args = vec!["netns", "exec", self.node.as_str()];
        args.extend_from_slice(cmd);
        String::from_utf8_lossy(&run_ok("ip", &args).stdout).into_owned()
    }

    /// Loads rules with `tool` (`iptables-nft-restore`, `nft -f -`, …) from `text`,
    /// creating first the nfacct objects the rules name, as kube-proxy's node has them.
    pub fn load(&self, tool: &[&str], text: &str) {
        for name in nfacct_names(text) {
            // Exists already when an earlier file named it too.
            let _ = Command::new("ip")
                .args(["netns", "exec", &self.node, "nfacct", "add", &name])
                .output();
        }
        let out = exec_in_with_input(&self.node, tool, text);
        assert!(
            out.status.success(),
            "{tool:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Opens `count` TCP connections from the client to the node's `port` (each from
    /// its own source port; closed before any answer) while the kernel traces them.
    /// Returns each traced packet's matched rules and where conntrack says each
    /// connection was sent (`ip:port`), by count.
    pub fn connect_traced(&self, port: u16, count: usize) -> (Vec<Trace>, BTreeMap<String, usize>) {
        self.exec_ok(&["nft", "add", "table", "ip", "pdtrace"]);
        self.exec_ok(&[
            "nft",
            "add chain ip pdtrace pre { type filter hook prerouting priority -350; }",
        ]);
        self.exec_ok(&[
            "nft",
            &format!("add rule ip pdtrace pre tcp dport {port} tcp flags syn meta nftrace set 1"),
        ]);
        let out = tempfile::NamedTempFile::new().unwrap();
        let mut monitor = Command::new("ip")
            .args(["netns", "exec", &self.node, "nft", "monitor", "trace"])
            .stdout(out.reopen().unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("nft monitor runs");
        std::thread::sleep(Duration::from_millis(400));
        let client = format!(
            r#"
import socket, time
for i in range({count}):
    s = socket.socket()
    # A port of its own: a port the kernel picks again after a close would find the
    # earlier connection's conntrack entry, and the nat chains never see the packet.
    s.bind(("{CLIENT_IP}", 20000 + i))
    s.setblocking(False)
    try:
        s.connect(("{NODE_IP}", {port}))
    except BlockingIOError:
        pass
    time.sleep(0.002)
    s.close()
"#
        );
        let sent = exec_in_with_input(&self.client, &["python3", "-"], &client);
        assert!(
            sent.status.success(),
            "the client failed: {}",
            String::from_utf8_lossy(&sent.stderr)
        );
        std::thread::sleep(Duration::from_millis(800));
        let _ = monitor.kill();
        let _ = monitor.wait();
        self.exec_ok(&["nft", "delete", "table", "ip", "pdtrace"]);
        let text = std::fs::read_to_string(out.path()).unwrap();
        let traces = parse_traces(&text);
        let conntrack = self.exec_ok(&[
            "conntrack",
            "-L",
            "-p",
            "tcp",
            "--orig-port-dst",
            &port.to_string(),
        ]);
        let mut targets = BTreeMap::new();
        for line in conntrack.lines() {
            if let Some(target) = reply_source(line) {
                *targets.entry(target).or_default() += 1;
            }
        }
        (traces, targets)
    }

    /// Runs `portdrift explain ARGS --format json` on the node, live (`portdrift`: the
    /// binary's path).
    pub fn explain(&self, portdrift: &Path, args: &[&str]) -> serde_json::Value {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.node])
            .arg(portdrift)
            .arg("explain")
            .args(args)
            .args([
                "--format",
                "json",
                "--kube-proxy-healthz",
                "off",
                "--kube-proxy-metrics",
                "off",
            ])
            .output()
            .expect("portdrift runs");
        // 0 and 1: as the API says or not; 3: something was not checked (said in
        // the document). All print the explanation.
        assert!(
            out.status.code().is_some_and(|c| matches!(c, 0 | 1 | 3)),
            "explain failed ({:?}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("explain prints JSON")
    }
}

impl Drop for TraceLab {
    fn drop(&mut self) {
        for ns in [&self.client, &self.node, &self.sink] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// A veth pair between two namespaces: (device, namespace, address) for each end.
fn link(a: (&str, &str, &str), b: (&str, &str, &str)) {
    run_ok("ip", &["link", "add", a.0, "type", "veth", "peer", "name", b.0]);
    for (dev, ns, addr) in [a, b] {
        run_ok("ip", &["link", "set", dev, "netns", ns]);
        run_ok("ip", &["-n", ns, "addr", "add", addr, "dev", dev]);
        run_ok("ip", &["-n", ns, "link", "set", dev, "up"]);
    }
}

fn nfacct_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split("--nfacct-name")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// `nft monitor trace` lines → per packet, the rules that matched (not the tracing
/// table's own).
pub fn parse_traces(text: &str) -> Vec<Trace> {
    let mut by_id: BTreeMap<String, Trace> = BTreeMap::new();
    let mut order = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("trace id ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(id), Some(family), Some(table), Some(chain), Some(what)) = (
            words.next(),
            words.next(),
            words.next(),
            words.next(),
            words.next(),
        ) else {
            continue;
        };
        if table == "pdtrace" {
            continue;
        }
        if !by_id.contains_key(id) {
            order.push(id.to_string());
        }
        let trace = by_id.entry(id.to_string()).or_default();
        if what == "rule" {
            trace.push((format!("{family} {table}"), chain.to_string()));
        }
    }
    order.into_iter().filter_map(|id| by_id.remove(&id)).collect()
}

/// The reply direction's source of a conntrack line: where the connection was sent.
fn reply_source(line: &str) -> Option<String> {
    let srcs: Vec<&str> = line
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("src="))
        .collect();
    let sports: Vec<&str> = line
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("sport="))
        .collect();
    Some(format!("{}:{}", srcs.get(1)?, sports.get(1)?))
}

/// An explained path's matched rules, as the trace names them (iptables-legacy's rules
/// are not nf_tables rules and never show in a trace).
pub fn path_rules(path: &serde_json::Value) -> Trace {
    path["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["result"] == "matched" && s["backend"] != "iptables-legacy")
        .map(|s| {
            let table = s["table"].as_str().unwrap();
            let table = if s["backend"] == "nftables" {
                table.to_string()
            } else {
                format!("ip {table}")
            };
            (table, s["chain"].as_str().unwrap().to_string())
        })
        .collect()
}
