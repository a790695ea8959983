//! Reading the running node: the netfilter dump tools, `/proc`, and kube-proxy's
//! `/healthz`, as a DaemonSet pod with `hostNetwork` sees them.
//!
//! [`run_tool`] runs one external tool without a shell: the binary is found on `PATH`
//! by its explicit name (`iptables-nft-save`, never the `iptables-save` wrapper, whose
//! iptables-wrappers symlink trick breaks on a read-only root filesystem), its stdout
//! is streamed into a consumer while it prints (the iptables parser parses, the
//! snapshot writer writes a file; no dump is held whole in memory), a watchdog kills
//! it at its deadline, and what it said on stderr is kept as a bounded excerpt. Every
//! way a tool can go wrong is an [`ToolOutcome`], never an error of the scan.
//!
//! [`LiveNode`] puts these together as a [`Source`] of bundle files, so a live scan
//! and a snapshot read the node through the same code as an offline scan reads a
//! bundle directory.

use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader, Cursor, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::heart::model::{Family, RuleSource};
use crate::heart::outcome::SourceState;
use crate::sources::bundle::{Fetched, HEALTHZ_FILE, PROXY_MODE_FILE, Source, fetch_file, fetch_required};
use crate::sources::netlink::NetlinkLimits;
use crate::sources::netlink::nftables::{ConstantMaps, read_tables_netlink, read_tables_netlink_keeping};

/// Limits on one tool run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    /// The tool is killed when it has not finished (and its output has not been
    /// consumed) by then.
    pub timeout: Duration,
    /// Reading stops, and the tool is killed, past this many bytes of stdout.
    pub max_output: u64,
}

/// 60 s: a tool stuck on a lock or a wedged kernel must not hold the scan forever, but
/// a large node's dump is slow: on the generated 10,000-Service node (232,255 rules in
/// iptables-nft) `iptables-nft-save` itself takes 22–29 s (README, Performance).
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// 256 MiB: ten times the dump of a 10,000-Service node.
pub const DEFAULT_MAX_OUTPUT: u64 = 256 << 20;

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            timeout: DEFAULT_TOOL_TIMEOUT,
            max_output: DEFAULT_MAX_OUTPUT,
        }
    }
}

/// How much of a tool's stderr is kept.
const STDERR_EXCERPT: usize = 4096;
/// How long the output readers may take to finish once the tool has been killed (a
/// grandchild outside the tool's process group could hold the pipes open); after
/// that they are abandoned and the scan goes on.
const READER_GRACE: Duration = Duration::from_millis(500);

/// How one tool run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolOutcome {
    /// The binary is not on `PATH` (or vanished before it could start).
    Absent,
    /// It exited 0 and printed nothing.
    Empty,
    /// It exited 0 and printed something.
    Ok,
    /// It exited non-zero, was killed by a signal, or could not be started.
    Failed(String),
    /// It was killed at its deadline.
    TimedOut,
    /// It printed more than the output limit; it was killed and reading stopped there.
    TooLarge,
}

impl ToolOutcome {
    /// The source state this outcome gives.
    pub fn state(&self) -> SourceState {
        match self {
            ToolOutcome::Absent => SourceState::Absent,
            ToolOutcome::Empty => SourceState::Empty,
            ToolOutcome::Ok => SourceState::Ok,
            ToolOutcome::Failed(_) => SourceState::Failed,
            ToolOutcome::TimedOut => SourceState::TimedOut,
            ToolOutcome::TooLarge => SourceState::TooLarge,
        }
    }
}

/// Everything one tool run produced.
#[derive(Debug)]
pub struct ToolRun<T> {
    /// The command as run, for messages (`iptables-nft-save`).
    pub command: String,
    /// Where the binary was found on `PATH`.
    pub path: Option<PathBuf>,
    pub outcome: ToolOutcome,
    /// What the consumer returned; None when it never ran (absent tool) or did not
    /// finish within the grace period after the tool was killed.
    pub value: Option<io::Result<T>>,
    /// The start of what the tool printed on stderr, lossily decoded and trimmed.
    pub stderr: String,
    /// Bytes of stdout the consumer was given.
    pub stdout_bytes: u64,
    pub elapsed: Duration,
}

/// Finds `program` on `PATH` the way `execvp` does: the first directory holding an
/// executable regular file of that name.
pub fn find_on_path(program: &str) -> Option<PathBuf> {
    find_in(program, std::env::var_os("PATH").as_deref())
}

fn find_in(program: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    if program.contains('/') {
        return is_executable(Path::new(program)).then(|| PathBuf::from(program));
    }
    std::env::split_paths(path?)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Thrown by [`CappedReader`] past the output limit.
#[derive(Debug)]
struct OutputLimit;

impl std::fmt::Display for OutputLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the output limit was reached")
    }
}

impl std::error::Error for OutputLimit {}

/// A reader that counts what it hands out and fails past a limit.
struct CappedReader<R> {
    inner: R,
    limit: u64,
    count: Arc<AtomicU64>,
    over: Arc<AtomicBool>,
}

impl<R: Read> Read for CappedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let used = self.count.load(Ordering::Relaxed);
        let left = self.limit.saturating_sub(used);
        if left == 0 {
            // At the limit: one more byte means the output is too large.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => {
                    self.over.store(true, Ordering::Relaxed);
                    Err(io::Error::other(OutputLimit))
                }
            };
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Runs `program args...` (found on `PATH`, no shell), streaming its stdout into
/// `consume` on a reader thread while the calling thread watches the deadline.
///
/// The tool runs in its own process group, so that the watchdog's kill also reaches
/// anything it started (a wrapper script's `sleep`, say) that would otherwise hold
/// the output pipe open. Its stdin is `/dev/null` and `LC_ALL=C` keeps its messages
/// in the words this module recognises.
pub fn run_tool<T, F>(program: &str, args: &[&str], limits: ToolLimits, consume: F) -> ToolRun<T>
where
    T: Send + 'static,
    F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
{
    run_tool_with_input(program, args, None, limits, consume)
}

/// [`run_tool`] with `input` written to the tool's stdin (then closed), for the tools
/// that read a script there (`iptables-restore`, `nft -f -`). The input is written on
/// its own thread, so a tool that stops reading cannot block the watchdog.
pub fn run_tool_with_input<T, F>(
    program: &str,
    args: &[&str],
    input: Option<Vec<u8>>,
    limits: ToolLimits,
    consume: F,
) -> ToolRun<T>
where
    T: Send + 'static,
    F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
{
    let start = Instant::now();
    let command = std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    let mut run = ToolRun {
        command,
        path: find_on_path(program),
        outcome: ToolOutcome::Absent,
        value: None,
        stderr: String::new(),
        stdout_bytes: 0,
        elapsed: Duration::ZERO,
    };
    let Some(path) = run.path.clone() else {
        return run;
    };
    let spawned = Command::new(&path)
        .args(args)
        .env("LC_ALL", "C")
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            run.elapsed = start.elapsed();
            return run;
        }
        Err(e) => {
            run.outcome = ToolOutcome::Failed(format!("could not start {}: {e}", path.display()));
            run.elapsed = start.elapsed();
            return run;
        }
    };

    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        // A failed write shows as the tool's own complaint (or exit status).
        let writer = thread::Builder::new()
            .name(format!("{program} stdin"))
            .spawn(move || {
                let _ = stdin.write_all(&bytes);
            });
        if let Err(e) = writer {
            kill_group(&mut child);
            let _ = child.wait();
            run.outcome = ToolOutcome::Failed(format!("could not start a writer thread: {e}"));
            run.elapsed = start.elapsed();
            return run;
        }
    }
    let count = Arc::new(AtomicU64::new(0));
    let over = Arc::new(AtomicBool::new(false));
    let (out_tx, out_rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout is piped");
    let reader = CappedReader {
        inner: stdout,
        limit: limits.max_output,
        count: Arc::clone(&count),
        over: Arc::clone(&over),
    };
    let out_thread = thread::Builder::new()
        .name(format!("{program} stdout"))
        .spawn(move || {
            let mut r = BufReader::with_capacity(64 << 10, reader);
            let _ = out_tx.send(consume(&mut r));
        });
    let (err_tx, err_rx) = mpsc::channel();
    let stderr = child.stderr.take().expect("stderr is piped");
    let err_thread = thread::Builder::new()
        .name(format!("{program} stderr"))
        .spawn(move || {
            let mut kept = Vec::new();
            let mut stderr = stderr;
            let _ = (&mut stderr).take(STDERR_EXCERPT as u64).read_to_end(&mut kept);
            // Drain the rest so the tool never blocks on a full stderr pipe.
            let _ = io::copy(&mut stderr, &mut io::sink());
            let _ = err_tx.send(kept);
        });
    if let Err(e) = out_thread.and(err_thread) {
        kill_group(&mut child);
        let _ = child.wait();
        run.outcome = ToolOutcome::Failed(format!("could not start a reader thread: {e}"));
        run.elapsed = start.elapsed();
        return run;
    }

    let deadline = start + limits.timeout;
    let mut status: Option<ExitStatus> = None;
    let mut step = Duration::from_millis(1);
    let mut killed_for: Option<ToolOutcome> = None;
    loop {
        if run.value.is_none() {
            let wait = step.min(deadline.saturating_duration_since(Instant::now()));
            match out_rx.recv_timeout(wait) {
                Ok(v) => run.value = Some(v),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    run.value = Some(Err(io::Error::other("the output reader stopped")));
                }
            }
        } else if status.is_none() {
            thread::sleep(step.min(deadline.saturating_duration_since(Instant::now())));
        }
        if status.is_none() {
            match child.try_wait() {
                Ok(s) => status = s,
                Err(e) => {
                    run.outcome = ToolOutcome::Failed(format!("could not wait for it: {e}"));
                    killed_for = Some(run.outcome.clone());
                    break;
                }
            }
        }
        if run.value.is_some() && status.is_some() {
            break;
        }
        if over.load(Ordering::Relaxed) {
            killed_for = Some(ToolOutcome::TooLarge);
            break;
        }
        if Instant::now() >= deadline {
            killed_for = Some(ToolOutcome::TimedOut);
            break;
        }
        step = (step * 2).min(Duration::from_millis(10));
    }

    if let Some(why) = killed_for {
        if status.is_none() {
            kill_group(&mut child);
            let _ = child.wait();
        }
        run.outcome = why;
        if run.value.is_none() {
            // The pipe closes with the process group: the consumer sees the end of a
            // truncated dump and returns what it read.
            run.value = out_rx.recv_timeout(READER_GRACE).ok();
        }
    } else {
        let status = status.expect("the loop ends with a status");
        let printed = count.load(Ordering::Relaxed);
        run.outcome = if !status.success() {
            ToolOutcome::Failed(describe_exit(status))
        } else if printed == 0 {
            ToolOutcome::Empty
        } else {
            ToolOutcome::Ok
        };
    }
    if over.load(Ordering::Relaxed) {
        run.outcome = ToolOutcome::TooLarge;
    }
    let stderr = err_rx.recv_timeout(READER_GRACE).unwrap_or_default();
    run.stderr = String::from_utf8_lossy(&stderr).trim().to_string();
    run.stdout_bytes = count.load(Ordering::Relaxed);
    run.elapsed = start.elapsed();
    run
}

fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "ended abnormally".into(),
    }
}

/// Kills the tool's process group (it leads its own: `process_group(0)`), or at least
/// the tool itself.
fn kill_group(child: &mut Child) {
    let pid = rustix::process::Pid::from_child(child);
    if rustix::process::kill_process_group(pid, rustix::process::Signal::KILL).is_err() {
        let _ = child.kill();
    }
}

/// What the tools say on stderr that is worth a note, and a bounded excerpt of the rest.
pub fn stderr_notes(stderr: &str) -> Vec<String> {
    let mut notes = Vec::new();
    let mut other = Vec::new();
    for line in stderr.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.contains("tables-legacy tables present") {
            // iptables-nft's "# Warning: iptables-legacy tables present, use
            // iptables-legacy-save to see them" (ip6tables-… for IPv6).
            notes.push(format!(
                "the tool says: {}; portdrift reads both backends",
                line.trim_start_matches("# ").trim_start_matches("Warning: ")
            ));
        } else if line.contains("is incompatible, use 'nft' tool") || line.starts_with("# Warning:") {
            // iptables-nft: "# Table `nat' is incompatible, use 'nft' tool."; nft:
            // "# Warning: table ip nat is managed by iptables-nft, do not touch!".
            notes.push(format!(
                "the tool says: {}",
                line.trim_start_matches("# ").trim_start_matches("Warning: ")
            ));
        } else {
            other.push(line);
        }
    }
    if !other.is_empty() {
        let text = other.join(" / ");
        notes.push(format!("stderr: {}", crate::decode::lines::excerpt(&text, 400)));
    }
    notes
}

// ------------------------------------------------------------------ kube-proxy /healthz

/// kube-proxy's health endpoint (`--healthz-bind-address`, port 10256).
pub const DEFAULT_KUBE_PROXY_HEALTHZ: &str = "127.0.0.1:10256";
/// kube-proxy's metrics server (`--metrics-bind-address`), which answers `/proxyMode`.
pub const DEFAULT_KUBE_PROXY_METRICS: &str = "127.0.0.1:10249";
/// One loopback request: a second is plenty, and a wedged kube-proxy must not hold the scan.
pub const HEALTHZ_TIMEOUT: Duration = Duration::from_secs(1);
const HEALTHZ_MAX_RESPONSE: usize = 64 << 10;

/// An HTTP response, as far as a health check needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub reason: String,
    pub body: Vec<u8>,
}

/// Why the health request got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("unreachable at {addr}: {source}")]
    Unreachable {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("no answer from {addr} within {timeout:?}")]
    TimedOut { addr: SocketAddr, timeout: Duration },
    #[error("garbled answer from {addr}: {reason}")]
    Garbled { addr: SocketAddr, reason: String },
}

/// `GET http://ADDR/PATH` over a plain `TcpStream`, bounded in time and size.
///
/// Why not an HTTP client crate: this is one request to loopback, once per scan, with a
/// one-second budget; std's blocking socket with read/write timeouts does it without
/// an async runtime. The daemon's HTTP server (and hyper with it) arrives with `run`.
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<HttpResponse, HttpError> {
    let deadline = Instant::now() + timeout;
    let timed_out = || HttpError::TimedOut { addr, timeout };
    let garbled = |reason: String| HttpError::Garbled { addr, reason };
    let io_error = |e: io::Error| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => HttpError::TimedOut { addr, timeout },
        _ => HttpError::Unreachable { addr, source: e },
    };
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(io_error)?;
    let remaining = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    };
    stream.set_write_timeout(remaining()).map_err(io_error)?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: portdrift/{}\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
        env!("CARGO_PKG_VERSION")
    );
    stream.write_all(request.as_bytes()).map_err(io_error)?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let Some(left) = remaining() else {
            return Err(timed_out());
        };
        stream.set_read_timeout(Some(left)).map_err(io_error)?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if raw.len() > HEALTHZ_MAX_RESPONSE {
                    return Err(garbled(format!("more than {HEALTHZ_MAX_RESPONSE} bytes")));
                }
                if let Some(done) = complete_response(&raw) {
                    return done.map_err(garbled);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error(e)),
        }
    }
    match complete_response(&raw) {
        Some(done) => done.map_err(garbled),
        // The server closed the connection: the body is whatever came.
        None => parse_response(&raw, true).map_err(garbled),
    }
}

/// Some(..) once `raw` holds a whole response (by Content-Length or chunked framing).
fn complete_response(raw: &[u8]) -> Option<Result<HttpResponse, String>> {
    match parse_response(raw, false) {
        Ok(r) => Some(Ok(r)),
        Err(e) if e == INCOMPLETE => None,
        Err(e) => Some(Err(e)),
    }
}

const INCOMPLETE: &str = "incomplete";

/// Parses a response. `at_eof`: the connection is closed, so an unframed body ends here.
fn parse_response(raw: &[u8], at_eof: bool) -> Result<HttpResponse, String> {
    let incomplete = || INCOMPLETE.to_string();
    let Some(head_end) = memchr::memmem::find(raw, b"\r\n\r\n") else {
        return Err(if at_eof {
            if raw.is_empty() {
                "the connection closed without an answer".into()
            } else {
                format!(
                    "not an HTTP response: {:?}",
                    String::from_utf8_lossy(&raw[..raw.len().min(80)])
                )
            }
        } else {
            incomplete()
        });
    };
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| "the headers are not text".to_string())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP/1 status line: {status_line:?}"));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .filter(|s| (100..600).contains(s))
        .ok_or_else(|| format!("no status code in {status_line:?}"))?;
    let reason = parts.next().unwrap_or("").to_string();
    let mut content_length: Option<usize> = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("a header line without a colon: {line:?}"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            content_length = Some(
                value
                    .parse()
                    .map_err(|_| format!("bad Content-Length {value:?}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        }
    }
    let rest = &raw[head_end + 4..];
    let body = if chunked {
        match dechunk(rest) {
            Some(body) => body?,
            None if at_eof => return Err("the chunked body ends early".into()),
            None => return Err(incomplete()),
        }
    } else if let Some(len) = content_length {
        if rest.len() < len {
            if at_eof {
                return Err(format!("the body ends after {} of {len} bytes", rest.len()));
            }
            return Err(incomplete());
        }
        rest[..len].to_vec()
    } else if at_eof {
        rest.to_vec()
    } else {
        return Err(incomplete());
    };
    Ok(HttpResponse { status, reason, body })
}

/// Decodes a chunked body; None while it is incomplete.
fn dechunk(mut data: &[u8]) -> Option<Result<Vec<u8>, String>> {
    let mut body = Vec::new();
    loop {
        let line_end = memchr::memmem::find(data, b"\r\n")?;
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let Ok(size) = usize::from_str_radix(size_text, 16) else {
            return Some(Err(format!("bad chunk size {size_text:?}")));
        };
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(Ok(body));
        }
        if data.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

// ------------------------------------------------------------------ the live node as a Source

/// Where and how to read the live node.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    /// Where procfs is mounted (`/proc`; `/host/proc` in a container that mounts the
    /// host's). Sockets are read from `<proc_root>/net/*`, sysctls from
    /// `<proc_root>/sys/net/ipv4/*`, the hostname from `<proc_root>/sys/kernel/hostname`.
    pub proc_root: PathBuf,
    pub limits: ToolLimits,
    /// kube-proxy's health endpoint; None skips the check.
    pub kube_proxy_healthz: Option<SocketAddr>,
    /// kube-proxy's metrics server, asked for `/proxyMode`; None skips it.
    pub kube_proxy_metrics: Option<SocketAddr>,
    /// How long each of kube-proxy's endpoints may take to answer.
    pub healthz_timeout: Duration,
    /// The cluster state (`cluster.json` form), when given.
    pub cluster_state: Option<PathBuf>,
    /// How kube-proxy's nftables tables are read.
    pub nftables_via: NftablesVia,
    /// How iptables-nft's tables are read.
    pub iptables_via: IptablesVia,
}

/// How the live node's iptables-nft tables are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IptablesVia {
    /// From the kernel over netlink, rendered as `iptables-nft-save` prints them, with
    /// the tool as the fallback for a family holding a rule the reader cannot print
    /// exactly: on a 10,000-Service node the tool costs tens of seconds of CPU
    /// (README, Performance).
    #[default]
    Netlink,
    /// With `iptables-nft-save` / `ip6tables-nft-save` only.
    Save,
}

/// How the netlink read of iptables-nft's tables is named in reports.
pub fn iptables_netlink_label(family: Family) -> &'static str {
    match family {
        Family::Ipv4 => "netlink: nf_tables ip (iptables-nft)",
        Family::Ipv6 => "netlink: nf_tables ip6 (ip6tables-nft)",
    }
}

/// How the live node's kube-proxy nftables tables are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NftablesVia {
    /// From the kernel over netlink, with `nft -j` as the fallback when that fails: on
    /// a 10,000-Service node `nft -j` costs seconds and most of a gigabyte (README,
    /// Performance).
    #[default]
    Netlink,
    /// With `nft -j list table` only.
    Nft,
}

/// How the netlink read is named in reports.
pub const NFT_NETLINK_LABEL: &str = "netlink: nf_tables ip|ip6 kube-proxy";

impl Default for LiveConfig {
    fn default() -> Self {
        LiveConfig {
            proc_root: PathBuf::from("/proc"),
            limits: ToolLimits::default(),
            kube_proxy_healthz: DEFAULT_KUBE_PROXY_HEALTHZ.parse().ok(),
            kube_proxy_metrics: DEFAULT_KUBE_PROXY_METRICS.parse().ok(),
            healthz_timeout: HEALTHZ_TIMEOUT,
            cluster_state: None,
            nftables_via: NftablesVia::default(),
            iptables_via: IptablesVia::default(),
        }
    }
}

/// The running node as a [`Source`] of bundle files: each bundle name is answered by
/// the tool or file that a capture would have copied into it.
#[derive(Debug, Clone, Default)]
pub struct LiveNode {
    pub config: LiveConfig,
    /// Set by a reader that reads this node again and again (the agent): the constant
    /// anonymous maps of kube-proxy's nftables tables, kept between reads.
    constant_maps: Option<ConstantMaps>,
}

/// The tool that prints each iptables dump of the bundle. Never `-t`: the legacy tools
/// create the table they are asked to print.
fn tool_for(name: &str) -> Option<(&'static str, &'static [&'static str])> {
    Some(match name {
        "iptables-nft-save.txt" => ("iptables-nft-save", &[]),
        "iptables-legacy-save.txt" => ("iptables-legacy-save", &[]),
        "ip6tables-nft-save.txt" => ("ip6tables-nft-save", &[]),
        "ip6tables-legacy-save.txt" => ("ip6tables-legacy-save", &[]),
        _ => return None,
    })
}

impl LiveNode {
    pub fn new(config: LiveConfig) -> LiveNode {
        LiveNode {
            config,
            constant_maps: None,
        }
    }

    /// Keeps what one read of kube-proxy's nftables tables learnt that the next cannot
    /// find changed (see [`ConstantMaps`]): for a reader of the same node that reads it
    /// again, where it saves most of each read's kernel time; a one-shot scan gains
    /// nothing and would hold the copy.
    pub fn keeping_constant_maps(mut self) -> LiveNode {
        self.constant_maps = Some(ConstantMaps::default());
        self
    }

    /// The maps kept, when this node keeps them.
    pub fn constant_maps(&self) -> Option<&ConstantMaps> {
        self.constant_maps.as_ref()
    }

    fn proc_path(&self, name: &str) -> Option<PathBuf> {
        let rel = name.strip_prefix("proc/")?;
        Some(self.config.proc_root.join(rel))
    }

    /// One read over netlink, within the tool limits, as a fetch (`present`: whether
    /// it found anything); Err(why) when it failed and the caller falls back.
    fn read_netlink<T>(
        &self,
        read: impl FnOnce(NetlinkLimits) -> Result<(T, u64), crate::sources::netlink::NetlinkError>,
        present: impl FnOnce(&T) -> bool,
    ) -> Result<Fetched<T>, String> {
        let start = Instant::now();
        let limits = NetlinkLimits {
            timeout: self.config.limits.timeout,
            max_bytes: self.config.limits.max_output,
        };
        let (value, bytes) = read(limits).map_err(|e| e.to_string())?;
        Ok(Fetched {
            state: Some(if present(&value) {
                SourceState::Ok
            } else {
                SourceState::Empty
            }),
            value: Some(Ok(value)),
            notes: vec!["read from the kernel over netlink".to_string()],
            bytes: Some(bytes),
            elapsed: Some(start.elapsed()),
        })
    }

    fn run<T, F>(&self, program: &str, args: &[&str], consume: F) -> Fetched<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
    {
        let run = run_tool(program, args, self.config.limits, consume);
        let mut notes = Vec::new();
        match &run.outcome {
            ToolOutcome::Absent => notes.push(format!("{program} is not on PATH")),
            ToolOutcome::Failed(why) => notes.push(format!("{} failed: {why}", run.command)),
            ToolOutcome::TimedOut => notes.push(format!(
                "{} did not finish within {} and was killed",
                run.command,
                crate::heart::observed::friendly(self.config.limits.timeout)
            )),
            ToolOutcome::TooLarge => notes.push(format!(
                "{} printed more than {} bytes; reading stopped there",
                run.command, self.config.limits.max_output
            )),
            ToolOutcome::Empty | ToolOutcome::Ok => {}
        }
        notes.extend(stderr_notes(&run.stderr));
        Fetched {
            state: Some(run.outcome.state()),
            value: run.value,
            notes,
            bytes: Some(run.stdout_bytes),
            elapsed: Some(run.elapsed),
        }
    }

    /// kube-proxy's nftables tables, one `nft -j list table` document each, handed to
    /// the consumer one after the other (the JSON parser reads a stream of documents).
    /// Not `nft list ruleset`: that also prints iptables-nft's tables, which on a
    /// 10,000-Service node took 40 s and 1.4 GB in nft; a named table takes 0.2 s.
    fn nft_tables<T, F>(&self, consume: F) -> Fetched<T>
    where
        F: FnOnce(&mut dyn BufRead) -> io::Result<T>,
    {
        let start = Instant::now();
        let mut documents = Vec::new();
        let mut notes = Vec::new();
        let mut worst = SourceState::Empty;
        for family in ["ip", "ip6"] {
            let run = run_tool(
                "nft",
                &["-j", "list", "table", family, "kube-proxy"],
                self.config.limits,
                |r| {
                    let mut bytes = Vec::new();
                    r.read_to_end(&mut bytes)?;
                    Ok(bytes)
                },
            );
            match (&run.outcome, run.value) {
                (ToolOutcome::Absent, _) => {
                    return Fetched::with_state(SourceState::Absent, "nft is not on PATH".to_string());
                }
                // The table does not exist: kube-proxy does not run in nftables mode here.
                (ToolOutcome::Failed(_), _) if run.stderr.contains("No such file or directory") => {}
                (ToolOutcome::Ok, Some(Ok(bytes))) => {
                    documents.extend_from_slice(&bytes);
                    documents.push(b'\n');
                    if worst == SourceState::Empty {
                        worst = SourceState::Ok;
                    }
                }
                (ToolOutcome::Empty, _) => {}
                (outcome, _) => {
                    worst = outcome.state();
                    notes.push(format!("{} did not complete: {}", run.command, run.stderr.trim()));
                }
            }
        }
        let mut fetched = Fetched {
            state: Some(worst),
            value: None,
            notes,
            bytes: Some(documents.len() as u64),
            elapsed: Some(start.elapsed()),
        };
        if !documents.is_empty() {
            fetched.value = Some(consume(&mut &documents[..]));
        }
        fetched
    }

    /// One of kube-proxy's own HTTP endpoints: what it answered, as a fetch (an answer
    /// other than 200 is `failed`, with its body still handed over).
    fn kube_proxy_get<T, F>(&self, addr: Option<SocketAddr>, path: &str, consume: F) -> Fetched<T>
    where
        F: FnOnce(&mut dyn BufRead) -> io::Result<T>,
    {
        let Some(addr) = addr else {
            return Fetched::not_present();
        };
        let start = Instant::now();
        let mut fetched = Fetched {
            state: Some(SourceState::Ok),
            value: None,
            notes: Vec::new(),
            bytes: None,
            elapsed: None,
        };
        match http_get(addr, path, self.config.healthz_timeout) {
            Ok(resp) => {
                if resp.status != 200 {
                    fetched.state = Some(SourceState::Failed);
                    fetched.notes.push(format!(
                        "kube-proxy answered HTTP {} {}",
                        resp.status, resp.reason
                    ));
                }
                fetched.bytes = Some(resp.body.len() as u64);
                fetched.value = Some(consume(&mut Cursor::new(resp.body)));
            }
            Err(e) => {
                fetched.state = Some(match e {
                    HttpError::TimedOut { .. } => SourceState::TimedOut,
                    _ => SourceState::Error,
                });
                fetched.notes.push(e.to_string());
            }
        }
        fetched.elapsed = Some(start.elapsed());
        fetched
    }
}

impl Source for LiveNode {
    fn fetch<T, F>(&mut self, name: &str, consume: F) -> Fetched<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
    {
        if let Some((program, args)) = tool_for(name) {
            return self.run(program, args, consume);
        }
        match name {
            "nft.json" => self.nft_tables(consume),
            HEALTHZ_FILE => self.kube_proxy_get(self.config.kube_proxy_healthz, "/healthz", consume),
            PROXY_MODE_FILE => self.kube_proxy_get(self.config.kube_proxy_metrics, "/proxyMode", consume),
            "cluster.json" => match &self.config.cluster_state {
                Some(path) => fetch_required(path, consume),
                None => Fetched::not_present(),
            },
            "node" => fetch_file(&self.config.proc_root.join("sys/kernel/hostname"), consume),
            _ => match self.proc_path(name) {
                Some(path) => {
                    let fetched = fetch_file(&path, consume);
                    if fetched.state.is_none() {
                        // /proc/net/tcp6 on a kernel without IPv6, say.
                        return Fetched::with_state(
                            SourceState::Absent,
                            format!("{} does not exist", path.display()),
                        );
                    }
                    fetched
                }
                // iptables-save.txt, nft.txt: forms only a bundle has.
                None => Fetched::not_present(),
            },
        }
    }

    fn label(&self, name: &str) -> String {
        if let Some((program, args)) = tool_for(name) {
            return std::iter::once(program)
                .chain(args.iter().copied())
                .collect::<Vec<_>>()
                .join(" ");
        }
        match name {
            "nft.json" => "nft -j list table ip|ip6 kube-proxy".to_string(),
            HEALTHZ_FILE => match self.config.kube_proxy_healthz {
                Some(addr) => format!("GET http://{addr}/healthz"),
                None => name.to_string(),
            },
            PROXY_MODE_FILE => match self.config.kube_proxy_metrics {
                Some(addr) => format!("GET http://{addr}/proxyMode"),
                None => name.to_string(),
            },
            "cluster.json" => match &self.config.cluster_state {
                Some(path) => path.display().to_string(),
                None => name.to_string(),
            },
            _ => match self.proc_path(name) {
                Some(path) => path.display().to_string(),
                None => name.to_string(),
            },
        }
    }

    fn nftables_direct(&mut self) -> Option<Result<Fetched<Vec<RuleSource>>, String>> {
        if self.config.nftables_via != NftablesVia::Netlink {
            return None;
        }
        let mut maps = self.constant_maps.take();
        let read = self.read_netlink(
            |limits| match maps.as_mut() {
                Some(maps) => read_tables_netlink_keeping(NFT_NETLINK_LABEL, limits, maps),
                None => read_tables_netlink(NFT_NETLINK_LABEL, limits),
            },
            |sources| !sources.is_empty(),
        );
        self.constant_maps = maps;
        Some(read)
    }

    fn iptables_direct(&mut self, name: &str) -> Option<Result<Fetched<Option<RuleSource>>, String>> {
        let family = match name {
            "iptables-nft-save.txt" => Family::Ipv4,
            "ip6tables-nft-save.txt" => Family::Ipv6,
            _ => return None,
        };
        if self.config.iptables_via != IptablesVia::Netlink {
            return None;
        }
        let label = iptables_netlink_label(family);
        Some(self.read_netlink(
            |limits| crate::sources::netlink::iptables::read_rules_netlink(family, label, limits),
            Option::is_some,
        ))
    }

    fn owners(&self, inodes: &std::collections::HashSet<u64>) -> Option<crate::sources::owners::Owners> {
        Some(crate::sources::owners::find_owners(
            &self.config.proc_root,
            inodes,
        ))
    }
}

#[cfg(test)]
mod tests;
