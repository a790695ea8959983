//! Runs the netfilter dump and restore tools: [`run_tool`] runs one external tool
//! without a shell. The binary is found on `PATH` by its explicit name
//! (`iptables-nft-save`, never the `iptables-save` wrapper, whose iptables-wrappers
//! symlink trick breaks on a read-only root filesystem), its stdout is streamed into a
//! consumer while it prints (the iptables parser parses, the snapshot writer writes a
//! file; no dump is held whole in memory), a watchdog kills its process group at its
//! deadline, and what it said on stderr is kept as a bounded excerpt. Every way a tool
//! can go wrong is a [`ToolOutcome`], never an error of the scan.

use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::heart::outcome::InputState;

/// Limits on one tool run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    /// The tool is killed when it has not finished (and its output has not been
    /// consumed) by then.
    pub timeout: Duration,
    /// Reading stops, and the tool is killed, past this many bytes of stdout.
    pub max_output: u64,
}

/// A tool stuck on a lock or a wedged kernel must not hold the scan forever, but a
/// large node's dump is slow (docs/performance.md#a-live-scan).
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// Well above what a large node's dump prints (docs/performance.md#a-live-scan).
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
    pub fn state(&self) -> InputState {
        match self {
            ToolOutcome::Absent => InputState::Absent,
            ToolOutcome::Empty => InputState::Empty,
            ToolOutcome::Ok => InputState::Ok,
            ToolOutcome::Failed(_) => InputState::Failed,
            ToolOutcome::TimedOut => InputState::TimedOut,
            ToolOutcome::TooLarge => InputState::TooLarge,
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

/// Runs `program args...` (on `PATH`, no shell), streaming its stdout into `consume`
/// while the calling thread watches the deadline. The tool leads its own process group
/// so the kill also reaches its children; `LC_ALL=C` keeps its messages recognisable.
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
    let mut run = ToolRun {
        command: command_line(program, args),
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
    let (mut child, readers) = match start_tool(program, &path, args, input, limits.max_output, consume) {
        Ok(started) => started,
        Err(outcome) => {
            run.outcome = outcome;
            run.elapsed = start.elapsed();
            return run;
        }
    };
    let watched = watch(&mut child, &readers, start + limits.timeout);
    (run.outcome, run.value) = conclude(&mut child, &readers, watched);
    run.stderr = readers.stderr_excerpt();
    run.stdout_bytes = readers.printed();
    run.elapsed = start.elapsed();
    run
}

/// The command as run, for messages.
fn command_line(program: &str, args: &[&str]) -> String {
    std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Starts the tool with its input writer and output readers. A tool whose threads
/// cannot all start is killed: nothing could watch or drain it.
fn start_tool<T, F>(
    program: &str,
    path: &Path,
    args: &[&str],
    input: Option<Vec<u8>>,
    max_output: u64,
    consume: F,
) -> Result<(Child, Readers<T>), ToolOutcome>
where
    T: Send + 'static,
    F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
{
    let mut child = spawn_tool(path, args, input.is_some())?;
    let started = feed_stdin(program, &mut child, input)
        .map_err(|e| format!("could not start a writer thread: {e}"))
        .and_then(|()| {
            Readers::start(program, &mut child, max_output, consume)
                .map_err(|e| format!("could not start a reader thread: {e}"))
        });
    match started {
        Ok(readers) => Ok((child, readers)),
        Err(why) => {
            kill_group(&mut child);
            let _ = child.wait();
            Err(ToolOutcome::Failed(why))
        }
    }
}

/// Spawns the tool as the leader of its own process group. A binary that vanished
/// since it was found on `PATH` is absent.
fn spawn_tool(path: &Path, args: &[&str], with_input: bool) -> Result<Child, ToolOutcome> {
    Command::new(path)
        .args(args)
        .env("LC_ALL", "C")
        .stdin(if with_input { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => ToolOutcome::Absent,
            _ => ToolOutcome::Failed(format!("could not start {}: {e}", path.display())),
        })
}

/// Writes `input` to the tool's stdin on a thread of its own.
fn feed_stdin(program: &str, child: &mut Child, input: Option<Vec<u8>>) -> io::Result<()> {
    let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) else {
        return Ok(());
    };
    // A failed write shows as the tool's own complaint (or exit status).
    thread::Builder::new()
        .name(format!("{program} stdin"))
        .spawn(move || {
            let _ = stdin.write_all(&bytes);
        })
        .map(drop)
}

/// The threads reading a running tool's stdout and stderr, and what the watchdog
/// learns from them.
struct Readers<T> {
    /// What the consumer returned.
    value: mpsc::Receiver<io::Result<T>>,
    /// The start of stderr, sent once the tool closed it.
    stderr: mpsc::Receiver<Vec<u8>>,
    /// Bytes of stdout handed to the consumer.
    count: Arc<AtomicU64>,
    /// Set when stdout went past the output limit.
    over: Arc<AtomicBool>,
}

impl<T: Send + 'static> Readers<T> {
    /// Starts both readers, stdout's cut off past `max_output` bytes.
    fn start<F>(program: &str, child: &mut Child, max_output: u64, consume: F) -> io::Result<Self>
    where
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
    {
        let count = Arc::new(AtomicU64::new(0));
        let over = Arc::new(AtomicBool::new(false));
        let stdout = CappedReader {
            inner: child.stdout.take().expect("stdout is piped"),
            limit: max_output,
            count: Arc::clone(&count),
            over: Arc::clone(&over),
        };
        let value = read_stdout(program, stdout, consume);
        let stderr = read_stderr(program, child.stderr.take().expect("stderr is piped"));
        Ok(Readers {
            value: value?,
            stderr: stderr?,
            count,
            over,
        })
    }
}

impl<T> Readers<T> {
    fn printed(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn over_limit(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }

    /// What the tool said on stderr, as kept; nothing if the reader did not finish in
    /// time.
    fn stderr_excerpt(&self) -> String {
        let stderr = self.stderr.recv_timeout(READER_GRACE).unwrap_or_default();
        String::from_utf8_lossy(&stderr).trim().to_string()
    }
}

/// Streams stdout into `consume` on a thread of its own, which sends what it returned.
fn read_stdout<T, F>(
    program: &str,
    stdout: CappedReader<ChildStdout>,
    consume: F,
) -> io::Result<mpsc::Receiver<io::Result<T>>>
where
    T: Send + 'static,
    F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name(format!("{program} stdout"))
        .spawn(move || {
            let mut r = BufReader::with_capacity(64 << 10, stdout);
            let _ = tx.send(consume(&mut r));
        })?;
    Ok(rx)
}

/// Keeps the start of stderr on a thread of its own, which sends it once stderr closes.
fn read_stderr(program: &str, mut stderr: ChildStderr) -> io::Result<mpsc::Receiver<Vec<u8>>> {
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name(format!("{program} stderr"))
        .spawn(move || {
            let mut kept = Vec::new();
            let _ = (&mut stderr).take(STDERR_EXCERPT as u64).read_to_end(&mut kept);
            // Drain the rest so the tool never blocks on a full stderr pipe.
            let _ = io::copy(&mut stderr, &mut io::sink());
            let _ = tx.send(kept);
        })?;
    Ok(rx)
}

/// How the watchdog stopped watching a tool.
enum Watched<T> {
    /// The consumer returned and the tool exited.
    Finished {
        value: io::Result<T>,
        status: ExitStatus,
    },
    /// The tool must be stopped, for `why`; what was seen of it by then.
    Stopped {
        why: ToolOutcome,
        value: Option<io::Result<T>>,
        status: Option<ExitStatus>,
    },
}

/// Waits for the consumer to return and the tool to exit, until the output limit is
/// passed or the deadline. The polling step grows to 10 ms: a quick tool is seen at
/// once, a slow one costs little.
fn watch<T>(child: &mut Child, readers: &Readers<T>, deadline: Instant) -> Watched<T> {
    let mut value = None;
    let mut status = None;
    let mut step = Duration::from_millis(1);
    loop {
        let wait = step.min(deadline.saturating_duration_since(Instant::now()));
        if value.is_none() {
            value = poll_value(&readers.value, wait);
        } else if status.is_none() {
            thread::sleep(wait);
        }
        if status.is_none() {
            match child.try_wait() {
                Ok(s) => status = s,
                Err(e) => {
                    let why = ToolOutcome::Failed(format!("could not wait for it: {e}"));
                    return Watched::Stopped { why, value, status };
                }
            }
        }
        if let Some(status) = status
            && let Some(value) = value.take()
        {
            return Watched::Finished { value, status };
        }
        if let Some(why) = reason_to_stop(readers, deadline) {
            return Watched::Stopped { why, value, status };
        }
        step = (step * 2).min(Duration::from_millis(10));
    }
}

/// What the consumer returned, if it did within `wait`.
fn poll_value<T>(rx: &mpsc::Receiver<io::Result<T>>, wait: Duration) -> Option<io::Result<T>> {
    match rx.recv_timeout(wait) {
        Ok(v) => Some(v),
        Err(mpsc::RecvTimeoutError::Timeout) => None,
        Err(mpsc::RecvTimeoutError::Disconnected) => Some(Err(io::Error::other("the output reader stopped"))),
    }
}

/// Why a tool still running must be killed now, if it must.
fn reason_to_stop<T>(readers: &Readers<T>, deadline: Instant) -> Option<ToolOutcome> {
    if readers.over_limit() {
        Some(ToolOutcome::TooLarge)
    } else if Instant::now() >= deadline {
        Some(ToolOutcome::TimedOut)
    } else {
        None
    }
}

/// The run's outcome and the consumer's value, killing the tool if it was stopped.
/// Output past the limit makes it too large however it ended.
fn conclude<T>(
    child: &mut Child,
    readers: &Readers<T>,
    watched: Watched<T>,
) -> (ToolOutcome, Option<io::Result<T>>) {
    let (outcome, value) = match watched {
        Watched::Finished { value, status } => (exit_outcome(status, readers.printed()), Some(value)),
        Watched::Stopped { why, value, status } => {
            if status.is_none() {
                kill_group(child);
                let _ = child.wait();
            }
            // The pipe closes with the process group: the consumer sees the end of a
            // truncated dump and returns what it read.
            let value = value.or_else(|| readers.value.recv_timeout(READER_GRACE).ok());
            (why, value)
        }
    };
    if readers.over_limit() {
        return (ToolOutcome::TooLarge, value);
    }
    (outcome, value)
}

/// How a tool that exited on its own ended, from its status and what it printed.
fn exit_outcome(status: ExitStatus, printed: u64) -> ToolOutcome {
    if !status.success() {
        ToolOutcome::Failed(describe_exit(status))
    } else if printed == 0 {
        ToolOutcome::Empty
    } else {
        ToolOutcome::Ok
    }
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

#[cfg(test)]
mod tests;
