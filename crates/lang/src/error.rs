//! Compile errors: one message, one place. Rendering (with the source line and a caret)
//! lives in `diag`.

use crate::span::Span;

/// A compile error in D source. `message` is DTrace's wording where DTrace has one,
/// without the `line N:` prefix (the renderer adds that from `span`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CompileError {
    pub message: String,
    pub span: Span,
}

impl CompileError {
    pub fn new(span: Span, message: impl Into<String>) -> CompileError {
        CompileError { message: message.into(), span }
    }
}

pub type Result<T, E = CompileError> = std::result::Result<T, E>;
