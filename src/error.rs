//! The crate's error type: every variant says which op (or stage) failed and why.

/// Errors returned by wgpu-ops. User input never panics; it ends up here.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An op's input broke one of the op's rules. `message` names the input (and index) and the
    /// rule, e.g. `stride[2] is 0; strides must be non-zero`.
    #[error("{op}: {message}")]
    InvalidInput {
        op: &'static str,
        input: String,
        message: String,
    },
    /// A tensor or dispatch is larger than a device limit allows.
    #[error("{op}: {what} needs {needed} but the device's {limit} is {max}")]
    LimitExceeded {
        op: &'static str,
        what: String,
        limit: &'static str,
        needed: u64,
        max: u64,
    },
    /// An op of a graph failed; `source` says why.
    #[error("node '{node}': {source}")]
    Node { node: String, source: Box<Error> },
    /// The graph is malformed (unknown name, cycle, unknown op, ...).
    #[error("graph: {0}")]
    Graph(String),
    /// No adapter matched the request, or the device could not be created.
    #[error("adapter: {0}")]
    Adapter(String),
    /// wgpu reported a validation error while `op` was recorded or submitted.
    #[error("{op}: GPU validation error: {message}")]
    Validation { op: String, message: String },
    /// wgpu ran out of memory while `op` was recorded or submitted.
    #[error("{op}: GPU out of memory: {message}")]
    OutOfMemory { op: String, message: String },
    /// Reading a result back from the GPU failed.
    #[error("readback: {0}")]
    Readback(String),
    /// A file could not be read or written (command-line and `.npy` helpers).
    #[error("{path}: {message}")]
    File { path: String, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::InvalidInput`]; `message` should start with the input it is about.
    pub fn invalid(op: &'static str, input: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidInput {
            op,
            input: input.into(),
            message: message.into(),
        }
    }
}

/// `name` (a value, node or file name taken from the input) made safe to quote in an error
/// line: backslashes and control characters (newlines, tabs, escapes) are written as Rust
/// escapes, so an error stays one line whatever the input names hold.
pub fn escape(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.chars().any(|c| c == '\\' || c.is_control()) {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        if c == '\\' || c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}
