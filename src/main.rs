//! The `portdrift` binary: parse the command line, run, map the outcome to an exit
//! status (0 clean, 1 findings, 2 could not run, 3 incomplete check, 64 usage error,
//! 141 output closed). A panic is never an exit path.

use std::io::IsTerminal;
use std::process::ExitCode;

/// jemalloc: a scan allocates and frees a great many small objects (rule text, API
/// objects); on a large node glibc malloc made parse and diff about 35% slower, and
/// mimalloc held about 60% more memory (docs/performance.md#the-allocator).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use portdrift::cli::{Command, LogFormat, error_chain, exit, is_closed_pipe, parse_command_line, run};

fn main() -> ExitCode {
    let cli = match parse_command_line() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and succeed; anything else is a
            // usage error.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::USAGE } else { 0 });
        }
    };
    // The agent logs what it does (findings appearing and clearing) at info; the one-shot
    // commands only warn.
    let default_filter = match &cli.command {
        Command::Run(_) => "info",
        // kube logs every non-2xx answer as an error; an agent the pod proxy cannot
        // reach (503) is already in the fleet view, and the line would only be noise.
        Command::Fleet(_) => "warn,kube_client::client::builder=off",
        _ => "warn",
    };
    // RUST_LOG, when set, wins over --log-level and -v.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cli.global.log_filter(default_filter)));
    // Colours only for a terminal: `kubectl logs ... | grep 30080` must find plain text,
    // not escape codes around every field name.
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(
            std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .with_env_filter(filter);
    if cli.global.log_format == LogFormat::Json {
        // Flat: the event's fields beside `timestamp`, `level` and `message`, as log
        // pipelines (Loki, jq) expect of one JSON object a line. Without the module path
        // as `target`: a finding's `target` is its DNAT target, as in `/findings`.
        builder.json().flatten_event(true).with_target(false).init();
    } else {
        builder.init();
    }
    if matches!(cli.command, Command::Run(_)) {
        keep_idle_memory_returned();
    }
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) if is_closed_pipe(&e) => ExitCode::from(exit::CLOSED_PIPE),
        Err(e) => {
            eprintln!("portdrift: {}", error_chain(&e));
            ExitCode::from(exit::COULD_NOT_RUN)
        }
    }
}

/// jemalloc hands freed pages back to the kernel only as it allocates, after a decay
/// delay; an idle agent allocates little, so what a full read of the rules freed stayed
/// resident. One background thread does the returning on time instead. Best effort:
/// the agent works the same without it.
fn keep_idle_memory_returned() {
    let enabled = tikv_jemalloc_ctl::max_background_threads::write(1)
        .and_then(|()| tikv_jemalloc_ctl::background_thread::write(true));
    if let Err(e) = enabled {
        eprintln!("portdrift: jemalloc's background thread is off ({e}); idle memory is returned later");
    }
}
