//! How a command that failed ends: its error printed once with each cause, or, when
//! what read its output went away (`portdrift ... | head`), quietly.

use std::io;

/// Whether the command failed only because its output's reader closed the pipe: as
/// standard tools do, that ends it quietly, successfully.
pub fn is_closed_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        let kind = match cause.downcast_ref::<io::Error>() {
            Some(e) => Some(e.kind()),
            // A JSON report is written through serde_json, which wraps the write's error.
            None => cause
                .downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind),
        };
        kind == Some(io::ErrorKind::BrokenPipe)
    })
}

/// The error and its causes, each once: many of the errors' messages already end with
/// their cause's, which a plain chain would print again.
pub fn error_chain(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
