//! Reading the command line: clap's parse, then what clap cannot say itself, and the
//! exit statuses every command shares.

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use super::Cli;

/// The exit statuses every command shares (each command's own 0, 1 and 3 are in its
/// `--help`).
pub mod exit {
    /// The command could not run: a scan that could not scan, an input that could not
    /// be read, an API server that could not be reached when one was named.
    pub const COULD_NOT_RUN: u8 = 2;
    /// The command line is wrong (sysexits' EX_USAGE): an unknown flag, a bad value, a
    /// flag without the one it needs. Not 2, which says the scan could not run.
    pub const USAGE: u8 = 64;
    /// What read the output went away (`portdrift lint ... | head`): 128 + SIGPIPE,
    /// the status a shell shows for a coreutils command the closed pipe ended, so a
    /// pipeline under `set -o pipefail` does not read it as success. The signal itself
    /// is not restored: the agent's sockets would then kill it on a closed connection.
    pub const CLOSED_PIPE: u8 = 141;
}

/// Parses the process's arguments.
pub fn parse_command_line() -> Result<Cli, clap::Error> {
    parse_from(std::env::args_os())
}

/// Parses `args` (the first is the program's name).
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut command = Cli::command();
    let matches = command.try_get_matches_from_mut(args)?;
    repair_flags_need_repair(&mut command, &matches)?;
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))
}

/// `--repair-dry-run` and the other repair settings mean nothing without `--repair`.
/// clap's `requires` is not enough: it lets them pass when `--repair` conflicts with a
/// flag given (`scan --from DIR --repair-dry-run` would run a scan that repairs
/// nothing, silently).
fn repair_flags_need_repair(command: &mut clap::Command, matches: &ArgMatches) -> Result<(), clap::Error> {
    let Some((name, sub)) = matches.subcommand() else {
        return Ok(());
    };
    if !matches!(name, "scan" | "run") || sub.get_flag("enabled") {
        return Ok(());
    }
    let given = sub.ids().map(|id| id.as_str()).find(|id| {
        (id.starts_with("repair_") || *id == "trust_cluster_state")
            && sub.value_source(id) == Some(ValueSource::CommandLine)
    });
    let Some(id) = given else { return Ok(()) };
    let message = format!("--{} needs --repair", id.replace('_', "-"));
    Err(match command.find_subcommand_mut(name) {
        Some(sub) => sub.error(ErrorKind::MissingRequiredArgument, message),
        None => command.error(ErrorKind::MissingRequiredArgument, message),
    })
}
