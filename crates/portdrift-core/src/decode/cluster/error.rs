//! Why a cluster state document could not be read, and where in it: shared by the
//! List walker and the reader of what it walks.

/// Why a cluster state file could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ClusterFileError {
    #[error("cannot read the cluster state: {0}")]
    Io(#[from] std::io::Error),
    #[error("the cluster state ends early at line {line} column {column} (truncated?)")]
    Truncated { line: u64, column: u64 },
    #[error("the cluster state is not valid JSON at line {line} column {column}: {message}")]
    Syntax { line: u64, column: u64, message: String },
    #[error(
        "the cluster state is not a v1 List (as `kubectl get services,endpointslices -A -o json` prints): {found}"
    )]
    NotAList { found: String },
}

/// A position in the document, 1-based, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    pub line: u64,
    pub column: u64,
}

/// A serde_json error inside a value that starts at `at`, positioned in the document.
pub(crate) fn syntax_error(e: &serde_json::Error, at: Position) -> ClusterFileError {
    let line = at.line + (e.line() as u64).saturating_sub(1);
    let column = if e.line() <= 1 {
        at.column + (e.column() as u64).saturating_sub(1)
    } else {
        e.column() as u64
    };
    ClusterFileError::Syntax {
        line,
        column,
        message: message_without_position(e),
    }
}

/// serde_json's message without its " at line L column C" suffix (which counts
/// within the value, not the document).
pub(crate) fn message_without_position(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    message
        .strip_suffix(&position)
        .map(str::to_string)
        .unwrap_or(message)
}
