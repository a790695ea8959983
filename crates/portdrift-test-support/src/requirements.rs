//! What a test needs from the machine (root, a tool): without it the test is skipped,
//! except under CI, where a missing need is a failure, never a skip.

/// Whether tests that need root and the kernel may run; with `CI` set, a missing
/// privilege is a failure, never a skip.
pub fn require_root(test: &str) -> bool {
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !root {
        skip_unless_ci(test, "root");
    }
    root
}

/// Whether `tool` (a command on `PATH`) is installed; with `CI` set, a missing tool is
/// a failure, never a skip.
pub fn require_tool(tool: &str, test: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()));
    if !found {
        skip_unless_ci(test, tool);
    }
    found
}

/// Reports a test skipped for want of `need`; with `CI` set, fails it instead.
fn skip_unless_ci(test: &str, need: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} needs {need}, and CI must not skip it"
    );
    eprintln!("skipping {test}: needs {need} (CI has it)");
}
