//! The one error type of hrx.

use std::{fmt, sync::Arc};

/// Result alias used by every hrx crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A compiler diagnostic: a code, a message and where it points.
///
/// Lines and columns count from 1; `excerpt` is the source line with a caret
/// under the offending column, ready to print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Stable code, for example `E0101`, documented in the loom reference.
    pub code: &'static str,
    /// Human readable explanation.
    pub message: String,
    /// 1-based line of the offending token.
    pub line: u32,
    /// 1-based column (in characters) of the offending token.
    pub column: u32,
    /// The source line and a caret line under the column.
    pub excerpt: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: error[{}]: {}",
            self.line, self.column, self.code, self.message
        )?;
        if !self.excerpt.is_empty() {
            write!(f, "\n{}", self.excerpt)?;
        }
        Ok(())
    }
}

/// Every failure hrx reports.
///
/// ```
/// use hrx_core::Error;
/// let busy = Error::Busy("all slots are running".into());
/// assert!(busy.is_busy());
/// assert_eq!(busy.to_string(), "busy: all slots are running");
/// ```
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The resource is momentarily taken (a slot, a mapping of memory the
    /// device is still using). Retrying later may succeed.
    #[error("busy: {0}")]
    Busy(String),
    /// The device or target lacks a feature the request needs.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The Vulkan device was lost; every pending completion fails with this.
    #[error("device lost: {0}")]
    DeviceLost(String),
    /// The work was cancelled before it could complete.
    #[error("cancelled")]
    Cancelled,
    /// Device work failed; `source` is the failure shared by every observer
    /// (and every dependent submission) of that work.
    #[error("execution failed: {source}")]
    Execution {
        /// The first failure in the dependency chain.
        source: Arc<Error>,
    },
    /// loom source did not compile; `diagnostics` say where and why.
    #[error("{message}")]
    Compile {
        /// Summary (first diagnostic, and how many more).
        message: String,
        /// Every independent error found, in source order.
        diagnostics: Vec<Diagnostic>,
    },
    /// A Vulkan call returned an error code.
    #[error("vulkan: {operation} failed: {result}")]
    Vulkan {
        /// The call or step that failed, for example `vkCreateDevice`.
        operation: &'static str,
        /// The driver's result code, printed by name.
        result: String,
    },
    /// Any other precondition or usage error, explained in words.
    #[error("{0}")]
    Message(String),
}

impl Error {
    /// Shorthand for [`Error::Message`].
    pub fn msg(text: impl Into<String>) -> Self {
        Error::Message(text.into())
    }

    /// Whether this is backpressure ([`Error::Busy`]) rather than a failure.
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Busy(_))
    }

    /// Wrap a failure so that many observers can share it. A failure that is
    /// already shared is passed on as it is, so a chain of dependent work
    /// reports the first cause, not a nest of wrappers.
    pub fn shared(self) -> Self {
        match self {
            Error::Execution { .. } | Error::DeviceLost(_) | Error::Cancelled => self,
            other => Error::Execution {
                source: Arc::new(other),
            },
        }
    }

    /// Build a [`Error::Compile`] from diagnostics (at least one).
    pub fn compile(diagnostics: Vec<Diagnostic>) -> Self {
        let message = match diagnostics.as_slice() {
            [] => "compilation failed".to_string(),
            [one] => one.to_string(),
            [first, rest @ ..] => format!("{first}\n(and {} more errors)", rest.len()),
        };
        Error::Compile {
            message,
            diagnostics,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_keeps_the_first_cause() {
        let first = Error::msg("boom").shared();
        let again = first.clone().shared();
        match (&first, &again) {
            (Error::Execution { source: a }, Error::Execution { source: b }) => {
                assert!(Arc::ptr_eq(a, b));
            }
            _ => panic!("expected execution errors"),
        }
        assert!(matches!(Error::Cancelled.shared(), Error::Cancelled));
    }

    #[test]
    fn compile_summarises_diagnostics() {
        let d = Diagnostic {
            code: "E0001",
            message: "unexpected token".into(),
            line: 3,
            column: 7,
            excerpt: String::new(),
        };
        let e = Error::compile(vec![d.clone(), d]);
        assert!(
            e.to_string()
                .starts_with("3:7: error[E0001]: unexpected token")
        );
        assert!(e.to_string().contains("1 more"));
    }

    #[test]
    fn errors_are_send_and_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Error>();
    }
}
