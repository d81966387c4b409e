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
    /// `"predicate"` or `"action list"` while checking a clause: DTrace names the region
    /// (`in action list: …`) where it cannot name a line (`-n` descriptions). `""`
    /// marks an error DTrace raises outside clause cooking, which is never labelled.
    pub region: Option<&'static str>,
}

impl CompileError {
    pub fn new(span: Span, message: impl Into<String>) -> CompileError {
        CompileError { message: message.into(), span, region: None }
    }

    /// Tags the error with the clause region it arose in, unless already tagged.
    pub fn in_region(mut self, region: &'static str) -> CompileError {
        self.region.get_or_insert(region);
        self
    }

    /// Marks an error DTrace raises outside clause cooking: while parsing (dt_lex.l
    /// macro references, dt_node_op2's constant checks) or while compiling statements
    /// (dt_cc.c). It keeps no region label.
    pub fn unlabelled(mut self) -> CompileError {
        self.region = Some("");
        self
    }

    /// The region to name in the message, if any.
    pub fn label(&self) -> Option<&'static str> {
        self.region.filter(|r| !r.is_empty())
    }
}

pub type Result<T, E = CompileError> = std::result::Result<T, E>;
