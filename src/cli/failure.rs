//! How a command that failed ends: its error printed once with each cause, or, when
//! what read its output went away (`portdrift ... | head`), quietly.

use std::io::{self, Write};

/// A write to standard output found its reader gone. Only [`Stdout`] makes it, so a
/// broken pipe elsewhere (a socket to the API server, say) is still a failure.
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed")]
pub struct OutputClosed;

/// Standard output, whose broken pipe is an [`OutputClosed`].
pub struct Stdout(io::StdoutLock<'static>);

/// Standard output for a command's result.
pub fn stdout() -> Stdout {
    Stdout(io::stdout().lock())
}

fn closed(error: io::Error) -> io::Error {
    if error.kind() == io::ErrorKind::BrokenPipe {
        io::Error::new(io::ErrorKind::BrokenPipe, OutputClosed)
    } else {
        error
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(closed)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(closed)
    }
}

/// Whether the command failed only because its output's reader closed the pipe: as
/// standard tools do, that ends it quietly (with [`CLOSED_PIPE`](super::exit::CLOSED_PIPE)).
pub fn is_closed_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause.is::<OutputClosed>()
            || cause
                .downcast_ref::<io::Error>()
                .and_then(io::Error::get_ref)
                .is_some_and(|inner| inner.is::<OutputClosed>())
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
