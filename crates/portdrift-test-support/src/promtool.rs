//! The real `promtool`: `check metrics` on an exposition, for the library's unit tests
//! and the binary's, and any other command on the checkout's files.

use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `promtool check metrics` on `text`: whether it passed, and what it said. None
/// when promtool is missing and `CI` is unset; under CI a missing promtool is a failure.
pub fn check(text: &str) -> Option<(bool, String)> {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && std::env::var_os("CI").is_none() => {
            eprintln!("promtool is not installed: skipped");
            return None;
        }
        Err(e) => panic!("cannot run promtool: {e}"),
    };
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(text.as_bytes())
        .expect("promtool reads its input");
    let out = child.wait_with_output().expect("promtool runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), said))
}

/// Runs promtool with `args` in the root of the checkout: whether it passed, and what it
/// said.
pub fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(crate::root())
        .output()
        .expect("promtool runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}
