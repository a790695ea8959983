//! The documentation as a reader meets it: README.md, ARCHITECTURE.md, SECURITY.md
//! and docs/*.md.
//!
//! - Every relative link leads to a file that exists, and every `#anchor` to a heading
//!   of its file, by GitHub's rules (lowercase; a space becomes `-`; punctuation other
//!   than `-` and `_` goes; a repeated heading gets `-1`, `-2`, ...).
//! - Every alert of deploy/prometheus/portdrift-alerts.yaml has a section in
//!   docs/troubleshooting.md whose heading is exactly its name, and a `runbook_url`, where
//!   one is set, points there.
//! - Every command block (a fenced block whose info string is `sh`, `bash`, `shell` or
//!   `console`) is run, unless an HTML comment right above it says why not:
//!   `<!-- not run: REASON -->`. With `<!-- run: 1,3 -->` beside it, only those commands
//!   (counted from 1) run and the reason covers the rest. A run command may use only
//!   `portdrift` (or `cargo run --release --`, run as `portdrift`) and a few file tools
//!   (RUNNABLE), so a block that needs a cluster, root, a container engine or the
//!   network fails here until it is marked. Each `portdrift` command must exit with the
//!   status of `<!-- exit: N -->` (0 without one); every other command with 0.
//! - Commands run one by one with bash, the built binary's directory first on PATH, in a
//!   scratch directory that stands for the repository root (its top-level entries are
//!   symlinked there), so `testdata/...` reads the repository's files and what a command
//!   writes stays in the scratch directory. HOME is the scratch directory and KUBECONFIG
//!   is unset, so no command can reach a real cluster.
//! - In a `console` block, lines starting with `$ ` are commands and the lines after one
//!   are its standard output, exactly, except that a line `...` stands for lines left out.

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
    let mut files: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "SECURITY.md"]
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
        if let Some(rest) = cmd.line.strip_prefix("cargo run --release -- ") {
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
