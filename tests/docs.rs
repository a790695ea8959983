//! The documentation as a reader meets it: README.md, ARCHITECTURE.md, SECURITY.md,
//! CHANGELOG.md and docs/*.md.
//!
//! - Every relative link leads to a file that exists, and every `#anchor` to a heading
//!   of its file, by GitHub's rules (lowercase; a space becomes `-`; punctuation other
//!   than `-` and `_` goes; a repeated heading gets `-1`, `-2`, ...).
//! - Every repository path a document names in a code span or a link's text exists:
//!   a word that starts with one of the repository's top-level directories (`src/`,
//!   `tests/`, `docs/`, `deploy/`, `scripts/`, `testdata/`, ...), one of its top-level
//!   files, or, in ARCHITECTURE.md, a layer's directory under `src/` (`heart/`,
//!   `decode/`, ...). A node's paths (`/proc/...`, `/sys/fs/bpf`) and a bundle's own
//!   files (`proc/net/tcp`, `bpf/*.json`) start with none of these and are not paths of
//!   the repository. A placeholder (`<name>`, `*`, `{4,6}`, `...`, `NAME`) ends what is
//!   checked of a path: the part before it must exist.
//! - Every JSON log example (a block fenced as ```` ```json agent-log ````) holds lines as
//!   the agent writes them with `--log-format json`: one flat object a line, `timestamp`
//!   (RFC 3339), `level` (`TRACE`, `DEBUG`, `INFO`, `WARN` or `ERROR`), `message`, then
//!   the event's fields, each a scalar and none twice, no `target` and no nested
//!   `fields`; each field named as the agent's code names one, and each message begun as
//!   one of its log calls begins. A `json` block that holds such lines must be marked so.
//! - A code comment that cites a document's section (`docs/performance.md#a-live-scan`)
//!   cites one that exists, and every figure it quotes (a number with its unit: `30 MB`,
//!   `1,013 MiB`, `4.9 s`, `35%`, `0.53x`) stands in one of the sections it cites, so a
//!   figure that moved in the document is found here, not by the next reader.
//! - Every reason the agent writes an Event with (src/agent/kube_report/events.rs) is in
//!   docs/operate.md's Event table, each finding kind on the row of its own reason.
//! - Every alert of deploy/prometheus/portdrift-alerts.yaml has a section in
//!   docs/troubleshooting.md whose heading is exactly its name, and a `runbook_url`, where
//!   one is set, points there.
//! - Every command block (a fenced block whose info string is `sh`, `bash`, `shell` or
//!   `console`) is run, unless an HTML comment right above it says why not:
//!   `<!-- not run: REASON -->`. With `<!-- run: 1,3 -->` beside it, only those commands
//!   (counted from 1) run and the reason covers the rest. A run command may use only
//!   `portdrift` (or `cargo run --release --` or `./target/release/portdrift`, run as
//!   `portdrift`) and a few file tools (RUNNABLE), so a block that needs a cluster, root,
//!   a container engine or the network fails here until it is marked. Each `portdrift`
//!   command must exit with the status of `<!-- exit: N -->` (0 without one); every other
//!   command with 0.
//! - Commands run one by one with bash, the built binary's directory first on PATH, in a
//!   scratch directory that stands for the repository root (its top-level entries are
//!   symlinked there), so `testdata/...` reads the repository's files and what a command
//!   writes stays in the scratch directory. HOME is the scratch directory and KUBECONFIG
//!   is unset, so no command can reach a real cluster.
//! - In a `console` block, lines starting with `$ ` are commands and the lines after one
//!   are its standard output, exactly, except that a line `...` stands for lines left out.
//! - The walk of docs/try.md, its blocks fenced as ```` ```sh try-walk ```` and
//!   ```` ```console try-walk ```` (in that document only), runs as the reader runs it:
//!   every command in order, in one bash, as root, with `./target/release/portdrift` the
//!   built binary. It starts the agent in a network namespace of its own (the walk's
//!   `portdrift-try` renamed to a name of this run), so it never touches the host's
//!   rules, and whatever it leaves running there is killed and the namespace deleted,
//!   also when it fails. Each command must exit 0 and a console block's output is checked
//!   as above. Without root it is skipped, unless `CI` is set: then it fails.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Commands a run block may use (each command of a pipeline or list is checked).
const RUNNABLE: &[&str] = &[
    "portdrift",
    "cp",
    "mkdir",
    "sed",
    "printf",
    "echo",
    "head",
    "grep",
];

/// Longest a documented command may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Where the runbook URLs of the alerts point.
const RUNBOOK_BASE: &str = "https://github.com/portdrift/portdrift/blob/main/docs/troubleshooting.md";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn doc_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "SECURITY.md", "CHANGELOG.md"]
        .iter()
        .map(|f| root().join(f))
        .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn rel(path: &Path) -> String {
    path.strip_prefix(root()).unwrap_or(path).display().to_string()
}

/// A fenced block: where it starts, its info string, its lines (without the fence's
/// indentation) and the HTML comments right above it.
struct Block {
    line: usize,
    info: String,
    body: Vec<String>,
    directives: Vec<String>,
}

/// A document split into its text lines (code blocks blanked out) and its blocks.
struct Doc {
    text: Vec<String>,
    blocks: Vec<Block>,
}

fn parse(source: &str) -> Doc {
    let lines: Vec<&str> = source.lines().collect();
    let mut text = Vec::with_capacity(lines.len());
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        let fence = ["```", "~~~"].into_iter().find(|f| trimmed.starts_with(f));
        let Some(fence) = fence else {
            text.push(lines[i].to_string());
            i += 1;
            continue;
        };
        let indent = lines[i].len() - trimmed.len();
        let info = trimmed
            .trim_start_matches(fence.as_bytes()[0] as char)
            .trim()
            .to_string();
        let mut directives = Vec::new();
        let mut j = i;
        while j > 0 {
            j -= 1;
            let above = lines[j].trim();
            if above.is_empty() {
                continue;
            }
            match above.strip_prefix("<!--").and_then(|c| c.strip_suffix("-->")) {
                Some(comment) => directives.push(comment.trim().to_string()),
                None => break,
            }
        }
        directives.reverse();
        let start = i;
        text.push(String::new());
        i += 1;
        let mut body = Vec::new();
        let mark = fence.as_bytes()[0] as char;
        let closes = |l: &str| {
            let t = l.trim();
            t.starts_with(fence) && t.trim_start_matches(mark).is_empty()
        };
        while i < lines.len() && !closes(lines[i]) {
            let l = lines[i];
            let cut = l.len() - l.trim_start().len();
            body.push(l[cut.min(indent)..].to_string());
            text.push(String::new());
            i += 1;
        }
        text.push(String::new());
        i += 1;
        blocks.push(Block {
            line: start + 1,
            info,
            body,
            directives,
        });
    }
    Doc { text, blocks }
}

/// GitHub's anchor for a heading's text.
fn anchor(heading: &str) -> String {
    let mut plain = String::new();
    let mut rest = heading;
    // A link in a heading shows its text.
    while let Some(open) = rest.find('[') {
        match rest[open..]
            .find("](")
            .and_then(|m| rest[open + m..].find(')').map(|c| (m, open + m + c)))
        {
            Some((mid, close)) => {
                plain.push_str(&rest[..open]);
                plain.push_str(&rest[open + 1..open + mid]);
                rest = &rest[close + 1..];
            }
            None => break,
        }
    }
    plain.push_str(rest);
    plain
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// A heading's level and text, if the line is one.
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|&c| c == '#').count();
    if !(1..=6).contains(&level) || !line[level..].starts_with(' ') {
        return None;
    }
    Some((level, line[level..].trim().trim_end_matches('#').trim()))
}

fn anchors(doc: &Doc) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in &doc.text {
        let Some((_, text)) = heading(line) else { continue };
        let base = anchor(text);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// Drops inline code spans, whose brackets are not links.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of a line's inline links and of a reference definition.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut out = Vec::new();
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some(end) = trimmed.find("]:")
    {
        if let Some(target) = trimmed[end + 2..].split_whitespace().next() {
            out.push(target.to_string());
        }
        return out;
    }
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
        rest = &after[end..];
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut docs: BTreeMap<PathBuf, Doc> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        let source = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", rel(&file)));
        docs.insert(file, parse(&source));
    }
    let anchors_of = |path: &Path, docs: &BTreeMap<PathBuf, Doc>| -> Option<BTreeSet<String>> {
        let path = path.canonicalize().ok()?;
        if let Some(doc) = docs
            .iter()
            .find(|(p, _)| p.canonicalize().ok().as_ref() == Some(&path))
        {
            return Some(anchors(doc.1));
        }
        Some(anchors(&parse(&std::fs::read_to_string(&path).ok()?)))
    };
    for (file, doc) in &docs {
        for (n, line) in doc.text.iter().enumerate() {
            for target in link_targets(line) {
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let at = format!("{}:{}: {target}", rel(file), n + 1);
                let (path, fragment) = match target.split_once('#') {
                    Some((p, f)) => (p, Some(f)),
                    None => (target.as_str(), None),
                };
                let dest = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path)
                };
                if !dest.exists() {
                    problems.push(format!("{at}: no such file"));
                    continue;
                }
                if !dest.canonicalize().unwrap().starts_with(root()) {
                    problems.push(format!("{at}: outside the repository"));
                    continue;
                }
                let Some(fragment) = fragment else { continue };
                if dest.extension().is_none_or(|e| e != "md") {
                    problems.push(format!("{at}: an anchor into a file that is not Markdown"));
                    continue;
                }
                match anchors_of(&dest, &docs) {
                    Some(found) if found.contains(fragment) => {}
                    _ => problems.push(format!("{at}: no heading with that anchor in {}", rel(&dest))),
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the link reader broken?"
    );
    assert!(problems.is_empty(), "broken links:\n{}", problems.join("\n"));
}

/// The Rust files whose comments may cite the documents: both crates, the tests, the
/// benchmarks and the examples; not this file, whose comments show citations as examples.
fn rust_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            if path.is_dir() && !path.ends_with("target") {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests/docs.rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    for dir in ["src", "crates", "tests", "benches", "examples"] {
        walk(&root().join(dir), &mut out);
    }
    out.sort();
    out
}

/// Each run of comment lines of a Rust file (`//`, `///`, `//!`): its first line and
/// its text, the lines joined by spaces.
fn comment_blocks(source: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut open = false;
    for (n, line) in source.lines().enumerate() {
        let Some(text) = line.trim_start().strip_prefix("//") else {
            open = false;
            continue;
        };
        let text = text.trim_start_matches(['/', '!']).trim();
        match out.last_mut() {
            Some((_, block)) if open => {
                block.push(' ');
                block.push_str(text);
            }
            _ => out.push((n + 1, text.to_string())),
        }
        open = true;
    }
    out
}

/// The sections a comment cites as `docs/NAME.md#anchor`.
fn cited_sections(comment: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = comment;
    while let Some(at) = rest.find("docs/") {
        let cite: String = rest[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || "/._-#".contains(*c))
            .collect();
        rest = &rest[at + "docs/".len()..];
        if let Some((file, fragment)) = cite.split_once('#')
            && file.ends_with(".md")
        {
            out.push((
                file.to_string(),
                fragment.trim_end_matches(['.', '-']).to_string(),
            ));
        }
    }
    out
}

/// The units of a measured figure: sizes, times, ratios and shares.
const FIGURE_UNITS: &[&str] = &["GiB", "MiB", "KiB", "GB", "MB", "KB", "kB", "ms", "s", "x", "%"];

/// The figures of a text: a number (`1,013`, `4.9`) and its unit, with the one space
/// between them if there is one (`1,013 MiB`, `35%`, `0.53x`).
fn figures(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i].is_ascii_digit()
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || ".,_".contains(chars[i - 1])));
        if !starts {
            i += 1;
            continue;
        }
        let mut end = i;
        while end < chars.len()
            && (chars[end].is_ascii_digit()
                || (",.".contains(chars[end]) && chars.get(end + 1).is_some_and(char::is_ascii_digit)))
        {
            end += 1;
        }
        let number: String = chars[i..end].iter().collect();
        let space = chars.get(end) == Some(&' ');
        let after: String = chars[end + usize::from(space)..].iter().take(4).collect();
        let unit = FIGURE_UNITS.iter().find(|u| {
            after.starts_with(*u)
                && after[u.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| !c.is_alphanumeric())
        });
        if let Some(unit) = unit {
            out.push(format!("{number}{}{unit}", if space { " " } else { "" }));
        }
        i = end;
    }
    out
}

/// The text of a document's section: from its heading to the next heading of its level
/// or above, its lines joined by spaces; None when no heading has that anchor.
fn section_text(doc: &Doc, fragment: &str) -> Option<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut level_of_section = None;
    let mut out = String::new();
    for line in &doc.text {
        if let Some((level, text)) = heading(line) {
            if level_of_section.is_some_and(|l| level <= l) {
                break;
            }
            let base = anchor(text);
            let n = seen.entry(base.clone()).or_insert(0);
            let id = if *n == 0 { base } else { format!("{base}-{n}") };
            *n += 1;
            if level_of_section.is_none() && id == fragment {
                level_of_section = Some(level);
                continue;
            }
        }
        if level_of_section.is_some() {
            out.push(' ');
            out.push_str(line.trim());
        }
    }
    level_of_section.map(|_| out.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[test]
fn every_figure_a_comment_cites_is_in_its_section() {
    let mut problems = Vec::new();
    let mut cited = 0;
    for file in rust_files() {
        let source = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", rel(&file)));
        for (line, comment) in comment_blocks(&source) {
            // Code spans hold syntax (`30s`, `docs/NAME.md#anchor`), not figures or
            // citations.
            let comment = without_code(&comment);
            let sections = cited_sections(&comment);
            if sections.is_empty() {
                continue;
            }
            let at = format!("{}:{line}", rel(&file));
            let mut texts = Vec::new();
            for (doc, fragment) in &sections {
                cited += 1;
                let Ok(text) = std::fs::read_to_string(root().join(doc)) else {
                    problems.push(format!("{at}: {doc}: no such document"));
                    continue;
                };
                match section_text(&parse(&text), fragment) {
                    Some(section) => texts.push(section),
                    None => problems.push(format!("{at}: no heading #{fragment} in {doc}")),
                }
            }
            // A figure is in a cited section when it stands there whole, not inside a
            // longer number (`4.9 s` is not in `14.9 s`).
            let holds = |text: &str, figure: &str| {
                text.match_indices(figure).any(|(i, _)| {
                    text[..i]
                        .chars()
                        .next_back()
                        .is_none_or(|c| !(c.is_ascii_digit() || ".,".contains(c)))
                })
            };
            for figure in figures(&comment) {
                if !texts.iter().any(|t| holds(t, &figure)) {
                    problems.push(format!("{at}: {figure} is in none of the sections it cites"));
                }
            }
        }
    }
    assert!(
        cited > 10,
        "only {cited} citations found: is the comment reader broken?"
    );
    assert!(
        problems.is_empty(),
        "comments whose figures their cited section does not hold:\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_figure_is_read_whole_and_with_its_unit() {
    assert_eq!(
        figures("took 1,013 MiB, 4.5–4.9 s, 35% slower, 0.53x; 10,000 Services, 32 KiB, 2 sockets"),
        ["1,013 MiB", "4.9 s", "35%", "0.53x", "32 KiB"]
    );
    assert_eq!(
        cited_sections("(docs/performance.md#a-live-scan). And docs/scan.md alone"),
        [("docs/performance.md".to_string(), "a-live-scan".to_string())]
    );
}

/// The repository's top-level directories: a word of a document that starts with one
/// of them names a path of the repository.
const TOP_DIRS: &[&str] = &[
    "src", "crates", "tests", "docs", "deploy", "scripts", "testdata", "benches", "examples", "fuzz", ".ci",
    ".github", ".cargo",
];

/// The repository's top-level files, when a document names one alone.
const TOP_FILES: &[&str] = &[
    "README.md",
    "ARCHITECTURE.md",
    "SECURITY.md",
    "CHANGELOG.md",
    "LICENSE",
    "Cargo.toml",
    "Cargo.lock",
    "Dockerfile",
    "build.rs",
    "rustfmt.toml",
    "deps-policy.toml",
    ".dockerignore",
    ".gitignore",
];

/// The layers' directories, which the documents (ARCHITECTURE.md above all) name paths
/// from: `agent/http.rs` is `src/agent/http.rs`; the core crate's layers are under its
/// own `src/` (`heart/detect/` is `crates/portdrift-core/src/heart/detect/`).
const LAYERS: &[&str] = &["cli", "agent", "scan", "sources", "testing"];
const CORE_LAYERS: &[&str] = &["decode", "heart"];

/// The contents of a line's code spans (a run of backticks closed by a run as long).
fn code_spans(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(open) = rest.find('`') {
        let ticks = rest[open..].chars().take_while(|&c| c == '`').count();
        let after = &rest[open + ticks..];
        let fence = "`".repeat(ticks);
        let mut at = 0;
        let close = loop {
            match after[at..].find(&fence) {
                None => break None,
                Some(i) => {
                    let start = at + i;
                    let run = after[start..].chars().take_while(|&c| c == '`').count();
                    if run == ticks {
                        break Some(start);
                    }
                    at = start + run;
                }
            }
        };
        match close {
            Some(end) => {
                out.push(after[..end].to_string());
                rest = &after[end + ticks..];
            }
            None => rest = after,
        }
    }
    out
}

/// The texts of a line's inline links, outside code spans.
fn link_texts(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(mid) = rest.find("](") {
        if let Some(open) = rest[..mid].rfind('[') {
            out.push(rest[open + 1..mid].to_string());
        }
        rest = &rest[mid + 2..];
    }
    out
}

/// Whether a path's component stands for something (`<name>`, `*.json`, `{4,6}`,
/// `...`, `NAME`) rather than naming a file.
fn placeholder(component: &str) -> bool {
    component.contains(['<', '>', '*', '{', '}', '$', '…', '[', '?'])
        || component.contains("...")
        || (component.len() > 1
            && component
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_' || c == '-'))
}

/// The repository path a word names (relative to the root, up to its first
/// placeholder), or None when it names none.
fn repo_path(word: &str) -> Option<String> {
    // Sentence punctuation after a path is not part of it (a leading dot is: `.ci/run`).
    let mut word = word.trim_end_matches(['.', ',', ':', ';', '!']);
    while let Some(rest) = word.strip_prefix("../").or_else(|| word.strip_prefix("./")) {
        word = rest;
    }
    // A fragment, a line number (`file.rs:12`) or a query is not part of the path.
    let word = word.split(['#', ':', '?']).next().unwrap_or("");
    let first = word.split('/').next().unwrap_or("");
    let path = if word.contains('/') && TOP_DIRS.contains(&first) || TOP_FILES.contains(&word) {
        word.to_string()
    } else if word.contains('/') && LAYERS.contains(&first) {
        format!("src/{word}")
    } else if word.contains('/') && CORE_LAYERS.contains(&first) {
        format!("crates/portdrift-core/src/{word}")
    } else {
        return None;
    };
    // The first component is a name this test knows, never a placeholder.
    let kept: Vec<&str> = path
        .split('/')
        .enumerate()
        .take_while(|(i, c)| *i == 0 || !placeholder(c))
        .map(|(_, c)| c)
        .filter(|c| !c.is_empty())
        .collect();
    Some(kept.join("/"))
}

/// Whether git ignores `path` (a `.gitignore` of one of its directories lists the
/// component below it): output the tools write, such as `fuzz/artifacts/`, which a
/// checkout has only after a run.
fn ignored(path: &str) -> bool {
    let components: Vec<&str> = path.split('/').collect();
    (0..components.len()).any(|i| {
        let dir = root().join(components[..i].join("/"));
        let Ok(rules) = std::fs::read_to_string(dir.join(".gitignore")) else {
            return false;
        };
        rules
            .lines()
            .any(|rule| rule.trim().trim_matches('/') == components[i])
    })
}

/// The repository paths a line names in its code spans and its links' texts.
fn named_paths(line: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for text in code_spans(line).into_iter().chain(link_texts(line)) {
        for word in text.split(|c: char| {
            c.is_whitespace() || matches!(c, '=' | '(' | ')' | '\'' | '"' | ',' | ';' | '|' | '`')
        }) {
            if let Some(path) = repo_path(word) {
                out.push((word.to_string(), path));
            }
        }
    }
    out
}

#[test]
fn every_repository_path_the_documents_name_exists() {
    for dir in TOP_DIRS {
        assert!(
            root().join(dir).is_dir(),
            "{dir}/ is not a directory of the repository"
        );
    }
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        let doc = parse(&std::fs::read_to_string(&file).unwrap());
        for (n, line) in doc.text.iter().enumerate() {
            for (word, path) in named_paths(line) {
                checked += 1;
                if std::env::var_os("DOCS_LIST_PATHS").is_some() {
                    eprintln!("{}:{}: {word} -> {path}", rel(&file), n + 1);
                }
                if !root().join(&path).exists() && !ignored(&path) {
                    problems.push(format!(
                        "{}:{}: `{word}`: no {path} in the repository",
                        rel(&file),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} paths found: is the path reader broken?"
    );
    assert!(
        problems.is_empty(),
        "paths that do not exist:\n{}",
        problems.join("\n")
    );
}

/// The levels tracing-subscriber writes in its JSON format.
const LOG_LEVELS: &[&str] = &["TRACE", "DEBUG", "INFO", "WARN", "ERROR"];

/// A JSON object's members in order, a key given twice kept twice.
struct Members(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut out = Vec::new();
                while let Some(member) = map.next_entry()? {
                    out.push(member);
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(Visitor)
    }
}

/// Every Rust source file under `src/`, concatenated.
fn sources() -> String {
    fn walk(dir: &Path, out: &mut String) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&path).unwrap());
                out.push('\n');
            }
        }
    }
    let mut out = String::new();
    walk(&root().join("src"), &mut out);
    out
}

/// What is wrong with one line of a JSON log example, as the agent would write it;
/// `src` is the agent's source, which must name each field and begin each message.
fn log_line_problems(line: &str, src: &str) -> Vec<String> {
    let members = match serde_json::from_str::<Members>(line) {
        Ok(Members(m)) => m,
        Err(e) => return vec![format!("not one JSON object ({e})")],
    };
    let mut problems = Vec::new();
    let keys: Vec<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
    if keys.iter().take(3).copied().collect::<Vec<_>>() != ["timestamp", "level", "message"] {
        problems.push(format!(
            "the agent writes timestamp, level and message first, then the fields; this has {keys:?}"
        ));
    }
    let mut seen = BTreeSet::new();
    for (key, value) in &members {
        if !seen.insert(key.as_str()) {
            problems.push(format!("`{key}` twice"));
        }
        match key.as_str() {
            "timestamp" => match value.as_str().map(str::parse::<jiff::Timestamp>) {
                Some(Ok(_)) => {}
                _ => problems.push(format!("timestamp {value} is not RFC 3339")),
            },
            "level" => {
                if !value.as_str().is_some_and(|l| LOG_LEVELS.contains(&l)) {
                    problems.push(format!("level {value} is none of {LOG_LEVELS:?}"));
                }
            }
            "message" => match value.as_str() {
                Some(m) if !m.is_empty() => {
                    let start = m.split(": ").next().unwrap_or(m);
                    if !src.contains(&format!("\"{start}")) {
                        problems.push(format!("no log call in src/ begins its message with {start:?}"));
                    }
                }
                _ => problems.push(format!("message {value} is not a sentence")),
            },
            "target" | "fields" | "span" | "spans" => problems.push(format!(
                "`{key}`: the agent's JSON is flat and has no {key} (flatten_event, with_target(false), no spans)"
            )),
            _ => {
                if value.is_object() || value.is_array() {
                    problems.push(format!("`{key}` is {value}: tracing's fields are strings, numbers and booleans"));
                }
                let named = [
                    format!("{key} ="),
                    format!("%{key},"),
                    format!("?{key},"),
                    format!("{key},\n"),
                ];
                if !named.iter().any(|n| src.contains(n.as_str())) {
                    problems.push(format!("no log call in src/ has a field `{key}`"));
                }
            }
        }
    }
    problems
}

#[test]
fn every_json_log_example_is_a_line_the_agent_writes() {
    let src = sources();
    let mut problems = Vec::new();
    let mut lines = 0;
    for file in doc_files() {
        let doc = parse(&std::fs::read_to_string(&file).unwrap());
        for block in &doc.blocks {
            let mut info = block.info.split_whitespace();
            if info.next() != Some("json") {
                continue;
            }
            let at = format!("{}:{}", rel(&file), block.line);
            if !info.any(|w| w == "agent-log") {
                if block
                    .body
                    .iter()
                    .any(|l| l.trim_start().starts_with("{\"timestamp\""))
                {
                    problems.push(format!(
                        "{at}: log lines in a `json` block: fence it as ```json agent-log"
                    ));
                }
                continue;
            }
            for (n, line) in block.body.iter().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                lines += 1;
                for p in log_line_problems(line, &src) {
                    problems.push(format!("{at}, line {}: {p}", n + 1));
                }
            }
        }
    }
    assert!(
        lines >= 2,
        "only {lines} JSON log lines found: is the block reader broken?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_event_reason_is_in_operates_table() {
    use portdrift::agent::kube_report::events::reason;
    use portdrift::heart::finding::Kind;
    let operate = std::fs::read_to_string(root().join("docs/operate.md")).unwrap();
    let mut problems = Vec::new();
    for kind in Kind::ALL {
        let row = format!("| `{}` | `{}`", kind.as_str(), reason(kind));
        if !operate.contains(&row) {
            problems.push(format!("no row `{row} |` in docs/operate.md's Event table"));
        }
    }
    // The reasons that are not a finding kind's (a repair's), as the code spells them.
    let events = std::fs::read_to_string(root().join("src/agent/kube_report/events.rs")).unwrap();
    let mut reasons = 0;
    for literal in events.split('"').skip(1).step_by(2) {
        let camel = literal.len() > 1
            && literal.starts_with(|c: char| c.is_ascii_uppercase())
            && literal.chars().all(|c| c.is_ascii_alphanumeric())
            && literal.chars().filter(char::is_ascii_uppercase).count() >= 2;
        if !camel {
            continue;
        }
        reasons += 1;
        if !operate.contains(&format!("`{literal}`")) {
            problems.push(format!("the Event reason {literal} is not in docs/operate.md"));
        }
    }
    assert!(
        reasons > Kind::ALL.len(),
        "only {reasons} reasons read from events.rs"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_alert_has_its_section_in_troubleshooting() {
    let path = root().join("deploy/prometheus/portdrift-alerts.yaml");
    let rules: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).expect("the alert rules parse");
    let doc = parse(&std::fs::read_to_string(root().join("docs/troubleshooting.md")).unwrap());
    let headings: BTreeSet<String> = doc
        .text
        .iter()
        .filter_map(|l| heading(l))
        .filter(|(level, _)| *level == 3)
        .map(|(_, text)| text.to_string())
        .collect();
    let found = anchors(&doc);
    let mut alerts = 0;
    let mut problems = Vec::new();
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let Some(name) = rule["alert"].as_str() else {
                continue;
            };
            alerts += 1;
            if !headings.contains(name) {
                problems.push(format!("{name}: no `### {name}` in docs/troubleshooting.md"));
            }
            let want = name.to_lowercase();
            if !found.contains(&want) {
                problems.push(format!("{name}: no anchor #{want} in docs/troubleshooting.md"));
            }
            if let Some(url) = rule["annotations"]["runbook_url"].as_str()
                && url != format!("{RUNBOOK_BASE}#{want}")
            {
                problems.push(format!("{name}: runbook_url {url} is not {RUNBOOK_BASE}#{want}"));
            }
        }
    }
    assert!(alerts >= 14, "only {alerts} alerts read from {}", rel(&path));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// One command of a block, with what the document expects of it.
struct Cmd {
    line: String,
    output: Vec<String>,
}

/// The block's commands: `\`-continued lines joined, comments and blank lines left out;
/// in a console block, each `$ ` line with the output shown after it.
fn commands(block: &Block, console: bool) -> Result<Vec<Cmd>, String> {
    let mut out: Vec<Cmd> = Vec::new();
    let mut pending: Option<String> = None;
    for line in &block.body {
        if let Some(mut cmd) = pending.take() {
            cmd.push(' ');
            cmd.push_str(line.trim());
            match cmd.strip_suffix('\\') {
                Some(more) => pending = Some(more.trim_end().to_string()),
                None => out.push(Cmd {
                    line: cmd,
                    output: Vec::new(),
                }),
            }
            continue;
        }
        let command = if console {
            match line.strip_prefix("$ ") {
                Some(c) => c,
                None => {
                    let last = out.last_mut().ok_or("output before the first `$ ` command")?;
                    last.output.push(line.trim_end().to_string());
                    continue;
                }
            }
        } else {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            t
        };
        match command.strip_suffix('\\') {
            Some(more) => pending = Some(more.trim_end().to_string()),
            None => out.push(Cmd {
                line: command.to_string(),
                output: Vec::new(),
            }),
        }
    }
    if pending.is_some() {
        return Err("the last command ends with `\\`".into());
    }
    for cmd in &mut out {
        let built = ["cargo run --release -- ", "./target/release/portdrift "];
        if let Some(rest) = built.iter().find_map(|b| cmd.line.strip_prefix(b)) {
            cmd.line = format!("portdrift {rest}");
        }
        while cmd.output.last().is_some_and(String::is_empty) {
            cmd.output.pop();
        }
    }
    Ok(out)
}

/// The commands of a pipeline or list, each as its words (quotes kept, respected);
/// redirections (`>file`, `2>&1`) stay words, a `#` comment ends the line.
fn segments(line: &str) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = vec![Vec::new()];
    let mut quote: Option<char> = None;
    let mut word = String::new();
    let mut chars = line.chars().peekable();
    let mut prev = ' ';
    while let Some(c) = chars.next() {
        let after_redirect = prev == '>' || prev == '<';
        prev = c;
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '#' && word.is_empty() => break,
            None if matches!(c, '|' | ';' | '&') && !after_redirect => {
                if !word.is_empty() {
                    out.last_mut().unwrap().push(std::mem::take(&mut word));
                }
                while chars.peek().is_some_and(|n| matches!(n, '|' | '&')) {
                    chars.next();
                }
                out.push(Vec::new());
                continue;
            }
            None if c.is_whitespace() => {
                if !word.is_empty() {
                    out.last_mut().unwrap().push(std::mem::take(&mut word));
                }
                continue;
            }
            None => {}
        }
        word.push(c);
    }
    if !word.is_empty() {
        out.last_mut().unwrap().push(word);
    }
    out.retain(|s| !s.is_empty());
    out
}

/// The program of every command in a pipeline or list.
fn programs(line: &str) -> Vec<String> {
    segments(line).into_iter().map(|s| s[0].clone()).collect()
}

/// Why a `portdrift` command in `line` is not one that runs offline, if it is not: the
/// commands that read only files and print (`scan --from`, `ports --cluster-state`,
/// `lint` without the API, and the commands about portdrift itself). A live scan, the
/// daemon or repair must never run here, where the tests may run as root on a real node.
fn not_offline(line: &str) -> Option<String> {
    for words in segments(line).iter().filter(|s| s[0] == "portdrift") {
        let args = &words[1..];
        let has = |flag: &str| {
            args.iter()
                .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
        };
        let offline = match args.first().map(String::as_str) {
            Some("scan") => has("--from") && !has("--repair"),
            Some("explain") => has("--from") && !has("--kubeconfig") && !has("--context"),
            Some("ports") => has("--cluster-state"),
            Some("lint") => !has("--kubeconfig") && !has("--context"),
            Some("completions" | "man" | "help" | "dev" | "--version" | "-V" | "--help" | "-h") => true,
            _ => false,
        };
        if !offline {
            return Some(format!("`{}` needs a live node or a cluster", words.join(" ")));
        }
    }
    None
}

/// Whether `shown` is `actual`, lines of `...` standing for any lines left out.
fn shows(shown: &[String], actual: &str) -> bool {
    let mut actual: Vec<&str> = actual.lines().map(str::trim_end).collect();
    while actual.last().is_some_and(|l| l.is_empty()) {
        actual.pop();
    }
    let mut segments: Vec<&[String]> = shown.split(|l| l.trim() == "...").collect();
    let open_start = shown.first().is_some_and(|l| l.trim() == "...");
    let open_end = shown.last().is_some_and(|l| l.trim() == "...");
    segments.retain(|s| !s.is_empty());
    let mut at = 0;
    for (n, segment) in segments.iter().enumerate() {
        let fits = |from: usize| {
            from + segment.len() <= actual.len()
                && segment
                    .iter()
                    .zip(&actual[from..])
                    .all(|(s, a)| s.trim_end() == *a)
        };
        let first = n == 0 && !open_start;
        let found = if first {
            fits(0).then_some(0)
        } else {
            (at..=actual.len()).find(|&from| fits(from))
        };
        let Some(from) = found else { return false };
        at = from + segment.len();
    }
    open_end || at == actual.len() || (segments.is_empty() && actual.is_empty())
}

/// The scratch directory a block runs in: the repository's top-level entries, linked.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::TempDir::new().unwrap();
    for entry in std::fs::read_dir(root()).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        std::os::unix::fs::symlink(entry.path(), dir.path().join(&name)).unwrap();
    }
    dir
}

/// Runs one command line with bash in `dir`; its status, standard output and error.
fn run(line: &str, dir: &Path) -> Result<(i32, String, String), String> {
    let bin = Path::new(env!("CARGO_BIN_EXE_portdrift"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let out = tempfile::NamedTempFile::new().unwrap();
    let err = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new("bash")
        .args(["-c", line])
        .current_dir(dir)
        .env("PATH", path)
        .env("HOME", dir)
        .env_remove("KUBECONFIG")
        .env_remove("NODE_NAME")
        .stdin(Stdio::null())
        .stdout(out.reopen().unwrap())
        .stderr(err.reopen().unwrap())
        .spawn()
        .map_err(|e| format!("bash: {e}"))?;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {TIMEOUT:?}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = std::fs::read_to_string(out.path()).unwrap_or_default();
    let stderr = std::fs::read_to_string(err.path()).unwrap_or_default();
    let code = status
        .code()
        .ok_or_else(|| format!("killed by a signal; stderr: {stderr}"))?;
    Ok((code, stdout, stderr))
}

/// Checks one command block; the problems found.
fn check_block(block: &Block) -> Vec<String> {
    let console = block.info.split_whitespace().next() == Some("console");
    let mut exit = 0;
    let mut only: Option<BTreeSet<usize>> = None;
    let mut reason: Option<&str> = None;
    for d in &block.directives {
        let (key, value) = d
            .split_once(':')
            .map(|(k, v)| (k.trim(), v.trim()))
            .unwrap_or((d, ""));
        match key {
            "exit" => match value.parse() {
                Ok(n) => exit = n,
                Err(_) => return vec![format!("`exit: {value}` is not a status")],
            },
            "not run" if value.is_empty() => return vec!["`not run:` without a reason".into()],
            "not run" => reason = Some(value),
            "run" => match value.split(',').map(|n| n.trim().parse::<usize>()).collect() {
                Ok(set) => only = Some(set),
                Err(_) => return vec![format!("`run: {value}` is not a list of command numbers")],
            },
            _ => {
                return vec![format!(
                    "`<!-- {d} -->` is no directive (exit: N, not run: REASON, run: N,...)"
                )];
            }
        }
    }
    if only.is_some() && reason.is_none() {
        return vec!["`run:` without a `not run:` reason for the other commands".into()];
    }
    if reason.is_some() && only.is_none() {
        return Vec::new();
    }
    let cmds = match commands(block, console) {
        Ok(c) if !c.is_empty() => c,
        Ok(_) => return vec!["a command block without a command".into()],
        Err(e) => return vec![e],
    };
    let dir = scratch();
    let mut problems = Vec::new();
    for (n, cmd) in cmds.iter().enumerate() {
        if only.as_ref().is_some_and(|o| !o.contains(&(n + 1))) {
            continue;
        }
        let progs = programs(&cmd.line);
        if let Some(p) = progs.iter().find(|p| !RUNNABLE.contains(&p.as_str())) {
            problems.push(format!(
                "`{}`: `{p}` cannot run here; mark the block <!-- not run: REASON -->",
                cmd.line
            ));
            continue;
        }
        if let Some(why) = not_offline(&cmd.line) {
            problems.push(format!(
                "`{}`: {why}; mark the block <!-- not run: REASON -->",
                cmd.line
            ));
            continue;
        }
        if cmd.line.contains("$(") || cmd.line.contains('`') {
            problems.push(format!(
                "`{}`: a command substitution is not run; mark the block",
                cmd.line
            ));
            continue;
        }
        if cmd.line.contains("<<") {
            problems.push(format!("`{}`: a heredoc is not run; mark the block", cmd.line));
            continue;
        }
        let want = if progs.first().is_some_and(|p| p == "portdrift") {
            exit
        } else {
            0
        };
        match run(&cmd.line, dir.path()) {
            Err(e) => problems.push(format!("`{}`: {e}", cmd.line)),
            Ok((code, stdout, stderr)) => {
                if code != want {
                    problems.push(format!(
                        "`{}` exited {code}, the document expects {want} (<!-- exit: N -->)\nstderr: {stderr}",
                        cmd.line
                    ));
                } else if console && !cmd.output.is_empty() && !shows(&cmd.output, &stdout) {
                    problems.push(format!(
                        "`{}`: the output shown is not what it prints (`...` stands for lines left out); it prints:\n{stdout}",
                        cmd.line
                    ));
                }
            }
        }
    }
    problems
}

#[test]
fn every_command_block_runs_or_says_why_not() {
    let mut problems = Vec::new();
    let mut ran = 0;
    let mut skipped = 0;
    for file in doc_files() {
        let doc = parse(&std::fs::read_to_string(&file).unwrap());
        for block in &doc.blocks {
            let lang = block.info.split_whitespace().next().unwrap_or("");
            if !matches!(lang, "sh" | "bash" | "shell" | "console") {
                if block.body.iter().any(|l| l.starts_with("$ ")) {
                    problems.push(format!(
                        "{}:{}: a `$ ` command in a `{lang}` block: make it `console`",
                        rel(&file),
                        block.line
                    ));
                }
                continue;
            }
            if is_walk(block) {
                // Run whole, as root, by the_try_walk_runs_as_written_in_a_namespace_of_its_own.
                if rel(&file) != WALK {
                    problems.push(format!(
                        "{}:{}: `{WALK_TAG}` blocks are {WALK}'s walk alone",
                        rel(&file),
                        block.line
                    ));
                } else if !block.directives.is_empty() {
                    problems.push(format!(
                        "{}:{}: a `{WALK_TAG}` block always runs: no <!-- ... --> above it",
                        rel(&file),
                        block.line
                    ));
                }
                continue;
            }
            let not_run = block.directives.iter().any(|d| d.starts_with("not run:"))
                && !block.directives.iter().any(|d| d.starts_with("run:"));
            if not_run {
                skipped += 1;
            } else {
                ran += 1;
            }
            problems.extend(
                check_block(block)
                    .into_iter()
                    .map(|p| format!("{}:{}: {p}", rel(&file), block.line)),
            );
        }
    }
    assert!(
        ran >= 5 && skipped >= 5,
        "{ran} blocks run, {skipped} not: is the block reader broken?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn the_readers_of_the_documents_read_them_right() {
    assert_eq!(
        anchor("What was checked: coverage, proxy modes and exit status 3"),
        "what-was-checked-coverage-proxy-modes-and-exit-status-3"
    );
    assert_eq!(
        anchor("Sizing for large clusters: memory per Service and the API server's load"),
        "sizing-for-large-clusters-memory-per-service-and-the-api-servers-load"
    );
    assert_eq!(
        anchor("`portdrift ports` — the table"),
        "portdrift-ports--the-table"
    );
    assert_eq!(anchor("PortdriftStaleEndpoint"), "portdriftstaleendpoint");
    assert_eq!(
        link_targets("see [a](docs/x.md#y) and `[b](c)` [d](#e \"t\")"),
        ["docs/x.md#y", "#e"]
    );
    assert_eq!(
        programs("portdrift lint x 2>&1 | head -3 && echo 'a|b' ; cp a b # c | d"),
        ["portdrift", "head", "echo", "cp"]
    );
    assert_eq!(not_offline("portdrift scan --from testdata/x | head -3"), None);
    assert_eq!(not_offline("portdrift lint deploy/ --format json"), None);
    assert!(not_offline("portdrift scan").is_some(), "a live scan");
    assert!(not_offline("portdrift scan --from x --repair").is_some());
    assert!(not_offline("portdrift run --node a").is_some());
    assert!(not_offline("portdrift ports").is_some());
    assert!(not_offline("portdrift lint x --kubeconfig k").is_some());
    assert!(not_offline("cp a b && portdrift ports > x").is_some());
    assert_eq!(
        not_offline("grep portdrift x | head"),
        None,
        "portdrift as an argument"
    );
    let built = Block {
        line: 1,
        info: "console".into(),
        body: vec![
            "$ ./target/release/portdrift scan --from x".into(),
            "out".into(),
            "$ cargo run --release -- lint y".into(),
        ],
        directives: Vec::new(),
    };
    let cmds = commands(&built, true).unwrap();
    assert_eq!(
        cmds.iter().map(|c| c.line.as_str()).collect::<Vec<_>>(),
        ["portdrift scan --from x", "portdrift lint y"],
        "the built binary is run as portdrift"
    );
    assert_eq!(cmds[0].output, ["out"]);
    let walk = |info: &str| Block {
        line: 1,
        info: info.into(),
        body: Vec::new(),
        directives: Vec::new(),
    };
    assert!(is_walk(&walk("sh try-walk")) && is_walk(&walk("console try-walk")));
    assert!(!is_walk(&walk("sh")) && !is_walk(&walk("try-walk")));
    assert_eq!(code_spans("a `b` c ``d ` e`` f `g"), ["b", "d ` e"]);
    assert_eq!(
        repo_path("src/agent/http.rs:12,").as_deref(),
        Some("src/agent/http.rs")
    );
    assert_eq!(
        repo_path("heart/detect/").as_deref(),
        Some("crates/portdrift-core/src/heart/detect")
    );
    assert_eq!(repo_path("../deploy/base").as_deref(), Some("deploy/base"));
    assert_eq!(
        repo_path("testdata/<name>/INCIDENT.md").as_deref(),
        Some("testdata")
    );
    assert_eq!(
        repo_path("docs/troubleshooting.md#alerts").as_deref(),
        Some("docs/troubleshooting.md")
    );
    assert_eq!(repo_path("LICENSE").as_deref(), Some("LICENSE"));
    for not_ours in [
        "/proc/net/tcp",
        "proc/net/tcp",
        "bpf/*.json",
        "/sys/fs/bpf",
        "https://x/src/a",
    ] {
        assert_eq!(repo_path(not_ours), None, "{not_ours}");
    }
    assert!(ignored("fuzz/artifacts/iptables_save"));
    assert!(!ignored("fuzz/regressions"));
    let src = sources();
    let good = r#"{"timestamp":"2026-12-06T00:16:39.119347Z","level":"INFO","message":"finding cleared: x","id":"1","port":1}"#;
    assert_eq!(log_line_problems(good, &src), Vec::<String>::new());
    for bad in [
        r#"{"timestamp":"2026-12-06T00:16:39Z","level":"info","message":"finding cleared: x"}"#,
        r#"{"timestamp":"yesterday","level":"INFO","message":"finding cleared: x"}"#,
        r#"{"timestamp":"2026-12-06T00:16:39Z","level":"INFO","message":"finding cleared: x","port":1,"port":2}"#,
        r#"{"timestamp":"2026-12-06T00:16:39Z","level":"INFO","message":"finding cleared: x","target":"portdrift::agent"}"#,
        r#"{"timestamp":"2026-12-06T00:16:39Z","level":"INFO","message":"finding cleared: x","fields":{"port":1}}"#,
        r#"{"timestamp":"2026-12-06T00:16:39Z","level":"INFO","message":"finding cleared: x","no_such_field":1}"#,
        r#"{"timestamp":"2026-12-06T00:16:39Z","level":"INFO","message":"no agent says this"}"#,
        r#"{"level":"INFO","timestamp":"2026-12-06T00:16:39Z","message":"finding cleared: x"}"#,
        r#"2026-12-06T00:16:39Z INFO portdrift::agent: finding cleared: x"#,
    ] {
        assert!(!log_line_problems(bad, &src).is_empty(), "{bad}");
    }
    let lines = |s: &str| s.lines().map(String::from).collect::<Vec<_>>();
    assert!(shows(&lines("a\n...\nd"), "a\nb\nc\nd\n"));
    assert!(shows(&lines("...\nc\n..."), "a\nb\nc\nd\n"));
    assert!(
        !shows(&lines("a\nc"), "a\nb\nc\n"),
        "lines shown together are printed together"
    );
    assert!(
        !shows(&lines("a\nb"), "a\nb\nc\n"),
        "without `...` the output is whole"
    );
    assert!(
        !shows(&lines("b\n..."), "a\nb\n"),
        "without `...` the output starts at once"
    );
}

/// The document whose walk runs whole, and the tag of its blocks.
const WALK: &str = "docs/try.md";
const WALK_TAG: &str = "try-walk";

/// The network namespace the walk names; the test runs it under a name of its own.
const WALK_NETNS: &str = "portdrift-try";

/// Longest the whole walk may take.
const WALK_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether a block belongs to the walk (` ```sh try-walk `, ` ```console try-walk `).
fn is_walk(block: &Block) -> bool {
    block.info.split_whitespace().skip(1).any(|w| w == WALK_TAG)
}

/// The walk's commands in order, each with the line of its block.
fn walk_commands(doc: &Doc) -> Result<Vec<(usize, Cmd)>, String> {
    let mut out = Vec::new();
    for block in doc.blocks.iter().filter(|b| is_walk(b)) {
        let console = match block.info.split_whitespace().next() {
            Some("console") => true,
            Some("sh") => false,
            other => {
                return Err(format!(
                    "line {}: a walk block is sh or console, not {other:?}",
                    block.line
                ));
            }
        };
        for cmd in commands(block, console).map_err(|e| format!("line {}: {e}", block.line))? {
            out.push((block.line, cmd));
        }
    }
    Ok(out)
}

/// The walk's namespace under this run's name: whatever runs in it is killed and it is
/// deleted on drop, also when the walk failed half-way.
struct WalkNetns(String);

impl WalkNetns {
    fn exists(&self) -> bool {
        Command::new("ip")
            .args(["netns", "list"])
            .output()
            .is_ok_and(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(self.0.as_str()))
            })
    }
}

impl Drop for WalkNetns {
    fn drop(&mut self) {
        if !self.exists() {
            return;
        }
        // Only this run's processes are in a namespace of this run's name.
        if let Ok(out) = Command::new("ip").args(["netns", "pids", &self.0]).output() {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
        }
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn the_try_walk_runs_as_written_in_a_namespace_of_its_own() {
    let source = std::fs::read_to_string(root().join(WALK)).unwrap();
    let cmds = walk_commands(&parse(&source)).unwrap_or_else(|e| panic!("{WALK}: {e}"));
    let lines: Vec<&str> = cmds.iter().map(|(_, c)| c.line.as_str()).collect();
    assert_eq!(
        lines.first().copied(),
        Some(format!("ip netns add {WALK_NETNS}").as_str()),
        "{WALK}: the walk starts by making its namespace: is the block reader broken?"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("portdrift run ") && l.ends_with('&'))
            && lines.contains(&format!("ip netns del {WALK_NETNS}").as_str())
            && cmds.iter().filter(|(_, c)| !c.output.is_empty()).count() >= 4,
        "{WALK}: the walk starts the agent, shows what it serves and deletes its namespace; read {lines:#?}"
    );
    let test = "the_try_walk_runs_as_written_in_a_namespace_of_its_own";
    if !support::require_root(test) {
        return;
    }
    for tool in [
        "ip",
        "iptables-nft",
        "iptables-nft-restore",
        "nfacct",
        "curl",
        "jq",
        "timeout",
    ] {
        if !support::require_tool(tool, test) {
            return;
        }
    }

    // The checkout as the reader has it after `cargo build --release`.
    let dir = scratch();
    std::fs::create_dir_all(dir.path().join("target/release")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_portdrift"),
        dir.path().join("target/release/portdrift"),
    )
    .unwrap();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_micros();
    let netns = WalkNetns(format!("pdtry{}x{stamp}", std::process::id()));
    assert!(!netns.exists(), "{} exists already", netns.0);

    // One bash, as the reader's shell: each command's output, error and status to files
    // of its number, stopping at the first that fails.
    let out = tempfile::TempDir::new().unwrap();
    let mut script = String::new();
    for (n, (_, cmd)) in cmds.iter().enumerate() {
        let line = cmd.line.replace(WALK_NETNS, &netns.0);
        script.push_str(&format!(
            "echo {n} >\"$WALK_OUT/at\"\n{{ {line}\n}} >\"$WALK_OUT/{n}.out\" 2>\"$WALK_OUT/{n}.err\"\n\
             walk_status=$?; echo $walk_status >\"$WALK_OUT/{n}.status\"; [ $walk_status = 0 ] || exit 1\n"
        ));
    }
    let started = Instant::now();
    let status = Command::new("timeout")
        .args([
            "--kill-after=5",
            &WALK_TIMEOUT.as_secs().to_string(),
            "bash",
            "-c",
            &script,
        ])
        .current_dir(dir.path())
        .env("WALK_OUT", out.path())
        .env("HOME", dir.path())
        .env_remove("KUBECONFIG")
        .env_remove("NODE_NAME")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(out.path().join("bash.out")).unwrap())
        .stderr(std::fs::File::create(out.path().join("bash.err")).unwrap())
        .status()
        .expect("bash runs");
    let took = started.elapsed();
    let read = |name: &str| std::fs::read_to_string(out.path().join(name)).unwrap_or_default();

    let mut problems = Vec::new();
    let reached: usize = read("at").trim().parse().unwrap_or(0);
    for (n, (block, cmd)) in cmds.iter().enumerate().take(reached + 1) {
        let at = format!("{WALK}:{block}: `{}`", cmd.line);
        let (stdout, stderr) = (read(&format!("{n}.out")), read(&format!("{n}.err")));
        match read(&format!("{n}.status")).trim() {
            "" => problems.push(format!(
                "{at}: did not finish within {WALK_TIMEOUT:?} ({status})\nstdout: {stdout}\nstderr: {stderr}"
            )),
            "0" => {
                if !cmd.output.is_empty() && !shows(&cmd.output, &stdout) {
                    problems.push(format!(
                        "{at}: the output shown is not what it prints (`...` stands for lines left out); it prints:\n{stdout}"
                    ));
                }
            }
            code => problems.push(format!("{at}: exited {code}\nstdout: {stdout}\nstderr: {stderr}")),
        }
    }
    if problems.is_empty() && (!status.success() || reached + 1 != cmds.len()) {
        problems.push(format!(
            "the walk stopped after command {} of {} ({status}): {}",
            reached + 1,
            cmds.len(),
            read("bash.err")
        ));
    }
    if problems.is_empty() && netns.exists() {
        problems.push(format!("the walk's cleanup left its namespace ({})", netns.0));
    }
    // The walk's `portdrift-try.log` is renamed with its namespace.
    assert!(
        problems.is_empty(),
        "{}\n\nthe agent's log:\n{}",
        problems.join("\n\n"),
        std::fs::read_to_string(dir.path().join(format!("{}.log", netns.0)))
            .unwrap_or_else(|_| "(none left)".into())
    );
    eprintln!("{WALK}: {} commands in {took:?}", cmds.len());
}
