//! The crate's error type: every variant says which op (or stage) failed and why.

/// Errors returned by wgpu-ops. User input never panics; it ends up here. An error displays as
/// one line: control characters in its text (names taken from the input, wgpu's multi-line
/// validation reports) are written as escapes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An op's input broke one of the op's rules. `message` names the input (and index) and the
    /// rule, e.g. `stride[2] is 0; strides must be non-zero`.
    #[error("{op}: {}", escape(.message))]
    InvalidInput {
        /// The op (or stage) whose rule was broken.
        op: &'static str,
        /// The input (or attribute) that broke it.
        input: String,
        /// The rule and the offending value.
        message: String,
    },
    /// A tensor or dispatch is larger than a device limit allows.
    #[error("{op}: {} needs {needed} but the device's {limit} is {max}", escape(.what))]
    LimitExceeded {
        /// The op that needed more.
        op: &'static str,
        /// What needed it (a tensor, a dispatch, a Scan's state, ...).
        what: String,
        /// The limit's name (`max_buffer_size`, `max_memory`, ...).
        limit: &'static str,
        /// How much was needed, in the limit's unit.
        needed: u64,
        /// The limit's value.
        max: u64,
    },
    /// An op of a graph failed; `source` says why.
    #[error("node '{}': {source}", escape(.node))]
    Node {
        /// The node's name.
        node: String,
        /// The node's error.
        source: Box<Error>,
    },
    /// An index computed on the GPU was out of range, or another value on the GPU broke its
    /// op's rule (a `CheckValues` node's: a loss's target, TensorScatter's write index, ...):
    /// `source` names the op, the input and the value, `nodes` the graph node that read it
    /// (after the nodes that hold it, as a Scan holds its body's). Found when the run's values
    /// were read back (see `Session::run_values`).
    #[error("{}{source}", node_path(.nodes))]
    IndexOutOfRange {
        /// The graph nodes that read the value, outermost first.
        nodes: Vec<String>,
        /// The op, input and value that broke the rule.
        source: Box<Error>,
    },
    /// The graph is malformed (unknown name, cycle, unknown op, ...).
    #[error("graph: {}", escape(.0))]
    Graph(String),
    /// No adapter matched the request, or the device could not be created.
    #[error("adapter: {}", escape(.0))]
    Adapter(String),
    /// wgpu reported a validation error while `op` was recorded or submitted.
    #[error("{}: GPU validation error: {}", escape(.op), escape(.message))]
    Validation {
        /// The op or stage being recorded or submitted.
        op: String,
        /// wgpu's report.
        message: String,
    },
    /// wgpu ran out of memory while `op` was recorded or submitted.
    #[error("{}: GPU out of memory: {}", escape(.op), escape(.message))]
    OutOfMemory {
        /// The op or stage being recorded or submitted.
        op: String,
        /// wgpu's report.
        message: String,
    },
    /// An ONNX model could not be read or uses what is not supported (names every op missing).
    #[error("model: {}", escape(.0))]
    Model(String),
    /// Reading a result back from the GPU failed.
    #[error("readback: {}", escape(.0))]
    Readback(String),
    /// The GPU device was lost (a driver reset or hang, the device destroyed, a browser's GPU
    /// process gone) by the time `op` ran: its results, and those of work submitted since the
    /// loss, were not computed. The context cannot be used again; make a new one.
    #[error(
        "{}: the GPU device was lost ({}); make a new Context",
        escape(.op),
        escape(.reason)
    )]
    DeviceLost {
        /// The op or stage that found the device lost.
        op: String,
        /// wgpu's reason for the loss.
        reason: String,
    },
    /// A file could not be read or written (command-line and `.npy` helpers).
    #[error("{}: {}", escape(.path), escape(.message))]
    File {
        /// The file's path.
        path: String,
        /// What went wrong.
        message: String,
    },
}

/// The crate's result type: [`Error`] unless given another.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether device memory ran out: the context's memory limit refused a tensor, or the
    /// driver ran out (also when an op of a graph failed so).
    pub fn is_memory_limit(&self) -> bool {
        match self {
            Error::LimitExceeded { limit, .. } => limit.starts_with("memory limit"),
            Error::OutOfMemory { .. } => true,
            Error::Node { source, .. } => source.is_memory_limit(),
            _ => false,
        }
    }

    /// An [`Error::InvalidInput`]; `message` should start with the input it is about.
    pub fn invalid(op: &'static str, input: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidInput {
            op,
            input: input.into(),
            message: message.into(),
        }
    }
}

/// `node 'a': node 'b': ` for the nodes `[a, b]`.
fn node_path(nodes: &[String]) -> String {
    nodes
        .iter()
        .map(|n| format!("node '{}': ", escape(n)))
        .collect()
}

/// `text` with its control characters (newlines, tabs, escapes) written as Rust escapes, so
/// that an error stays one line whatever the names taken from the input hold. Applying it
/// twice changes nothing more.
pub fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_display_as_one_line() {
        let e = Error::Node {
            node: "a\nb\r".into(),
            source: Box::new(Error::Graph(
                "value 'x\ny' is produced more than once".into(),
            )),
        };
        let shown = e.to_string();
        assert_eq!(
            shown,
            "node 'a\\nb\\r': graph: value 'x\\ny' is produced more than once"
        );
        assert!(!shown.contains('\n'));
        assert_eq!(escape(&escape("t\tab")), "t\\tab");
        assert_eq!(escape("C:\\dir"), "C:\\dir");
    }
}
