//! A fuzzing driver that runs on the stable toolchain, for where `cargo fuzz` (which
//! wants a nightly compiler for its sanitizers) is not available. It runs the same
//! targets (`portdrift_test_support::fuzzing`) on mutations of the seeds from `testdata/`.
//!
//! It has no coverage feedback: it is a mutation fuzzer (bit flips, byte and token
//! insertions, splices of seeds, line shuffles and cuts) with a pool of recent mutants
//! to mutate further. What it finds, it finds by volume.
//!
//! The fuzzing runs in a child process, so that what cannot be caught (a stack
//! overflow, an abort, a hang) ends only the child: the parent saves the input the
//! child was running as an artifact and starts another. A panic is caught in the child
//! and saved there.
//!
//! `cargo run --release --example fuzz -- --target iptables_save --seconds 60`

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;

#[derive(Parser, Debug)]
struct Args {
    /// The target (see portdrift_test_support::fuzzing::TARGETS).
    #[arg(long)]
    target: String,
    /// How long to fuzz.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Where crashing inputs go (`<dir>/<target>/`).
    #[arg(long, default_value = "fuzz/artifacts")]
    artifacts: PathBuf,
    /// Extra inputs: `<dir>/<target>/*` (cargo-fuzz's corpus and the regressions).
    #[arg(long)]
    corpus: Vec<PathBuf>,
    /// The checkout's testdata, for seeds.
    #[arg(long, default_value = "testdata")]
    testdata: PathBuf,
    /// Random seed (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// One execution longer than this is reported as slow.
    #[arg(long, default_value_t = 2000)]
    slow_ms: u64,
    /// Write the seeds from testdata to `<dir>/<target>/` (a corpus for `cargo fuzz`)
    /// and stop.
    #[arg(long, value_name = "DIR")]
    export_seeds: Option<PathBuf>,
    /// Internal: this process is the worker.
    #[arg(long, hide = true)]
    worker: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if portdrift_test_support::fuzzing::target(&args.target).is_none() {
        let names: Vec<_> = portdrift_test_support::fuzzing::TARGETS
            .iter()
            .map(|(n, _)| *n)
            .collect();
        bail!("no target {:?}; targets: {}", args.target, names.join(", "));
    }
    if let Some(out) = &args.export_seeds {
        let dir = out.join(&args.target);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for input in load_inputs(&Args {
            corpus: Vec::new(),
            ..args
        })? {
            std::fs::write(dir.join(format!("seed-{:016x}", fnv(&input))), input)?;
        }
        return Ok(());
    }
    let dir = args.artifacts.join(&args.target);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    if args.worker {
        worker(&args, &dir)
    } else {
        supervise(&args, &dir)
    }
}

/// Runs workers until the time is up; saves what killed one.
fn supervise(args: &Args, dir: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let mut seed = args.seed.unwrap_or_else(clock_seed);
    let (mut execs, mut crashes, mut slow, mut deaths) = (0u64, 0u64, 0u64, 0u64);
    let started = Instant::now();
    while Instant::now() < deadline {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .as_secs()
            .max(1);
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args([
            "--worker",
            "--target",
            &args.target,
            "--seconds",
            &left.to_string(),
        ])
        .arg("--artifacts")
        .arg(&args.artifacts)
        .arg("--testdata")
        .arg(&args.testdata)
        .args([
            "--seed",
            &seed.to_string(),
            "--slow-ms",
            &args.slow_ms.to_string(),
        ]);
        for c in &args.corpus {
            cmd.arg("--corpus").arg(c);
        }
        let mut child = cmd.stdout(Stdio::piped()).spawn()?;
        let out = child.stdout.take().context("the worker's stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut last = (0u64, 0u64, 0u64);
        let mut hung = false;
        // A worker reports at least every second; silence for longer than the slow
        // limit plus a margin is a hang.
        let silence = Duration::from_millis(args.slow_ms) * 5 + Duration::from_secs(5);
        loop {
            match rx.recv_timeout(silence) {
                Ok(line) => {
                    let n: Vec<u64> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
                    if let [e, c, s] = n[..] {
                        last = (e, c, s);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    hung = true;
                    let _ = child.kill();
                    break;
                }
            }
        }
        let status = child.wait()?;
        execs += last.0;
        crashes += last.1;
        slow += last.2;
        if hung || !status.success() {
            deaths += 1;
            let current = current_path(dir);
            let kind = if hung { "timeout" } else { "death" };
            if let Ok(input) = std::fs::read(&current) {
                let name = dir.join(format!("{kind}-{:016x}", fnv(&input)));
                std::fs::write(&name, &input)?;
                eprintln!("worker {kind} ({status}): input saved as {}", name.display());
            }
        }
        seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "target {}: {execs} executions in {secs:.0} s ({:.0}/s), {crashes} panics, {deaths} worker deaths or hangs, {slow} slow inputs; artifacts in {}",
        args.target,
        execs as f64 / secs.max(1e-9),
        dir.display()
    );
    if crashes + deaths > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// The last panic's message and place, kept by the hook instead of printed.
static PANIC: Mutex<Option<String>> = Mutex::new(None);

fn worker(args: &Args, dir: &Path) -> anyhow::Result<()> {
    let target = portdrift_test_support::fuzzing::target(&args.target).context("target")?;
    let mut pool = load_inputs(args)?;
    if pool.is_empty() {
        pool.push(Vec::new());
    }
    let seeds = pool.len();
    let dict = dictionary(&args.target);
    std::panic::set_hook(Box::new(|info| {
        let place = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        if let Ok(mut p) = PANIC.lock() {
            *p = Some(format!("{place}: {message}"));
        }
    }));
    let mut rng = Rng(args.seed.unwrap_or_else(clock_seed) | 1);
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let current = current_path(dir);
    let (mut execs, mut crashes, mut slow) = (0u64, 0u64, 0u64);
    let mut seen: HashSet<String> = HashSet::new();
    let mut reported = Instant::now();
    let stdout = std::io::stdout();
    while Instant::now() < deadline {
        let base = &pool[rng.below(pool.len())];
        let mut input = base.clone();
        let rounds = 1 + rng.below(8);
        for _ in 0..rounds {
            mutate(&mut input, &pool, &dict, &mut rng);
        }
        std::fs::write(&current, &input)?;
        let t = Instant::now();
        let result = std::panic::catch_unwind(|| target(&input));
        let took = t.elapsed();
        execs += 1;
        if result.is_err() {
            let why = PANIC.lock().ok().and_then(|mut p| p.take()).unwrap_or_default();
            // One artifact per distinct panic site.
            let site = why.split(": ").next().unwrap_or("").to_string();
            if seen.insert(site) {
                crashes += 1;
                let name = dir.join(format!("crash-{:016x}", fnv(&input)));
                std::fs::write(&name, &input)?;
                eprintln!("panic: {why}\n  input saved as {}", name.display());
            }
        } else if took > Duration::from_millis(args.slow_ms) {
            slow += 1;
            let name = dir.join(format!("slow-{:016x}", fnv(&input)));
            std::fs::write(&name, &input)?;
            eprintln!("slow: {} ms, input saved as {}", took.as_millis(), name.display());
        } else if pool.len() < seeds + 256 && rng.below(32) == 0 {
            // Keep some mutants to mutate further: deeper changes without coverage.
            pool.push(input);
        } else if pool.len() >= seeds + 256 && rng.below(32) == 0 {
            let at = seeds + rng.below(256);
            pool[at] = input;
        }
        if reported.elapsed() >= Duration::from_secs(1) {
            let mut out = stdout.lock();
            writeln!(out, "{execs} {crashes} {slow}")?;
            out.flush()?;
            reported = Instant::now();
        }
    }
    let _ = std::fs::remove_file(&current);
    let mut out = stdout.lock();
    writeln!(out, "{execs} {crashes} {slow}")?;
    out.flush()?;
    Ok(())
}

/// Where the worker writes each input before running it, for the parent to save if
/// the worker dies or hangs. It is written once per execution: on a tmpfs where there
/// is one, as a disk busy with other writers can stall a write for seconds (and the
/// parent would take the stall for a hang).
fn current_path(dir: &Path) -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        let full = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        shm.join(format!(
            "portdrift-fuzz{}",
            full.to_string_lossy().replace('/', "_")
        ))
    } else {
        dir.join(".current")
    }
}

fn load_inputs(args: &Args) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut seeds = portdrift_test_support::fuzzing::seeds(&args.testdata)
        .with_context(|| format!("reading seeds from {}", args.testdata.display()))?;
    let mut pool = seeds.remove(args.target.as_str()).unwrap_or_default();
    for dir in &args.corpus {
        let dir = dir.join(&args.target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
        files.sort();
        for f in files.into_iter().filter(|f| f.is_file()) {
            pool.push(std::fs::read(&f)?);
        }
    }
    // Large dumps make slow executions; their first few KiB hold the structure.
    for input in &mut pool {
        if input.len() > 64 << 10 {
            let cut = input[..64 << 10]
                .iter()
                .rposition(|&b| b == b'\n')
                .unwrap_or(64 << 10);
            input.truncate(cut + 1);
        }
    }
    Ok(pool)
}

/// Tokens worth inserting, per target: the syntax each reader keys on.
fn dictionary(target: &str) -> Vec<&'static [u8]> {
    let common: [&[u8]; 8] = [b"\n", b" ", b"\"", b"\\", b"\t", b"\r", b"\0", b"\xff"];
    let specific: &[&[u8]] = match target {
        "iptables_save" => &[
            b"*nat\n", b"*filter\n", b"COMMIT\n", b":KUBE-NODEPORTS - [0:0]\n", b"-A ", b"-j ", b"-g ",
            b"--comment ", b"-m comment ", b"--dport ", b"DNAT", b"--to-destination ", b"KUBE-SVC-",
            b"KUBE-EXT-", b"KUBE-SEP-", b"KUBE-NODEPORTS", b"KUBE-SERVICES", b"-p tcp ", b"-d ",
            b"127.0.0.0/8", b"[::1]:80", b"10.0.0.1:80", b"65535", b"99999999999", b"# Generated by iptables-nft-save v1.8.9 (nf_tables)\n",
            b"! ", b"-m addrtype --dst-type LOCAL ", b":PREROUTING ACCEPT [0:0]\n",
        ],
        "nftables_json" => &[
            b"{", b"}", b"[", b"]", b",", b":", b"null", b"true", b"1e999", b"-1", b"18446744073709551616",
            b"\"nftables\"", b"\"table\"", b"\"chain\"", b"\"rule\"", b"\"map\"", b"\"elem\"", b"\"family\"",
            b"\"ip\"", b"\"ip6\"", b"\"kube-proxy\"", b"\"expr\"", b"\"handle\"", b"\"jump\"", b"\"goto\"",
            b"\"dnat\"", b"\"vmap\"", b"\"concat\"", b"\"service-nodeports\"", b"\"target\"",
        ],
        "nftables_text" => &[
            b"table ip kube-proxy {\n", b"table ip6 kube-proxy {\n", b"}\n", b"{", b"}", b"chain ", b"map ",
            b"elements = { ", b" . ", b" : ", b"goto ", b"jump ", b"dnat to ", b"# handle 7", b"vmap ",
            b"service-nodeports", b"tcp", b"udp", b"30080", b";", b",",
        ],
        "proc_net" => &[
            b":", b" 0A ", b" 07 ", b"00000000", b"0100007F", b"FFFFFFFF", b"00000000000000000000000000000000",
            b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n",
        ],
        "cilium_maps" => &[
            b"[", b"]", b"{", b"}", b",", b"\"key\":", b"\"value\":", b"\"formatted\":{}", b"\"0x00\"",
            b"\"0xff\"", b"\"0x06\"", b"\"0x42\"", b"\"0x\"", b"\"0x100\"",
        ],
        "ipvs" => &[
            b"TCP  ", b"UDP  ", b"SCTP ", b"FWM  ", b"  -> ", b"Masq", b"Tunnel", b"Route", b"Local", b" rr ",
            b"persistent 10800 ", b"FFFFFFFF", b"0A000115:7580", b"[fd00::1]:30080", b"10.0.1.21:30080",
            b"[fd00:0000:0000:0000:0000:0000:0a00:0115]:7580", b"4294967296", b"-1",
            b"Prot LocalAddress:Port Scheduler Flags\n", b"IP Virtual Server version 1.2.1 (size=4096)\n",
        ],
        _ => &[
            b"==> iptables-nft-save.txt <==\n", b"==> cluster.json <==\n", b"==> nft.json <==\n",
            b"==> proc/net/tcp <==\n", b"==> node <==\n", b"\"nodePort\": ", b"\"type\": \"NodePort\"",
            b"\"addresses\": [", b"-A KUBE-NODEPORTS ", b"--dport ", b"-j DNAT --to-destination ",
            b"\"kubernetes.io/service-name\"", b"default/kubernetes", b"30080",
        ],
    };
    common.iter().copied().chain(specific.iter().copied()).collect()
}

fn mutate(input: &mut Vec<u8>, pool: &[Vec<u8>], dict: &[&[u8]], rng: &mut Rng) {
    let len = input.len();
    match rng.below(12) {
        0 if len > 0 => {
            let i = rng.below(len);
            input[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            input[i] = rng.next() as u8;
        }
        2 | 3 => {
            let token = dict[rng.below(dict.len())];
            let at = rng.below(len + 1);
            input.splice(at..at, token.iter().copied());
        }
        4 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(64));
            input.drain(at..at + n);
        }
        5 if len > 0 => {
            // Repeat a chunk: long lines, deep nesting, many fields.
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(32));
            let chunk = input[at..at + n].to_vec();
            let most = if rng.below(16) == 0 { 4096 } else { 8 };
            let times = 1 + rng.below(most);
            let mut rep = Vec::with_capacity(n * times);
            for _ in 0..times {
                rep.extend_from_slice(&chunk);
            }
            input.splice(at..at, rep);
        }
        6 if !pool.is_empty() => {
            // Splice: a piece of another input.
            let other = &pool[rng.below(pool.len())];
            if !other.is_empty() {
                let from = rng.below(other.len());
                let n = 1 + rng.below((other.len() - from).min(4096));
                let at = rng.below(len + 1);
                input.splice(at..at, other[from..from + n].iter().copied());
            }
        }
        7 if len > 0 => input.truncate(rng.below(len)),
        8 => {
            // Lines: swap, duplicate or drop one.
            let mut lines: Vec<Vec<u8>> = input.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
            if lines.len() > 1 {
                let (a, b) = (rng.below(lines.len()), rng.below(lines.len()));
                match rng.below(3) {
                    0 => lines.swap(a, b),
                    1 => {
                        let l = lines[a].clone();
                        lines.insert(b, l);
                    }
                    _ => {
                        lines.remove(a);
                    }
                }
                *input = lines.join(&b'\n');
            }
        }
        9 if len > 0 => {
            // A digit run becomes an interesting number.
            let at = rng.below(len);
            if let Some(start) = input[at..].iter().position(u8::is_ascii_digit).map(|p| p + at) {
                let end = input[start..]
                    .iter()
                    .position(|b| !b.is_ascii_digit())
                    .map_or(input.len(), |p| p + start);
                let numbers: [&[u8]; 8] = [
                    b"0",
                    b"1",
                    b"65535",
                    b"65536",
                    b"4294967296",
                    b"-1",
                    b"255",
                    b"99999999999999999999",
                ];
                let n = numbers[rng.below(numbers.len())];
                input.splice(start..end, n.iter().copied());
            }
        }
        _ => {
            let token = dict[rng.below(dict.len())];
            if len > 0 {
                let at = rng.below(len);
                let end = (at + token.len()).min(len);
                input.splice(at..end, token.iter().copied());
            } else {
                input.extend_from_slice(token);
            }
        }
    }
    // Keep executions fast: inputs grow through repetition and splicing.
    if input.len() > 1 << 20 {
        input.truncate(1 << 20);
    }
}

/// xorshift64*: enough randomness for mutation, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x1234_5678)
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}
