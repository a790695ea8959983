//! Command-line interface: the clap definitions, and the dispatch that turns them into
//! the scan's, repair's and the agent's configs, runs them and prints what they found.

mod args;
mod command_line;
mod configs;
mod dev;
mod dispatch;
mod docs;
mod failure;
mod man;
mod parse;
mod stdin;
mod terminal;

pub use args::*;
pub use command_line::{exit, parse_command_line, parse_from};
pub use dispatch::run;
pub use docs::{cli_reference, metrics_reference};
pub use failure::{OutputClosed, error_chain, is_closed_pipe};
pub use parse::{
    HealthzAddr, parse_duration, parse_healthz_addr, parse_log_level, parse_port_range, parse_size,
    parse_timeout,
};

#[cfg(test)]
mod tests;
