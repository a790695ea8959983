//! What the text output goes to: the terminal's width, whether to colour, whether the
//! locale is UTF-8. Read from the environment here, so the renderer stays pure.

use std::io::IsTerminal;

use super::args::ColorWhen;
use crate::heart::render::Terminal;

/// The terminal standard output is, as `--color` and the environment say.
pub fn stdout_terminal(color: ColorWhen) -> Terminal {
    let is_terminal = std::io::stdout().is_terminal();
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    Terminal {
        width: width(env("COLUMNS").as_deref(), is_terminal),
        color: colour(
            color,
            is_terminal,
            env("NO_COLOR").is_some(),
            env("TERM").as_deref(),
        ),
        unicode: utf8_locale(env("LC_ALL"), env("LC_CTYPE"), env("LANG")),
    }
}

/// `COLUMNS` when set (as `ls` and `man` honour it), else the terminal's own width;
/// a pipe is not wrapped.
fn width(columns: Option<&str>, is_terminal: bool) -> Option<usize> {
    if let Some(n) = columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
    {
        return Some(n);
    }
    if !is_terminal {
        return None;
    }
    rustix::termios::tcgetwinsize(std::io::stdout())
        .ok()
        .map(|size| usize::from(size.ws_col))
        .filter(|n| *n > 0)
}

/// `auto` colours a terminal, unless NO_COLOR is set (no-color.org) or TERM is dumb.
fn colour(when: ColorWhen, is_terminal: bool, no_color: bool, term: Option<&str>) -> bool {
    match when {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => is_terminal && !no_color && term != Some("dumb"),
    }
}

/// The character set's locale is UTF-8: the first of LC_ALL, LC_CTYPE and LANG that is
/// set says so (none set is the C locale: ASCII).
pub(super) fn utf8_locale(lc_all: Option<String>, lc_ctype: Option<String>, lang: Option<String>) -> bool {
    lc_all.or(lc_ctype).or(lang).is_some_and(|locale| {
        let codeset = locale.split_once('.').map_or("", |(_, rest)| rest);
        let codeset = codeset.split('@').next().unwrap_or("").to_ascii_lowercase();
        codeset == "utf-8" || codeset == "utf8"
    })
}

#[cfg(test)]
mod tests;
