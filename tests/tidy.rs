//! Comments that name a module path (`` `sources::live::LiveNode` ``) name one that
//! exists: a path left behind when a module moved is found here, not by the next reader.
//!
//! Reads every `.rs` file of both crates' `src/`, of the test-support crate's and of
//! `tests/`, takes each code span
//! in a comment that looks like a Rust path (`a::b`, `crate::a::b`, `super::b`), and
//! resolves it against the module tree the files make: from the crate root, then from
//! the comment's own module and each module above it. The modules must exist, and the
//! first name after them must be an item their file defines or brings in. Paths into
//! other crates (`std::`, `kube::`, ...) are not checked.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The first segments that name another crate, not a module of this one.
const OTHER_CRATES: &[&str] = &[
    "alloc",
    "anyhow",
    "bytes",
    "clap",
    "core",
    "criterion",
    "data_encoding",
    "dhat",
    "fastrand",
    "form_urlencoded",
    "futures",
    "hashbrown",
    "http",
    "http_body",
    "http_body_util",
    "hyper",
    "hyper_rustls",
    "hyper_util",
    "iptables",
    "jiff",
    "k8s_openapi",
    "kube",
    "kube_runtime",
    "libc",
    "lz4_flex",
    "memchr",
    "netlink_sys",
    "nftnl",
    "nix",
    "portdrift",
    "portdrift_core",
    "portdrift_test_support",
    "prometheus_client",
    "proptest",
    "rustc_hash",
    "rustix",
    "saphyr",
    "schemars",
    "serde",
    "serde_json",
    "serde_yaml_ng",
    "sha2",
    "socket2",
    "std",
    "tempfile",
    "thiserror",
    "tikv_jemalloc_ctl",
    "tikv_jemallocator",
    "tokio",
    "tower",
    "tracing",
    "tracing_subscriber",
    // The language's own types.
    "bool",
    "char",
    "f32",
    "f64",
    "i8",
    "i16",
    "i32",
    "i64",
    "isize",
    "str",
    "u8",
    "u16",
    "u32",
    "u64",
    "usize",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, with its module path (`heart/detect/mod.rs` is
/// `heart::detect`).
fn modules_under(dir: &Path, out: &mut BTreeMap<Vec<String>, Vec<PathBuf>>) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(dir).unwrap().with_extension("");
                let mut module: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
                if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                    module.pop();
                }
                out.entry(module).or_default().push(path);
            }
        }
    }
}

/// The code spans of a comment line that look like paths: `a::b`, at least two
/// segments, the first lowercase.
fn paths_in_comment(comment: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, span) in comment.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        let span = span.trim_end_matches("()");
        let segments: Vec<&str> = span.split("::").collect();
        let is_path = segments.len() >= 2
            && segments
                .iter()
                .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            && segments[0].starts_with(|c: char| c.is_ascii_lowercase());
        if is_path {
            out.push(span.to_string());
        }
    }
    out
}

/// The comment of a line (`//`, `///`, `//!`), or None.
fn comment_of(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    trimmed.strip_prefix("//")
}

/// Whether a module's text declares `name` (`fn name`, `struct name`, ...) or brings it
/// in with a `use` (a re-export).
fn defines(text: &str, name: &str) -> bool {
    const DECLARATIONS: &[&str] = &[
        "fn", "struct", "enum", "trait", "type", "const", "static", "mod", "union",
    ];
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let words_of = |line: &str| -> Vec<String> {
        line.split(|c: char| !is_word(c) && c != '!')
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut in_use = false;
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let words = words_of(code);
        let starts_use = words.iter().take(3).any(|w| w == "use");
        in_use |= starts_use;
        let named = words.iter().any(|w| w == name);
        let declared = words
            .windows(2)
            .any(|w| (DECLARATIONS.contains(&w[0].as_str()) || w[0] == "macro_rules!") && w[1] == name);
        if named && (in_use || declared) {
            return true;
        }
        if code.contains(';') {
            in_use = false;
        }
    }
    false
}

/// Resolves `path` written in module `from`: None when it names what exists, else why
/// not.
fn unresolved(path: &str, from: &[String], modules: &BTreeMap<Vec<String>, Vec<PathBuf>>) -> Option<String> {
    let mut segments: Vec<&str> = path.split("::").collect();
    if OTHER_CRATES.contains(&segments[0]) {
        return None;
    }
    // Where the path may start, and whether its first segment may be an item there.
    let starts: Vec<(Vec<String>, bool)> = match segments[0] {
        "crate" => {
            segments.remove(0);
            vec![(Vec::new(), true)]
        }
        "super" | "self" => {
            let mut base = from.to_vec();
            while let Some(&first) = segments.first() {
                match first {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                segments.remove(0);
            }
            vec![(base, true)]
        }
        // A module of the crate root, or one of a module above the comment's own.
        _ => (0..=from.len())
            .rev()
            .map(|k| (from[..k].to_vec(), false))
            .collect(),
    };
    for (base, item_at_base) in starts {
        let full: Vec<String> = base
            .iter()
            .cloned()
            .chain(segments.iter().map(|s| s.to_string()))
            .collect();
        let shortest = if item_at_base { base.len() } else { base.len() + 1 };
        let Some(depth) = (shortest..=full.len())
            .rev()
            .find(|&k| modules.contains_key(&full[..k]))
        else {
            continue;
        };
        // A path of modules alone names what exists.
        let item = full.get(depth)?;
        let text: String = modules[&full[..depth]]
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect();
        return (!defines(&text, item)).then(|| format!("`{}` has no `{item}`", full[..depth].join("::")));
    }
    Some("no such module".to_string())
}

#[test]
fn module_paths_named_in_comments_exist() {
    let mut modules = BTreeMap::new();
    modules_under(&root().join("src"), &mut modules);
    modules_under(&root().join("crates/portdrift-core/src"), &mut modules);
    // Each test file is a crate of its own: its `crate::` and `super::` paths name its
    // own modules (`support::...`), its other paths the library's, from the root.
    let mut tests = BTreeMap::new();
    modules_under(&root().join("tests"), &mut tests);
    // So is the test-support crate, whose comments also name its own modules from its root.
    let mut support = BTreeMap::new();
    modules_under(&root().join("crates/portdrift-test-support/src"), &mut support);
    let this_file = root().join("tests/tidy.rs");
    let files = modules
        .iter()
        .map(|(m, fs)| (m, fs, &modules))
        .chain(tests.iter().map(|(m, fs)| (m, fs, &tests)))
        .chain(support.iter().map(|(m, fs)| (m, fs, &support)));
    let mut stale = Vec::new();
    for (module, paths, own_tree) in files {
        for file in paths.iter().filter(|f| **f != this_file) {
            let text = std::fs::read_to_string(file).unwrap();
            for (n, line) in text.lines().enumerate() {
                let Some(comment) = comment_of(line) else { continue };
                for path in paths_in_comment(comment) {
                    let first = path.split("::").next().unwrap_or("");
                    let relative = matches!(first, "crate" | "super" | "self");
                    // A name the file itself brings in (`use kube::runtime::watcher;`
                    // then `watcher::Event`), as rustdoc resolves it.
                    if !relative && !modules.contains_key(&vec![first.to_string()]) && defines(&text, first) {
                        continue;
                    }
                    let (tree, from): (_, &[String]) = if relative || std::ptr::eq(own_tree, &modules) {
                        (own_tree, module)
                    } else {
                        (&modules, &[])
                    };
                    let own =
                        || std::ptr::eq(own_tree, &support) && unresolved(&path, module, &support).is_none();
                    if let Some(why) = unresolved(&path, from, tree).filter(|_| !own()) {
                        let at = file.strip_prefix(root()).unwrap().display();
                        stale.push(format!("{at}:{}: `{path}`: {why}", n + 1));
                    }
                }
            }
        }
    }
    assert!(
        stale.is_empty(),
        "comments name module paths that do not exist:\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_check_finds_a_moved_module_and_a_missing_item_and_passes_real_ones() {
    let mut modules = BTreeMap::new();
    modules_under(&root().join("src"), &mut modules);
    modules_under(&root().join("crates/portdrift-core/src"), &mut modules);
    let from: Vec<String> = vec!["sources".into(), "bundle".into()];
    assert_eq!(unresolved("sources::live::LiveNode", &from, &modules), None);
    assert_eq!(
        unresolved("live::LiveNode", &from, &modules),
        None,
        "relative to a module above"
    );
    assert_eq!(unresolved("heart::detect::examine", &from, &modules), None);
    assert_eq!(
        unresolved("std::fs::read", &from, &modules),
        None,
        "another crate"
    );
    assert!(
        unresolved("observed::live::LiveNode", &from, &modules).is_some(),
        "an old layer's name"
    );
    assert!(unresolved("sources::live::NoSuchThing", &from, &modules).is_some());
    assert_eq!(
        paths_in_comment(" see `a::b` and `c`, `d::E()`"),
        ["a::b", "d::E"]
    );
}

/// The name a line declares as a public type (`pub struct Name`, `pub enum Name<'a>`),
/// if it does.
fn public_type_declared(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("pub ")?;
    let rest = ["struct ", "enum ", "type ", "trait "]
        .iter()
        .find_map(|kind| rest.strip_prefix(kind))?;
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    Some(&rest[..end]).filter(|name| !name.is_empty())
}

/// One word, one meaning (ARCHITECTURE.md): no two public types of the shipped code share
/// a name, so a name read anywhere means one thing.
#[test]
fn no_two_public_types_share_a_name() {
    let mut modules = BTreeMap::new();
    modules_under(&root().join("src"), &mut modules);
    modules_under(&root().join("crates/portdrift-core/src"), &mut modules);
    let mut declared: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in modules.values().flatten() {
        let rel = file.strip_prefix(root()).unwrap().to_string_lossy().into_owned();
        if rel.ends_with("/tests.rs") || rel.contains("/tests/") || rel.contains("/testing") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if let Some(name) = public_type_declared(line) {
                declared
                    .entry(name.to_string())
                    .or_default()
                    .push(format!("{rel}:{}", n + 1));
            }
        }
    }
    assert!(declared.len() > 100, "too few public types found: {declared:?}");
    let shared: Vec<_> = declared.iter().filter(|(_, at)| at.len() > 1).collect();
    assert!(shared.is_empty(), "public types sharing a name: {shared:#?}");
}

#[test]
fn public_type_declarations_are_read_as_written() {
    assert_eq!(public_type_declared("pub struct RuleDump {"), Some("RuleDump"));
    assert_eq!(
        public_type_declared("    pub enum SetLookup<'a> {"),
        Some("SetLookup")
    );
    assert_eq!(
        public_type_declared("pub type Target = fn(&[u8]);"),
        Some("Target")
    );
    assert_eq!(public_type_declared("pub(crate) struct ReadPlan {"), None);
    assert_eq!(public_type_declared("pub fn plan() {}"), None);
}
