//! Dumps of another kind given where an iptables-save dump belongs: `nft list ruleset`
//! text, JSON, an `iptables -L` listing, or a tool's error message pasted in place of
//! its output. Their first line tells, so the file is refused with one sentence rather
//! than read as thousands of lines not understood. A save with `iptables -L` listings
//! mixed in is told by the parser, which meets the listing's header further down.

use std::fmt;

use crate::heart::visible::visible_bytes;

/// The kind of listing found in place of an iptables-save dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForeignKind {
    /// `nft list ruleset`: `table ip filter {`.
    NftText,
    /// A JSON document, such as `nft -j list ruleset`.
    Json,
    /// `iptables -L`: `Chain KUBE-NODEPORTS (1 references)`.
    IptablesList,
    /// A tool's error message: `iptables-save: Permission denied (you must be root)`.
    ToolError,
    /// iptables-save or `-S` output with an `iptables -L` listing pasted into it.
    MixedListing,
    /// Not text at all: an executable, an archive or an image given by mistake.
    Binary,
}

/// Why a file is not an iptables-save dump: its first line of content, and what it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an iptables-save dump: line {line} ({excerpt}) begins {kind}")]
pub struct ForeignDump {
    pub line: u32,
    pub excerpt: String,
    pub kind: ForeignKind,
}

impl fmt::Display for ForeignKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ForeignKind::NftText => {
                "an `nft list ruleset` listing, which a snapshot takes as nft.txt; this file takes what iptables-save prints for its backend"
            }
            ForeignKind::Json => {
                "a JSON document (`nft -j list ruleset` belongs in nft.json); this file takes what iptables-save prints for its backend"
            }
            ForeignKind::IptablesList => {
                "an `iptables -L` listing, which leaves out the matches and comments portdrift compares: capture the tables with iptables-save (iptables-nft-save or iptables-legacy-save) instead"
            }
            ForeignKind::ToolError => {
                "a tool's error message, and the file holds no rules: the capture failed; run iptables-save again as root (with sudo), and check its output before passing it on"
            }
            ForeignKind::Binary => {
                "binary data, not text: this file takes the text iptables-save prints for its backend (an executable, an archive or an image was given in its place)"
            }
            ForeignKind::MixedListing => {
                "an `iptables -L` listing inside an iptables-save dump: a paste of several commands' output, whose -L part leaves out the matches and comments portdrift compares; capture the tables with iptables-save alone"
            }
        })
    }
}

/// How much of the line the error quotes.
const EXCERPT: usize = 60;

/// Looks at the start of a dump (its first buffer): the first line that is neither
/// blank nor a `#` comment decides. `None` when that line could open an iptables-save
/// or `-S` dump, or when the start holds no such line; anything else is left to the
/// parser, which reports each line it cannot read.
pub fn sniff_foreign(head: &[u8]) -> Option<ForeignDump> {
    if is_binary(head) {
        let start = &head[..head.len().min(BINARY_EXCERPT)];
        let mut excerpt = visible_bytes(start);
        if start.len() < head.len() {
            excerpt.push('…');
        }
        return Some(ForeignDump {
            line: 1,
            excerpt,
            kind: ForeignKind::Binary,
        });
    }
    let lines = || {
        head.split(|&b| b == b'\n')
            .enumerate()
            .map(|(i, l)| (i as u32 + 1, l.trim_ascii()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with(b"#"))
    };
    let (number, line) = lines().next()?;
    let text = String::from_utf8_lossy(line);
    let kind = if text.starts_with("table ") && text.ends_with('{') {
        ForeignKind::NftText
    } else if text.starts_with('{') || (text.starts_with('[') && !text.contains("] -A ")) {
        // `[packets:bytes] -A ...` is iptables-save -c; a bare `[` opens a JSON array.
        ForeignKind::Json
    } else if opens_list(&text) {
        ForeignKind::IptablesList
    } else if is_tool_error(&text) && !lines().any(|(_, l)| is_save_line(l)) {
        // An error with a dump after it (stderr captured with stdout) is left to the
        // parser, which reads the dump and reports the stray line.
        ForeignKind::ToolError
    } else {
        return None;
    };
    Some(ForeignDump::new(number, &text, kind))
}

impl ForeignDump {
    /// The error for `text`, found at `line`, quoting the start of it.
    pub fn new(line: u32, text: &str, kind: ForeignKind) -> ForeignDump {
        let excerpt: String = text.chars().take(EXCERPT).collect();
        ForeignDump {
            line,
            excerpt: if excerpt.len() < text.len() {
                format!("{excerpt}…")
            } else {
                excerpt
            },
            kind,
        }
    }
}

/// How many bytes of a binary file the error quotes, escaped.
const BINARY_EXCERPT: usize = 16;

/// Whether the start of a file is binary data rather than text: a NUL byte, which no
/// text tool prints, or more than one byte in twenty that is neither a character nor
/// whitespace. A dump whose comments hold a few control bytes is still text: it is read,
/// and what it holds is escaped wherever it is shown.
fn is_binary(head: &[u8]) -> bool {
    let sample = &head[..head.len().min(4096)];
    if sample.contains(&0) {
        return true;
    }
    let mut odd = 0;
    for chunk in sample.utf8_chunks() {
        odd += chunk.invalid().len();
        odd += chunk
            .valid()
            .chars()
            .filter(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
            .count();
    }
    odd * 20 > sample.len()
}

/// The header line of a chain in an `iptables -L` listing.
pub(super) fn opens_list(text: &str) -> bool {
    text.starts_with("Chain ") && (text.contains(" (policy ") || text.ends_with(" references)"))
}

/// A line of what iptables-save or `iptables -S` print.
fn is_save_line(line: &[u8]) -> bool {
    matches!(line.first(), Some(b'*' | b':' | b'['))
        || [&b"-A "[..], b"-P ", b"-N "].iter().any(|p| line.starts_with(p))
        || line == b"COMMIT"
}

/// What the iptables tools, sudo and shells print when a capture fails: a tool's name
/// then a colon, with one of their failures (`iptables-save: Permission denied (you must
/// be root)`, `iptables v1.8.7 (nf_tables): Could not fetch rule set generation id: …`,
/// `-bash: iptables-save: command not found`).
fn is_tool_error(text: &str) -> bool {
    const FAILURES: [&str; 9] = [
        "permission denied",
        "you must be root",
        "command not found",
        "can't initialize",
        "could not fetch rule set",
        "no such file or directory",
        "operation not permitted",
        "invalid option",
        "unrecognized option",
    ];
    let lower = text.to_ascii_lowercase();
    text.contains(": ") && FAILURES.iter().any(|f| lower.contains(f))
}

#[cfg(test)]
mod tests;
