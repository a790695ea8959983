//! The `portdrift` binary: parse the command line, run, map the outcome to an exit
//! status (0 clean, 1 findings, 2 could not scan, 3 incomplete check). A panic is never
//! an exit path.

use std::io::IsTerminal;
use std::process::ExitCode;

/// jemalloc: a scan allocates and frees a great many small objects (rule text, API
/// objects); on a large node glibc malloc made parse and diff slower, and mimalloc
/// held more memory (docs/performance.md).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use clap::Parser;
use portdrift::cli::{Cli, Command, LogFormat, error_chain, is_closed_pipe, run};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The agent logs what it does (findings appearing and clearing) at info; the one-shot
    // commands only warn.
    let (default_filter, json) = match &cli.command {
        Command::Run(args) => (args.log_level.as_str(), args.log_format == LogFormat::Json),
        // kube logs every non-2xx answer as an error; an agent the pod proxy cannot
        // reach (503) is already in the fleet view, and the line would only be noise.
        Command::Fleet(_) => ("warn,kube_client::client::builder=off", false),
        _ => ("warn", false),
    };
    // RUST_LOG, when set, wins over --log-level.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    // Colours only for a terminal: `kubectl logs ... | grep 30080` must find plain text,
    // not escape codes around every field name.
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter);
    if json {
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
        Err(e) if is_closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("portdrift: {}", error_chain(&e));
            ExitCode::from(2)
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
