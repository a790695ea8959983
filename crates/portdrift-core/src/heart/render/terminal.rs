//! A rendered text made fit for the terminal it is printed on: wrapped to its width
//! with each line's hanging indent kept, severities coloured, and ASCII where the
//! locale cannot show more. Pure: the caller says what the terminal is.

/// What the output goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Terminal {
    /// Wrap lines longer than this many characters (None: do not wrap, as for a pipe).
    pub width: Option<usize>,
    /// Colour the severities with ANSI escapes.
    pub color: bool,
    /// The locale is UTF-8; otherwise every other character becomes ASCII.
    pub unicode: bool,
}

/// Below this, wrapping would leave a word or two a line: the terminal's own soft wrap
/// does better.
const NARROWEST: usize = 40;

/// The severity labels a line of a report or table may start with, and their colours
/// (bold red, yellow, dim, dim).
const LABELS: [(&str, &str); 4] = [
    ("CRITICAL", "\x1b[1;31m"),
    ("WARNING", "\x1b[33m"),
    ("INFO", "\x1b[2m"),
    ("ACCEPTED", "\x1b[2m"),
];

/// Phrases that carry a verdict (the report's, a lint line's), and their colours.
const VERDICTS: [(&str, &str); 5] = [
    ("INCOMPLETE CHECK, not an all-clear.", "\x1b[1;33m"),
    ("No drift:", "\x1b[32m"),
    ("Nothing was found in what could be checked.", "\x1b[33m"),
    (": error:", "\x1b[1;31m"),
    (": warning:", "\x1b[33m"),
];

const RESET: &str = "\x1b[0m";

/// `text` (rendered, escaped lines) as `terminal` should show it. The identity for a
/// UTF-8 pipe.
pub fn for_terminal(text: &str, terminal: &Terminal) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        let body = if terminal.unicode {
            std::borrow::Cow::Borrowed(body)
        } else {
            std::borrow::Cow::Owned(to_ascii(body))
        };
        let pieces = match terminal.width {
            Some(width) => wrap(&body, width.max(NARROWEST)),
            None => vec![body.to_string()],
        };
        let last = pieces.len() - 1;
        for (i, piece) in pieces.into_iter().enumerate() {
            if terminal.color {
                out.push_str(&colour(&piece));
            } else {
                out.push_str(&piece);
            }
            out.push_str(if i == last { newline } else { "\n" });
        }
    }
    out
}

/// The column a line's continuation starts at: under the text after a severity label
/// (`  CRITICAL kind ...`) or a bullet (`  - ...`), else under the line's own text (two
/// in for a line that starts at the margin).
fn hanging_indent(line: &str) -> usize {
    let lead = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[lead..];
    if LABELS.iter().any(|(label, _)| rest.starts_with(label)) {
        return lead + 9;
    }
    if rest.starts_with("- ") {
        return lead + 2;
    }
    if lead == 0 { 2 } else { lead }
}

/// Splits `line` at spaces into pieces of at most `width` characters where it can; a
/// word longer than the room (a rule, a URL) is kept whole rather than cut.
fn wrap(line: &str, width: usize) -> Vec<String> {
    if line.chars().count() <= width {
        return vec![line.to_string()];
    }
    let hang = hanging_indent(line).min(width / 2);
    let mut pieces = Vec::new();
    let mut rest: &str = line;
    let mut indent = 0;
    loop {
        let room = width - indent;
        if rest.chars().count() <= room {
            pieces.push(format!("{}{rest}", " ".repeat(indent)));
            break;
        }
        // The last space within the room past the line's own leading spaces, else the
        // first one after it.
        let lead = rest.len() - rest.trim_start_matches(' ').len();
        let (mut fits, mut after) = (None, None);
        for (chars_before, (i, c)) in rest.char_indices().enumerate() {
            if c != ' ' || i <= lead {
                continue;
            }
            if chars_before <= room {
                fits = Some(i);
            } else {
                after = Some(i);
                break;
            }
        }
        let cut = fits.or(after);
        let Some(cut) = cut else {
            pieces.push(format!("{}{rest}", " ".repeat(indent)));
            break;
        };
        pieces.push(format!("{}{}", " ".repeat(indent), rest[..cut].trim_end()));
        rest = rest[cut..].trim_start_matches(' ');
        if rest.is_empty() {
            break;
        }
        indent = hang;
    }
    pieces
}

/// Colours the severity label a line starts with, and the verdict's phrases.
fn colour(line: &str) -> String {
    let lead = line.len() - line.trim_start_matches(' ').len();
    let mut out = line.to_string();
    for (label, code) in LABELS {
        let rest = &line[lead..];
        if let Some(after) = rest.strip_prefix(label)
            && (after.is_empty() || after.starts_with(' '))
        {
            out = format!("{}{code}{label}{RESET}{after}", &line[..lead]);
            break;
        }
    }
    for (phrase, code) in VERDICTS {
        if let Some(at) = out.find(phrase) {
            out = format!("{}{code}{phrase}{RESET}{}", &out[..at], &out[at + phrase.len()..]);
        }
    }
    out
}

/// The line in ASCII: the report's own arrows and dashes as their ASCII forms, any
/// other character (from a dump, the API, a process name) escaped as `\u{...}`.
fn to_ascii(line: &str) -> String {
    if line.is_ascii() {
        return line.to_string();
    }
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        match c {
            c if c.is_ascii() => out.push(c),
            '→' => out.push_str("->"),
            '←' => out.push_str("<-"),
            '—' => out.push_str("--"),
            '–' => out.push('-'),
            '…' => out.push_str("..."),
            '≥' => out.push_str(">="),
            '≤' => out.push_str("<="),
            '×' => out.push('x'),
            '·' | '•' => out.push('*'),
            '‘' | '’' => out.push('\''),
            '“' | '”' => out.push('"'),
            other => out.push_str(&format!("\\u{{{:x}}}", u32::from(other))),
        }
    }
    out
}

#[cfg(test)]
mod tests;
