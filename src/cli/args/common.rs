//! The flags every command takes (logging, colour) and the output every view has.

use clap::builder::{PossibleValue, TypedValueParser};
use clap::{Args, ValueEnum};

/// Flags every command takes, before or after its name.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Log level: error, warn, info, debug or trace, or a filter by module as RUST_LOG
    /// takes it (`info,portdrift::sources=debug`); default `info` for `run`, `warn`
    /// otherwise. RUST_LOG, when set, wins.
    #[arg(long, global = true, value_name = "LEVEL", value_parser = LogLevelParser)]
    pub log_level: Option<String>,

    /// Log format (on standard error).
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// Log more: -v info, -vv debug, -vvv trace (--log-level wins).
    #[arg(short = 'v', long = "verbose", global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Colour the terminal report's severities: `auto` on a terminal unless NO_COLOR is
    /// set or TERM is dumb.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value = "auto")]
    pub color: ColorWhen,
}

impl GlobalArgs {
    /// The log filter: --log-level, else -v's level, else the command's default.
    pub fn log_filter<'a>(&'a self, default: &'a str) -> &'a str {
        if let Some(level) = &self.log_level {
            return level;
        }
        match self.verbose {
            0 => default,
            1 => "info",
            2 => "debug",
            _ => "trace",
        }
    }
}

/// How the agent and the commands log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

/// `-o/--output`, the same on every command that prints a view.
#[derive(Debug, Clone, Copy, Args)]
pub struct OutputArgs {
    /// Output: `text`, `wide` (one line per finding) or `json`. (`--format`, its old
    /// name, still works.)
    #[arg(
        short = 'o',
        long = "output",
        alias = "format",
        value_enum,
        value_name = "FORMAT",
        default_value = "text"
    )]
    pub format: Output,
}

/// `-o/--output` (and its older name `--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// The report for a person, grouped by port.
    Text,
    /// One line per finding in aligned columns (`scan`; the other commands' text
    /// already has a line per item, and `wide` prints it).
    Wide,
    /// The JSON document (its schema is in docs/schema/).
    Json,
}

/// `--log-level`: checked by [`parse_log_level`](super::super::parse::parse_log_level),
/// with the level names offered to completion and help (a filter by module is
/// accepted too, so they are hints, not the only values).
#[derive(Debug, Clone, Copy)]
pub struct LogLevelParser;

impl TypedValueParser for LogLevelParser {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let text = value
            .to_str()
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidUtf8).with_cmd(cmd))?;
        super::super::parse::parse_log_level(text).map_err(|why| {
            let name = arg.map_or("--log-level".to_string(), |a| a.to_string());
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("invalid value '{text}' for '{name}': {why}\n"),
            )
            .with_cmd(cmd)
        })
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            ["error", "warn", "info", "debug", "trace", "off"]
                .into_iter()
                .map(PossibleValue::new),
        ))
    }
}
