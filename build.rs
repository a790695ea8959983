//! The build's identity for `--version` and `portdrift_build_info`: the git revision
//! (PORTDRIFT_REVISION when set, as an image build passes it, else `git rev-parse`, else
//! "unknown") and the compiler's version.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=PORTDRIFT_REVISION");
    let revision = std::env::var("PORTDRIFT_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty())
        .or_else(git_revision)
        .unwrap_or_else(|| "unknown".to_string());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let rustc = output(Command::new(rustc).arg("--version"))
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=PORTDRIFT_REVISION={}", revision.trim());
    println!("cargo:rustc-env=PORTDRIFT_RUSTC={rustc}");
}

/// The checkout's commit, short, and a rerun when it moves.
fn git_revision() -> Option<String> {
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = output(Command::new("git").args(["rev-parse", "--git-path", path])) {
            println!("cargo:rerun-if-changed={}", p.trim());
        }
    }
    if let Some(head) = output(Command::new("git").args(["symbolic-ref", "-q", "HEAD"]))
        && let Some(p) = output(Command::new("git").args(["rev-parse", "--git-path", head.trim()]))
    {
        println!("cargo:rerun-if-changed={}", p.trim());
    }
    output(Command::new("git").args(["rev-parse", "--short=12", "HEAD"]))
}

fn output(command: &mut Command) -> Option<String> {
    let out = command.output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout)
        .ok()
        .filter(|s| !s.trim().is_empty())
}
