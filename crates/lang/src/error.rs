//! Compile errors: one tag, one message, one place. Rendering (with the source line
//! and a caret) lives in `diag`.

pub use crate::errtags::Tag;
use crate::span::Span;

/// Where in a clause an error arose: DTrace names the region (`in action list: …`)
/// where it cannot name a line (`-n` descriptions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    /// Not known yet: the clause being checked will say.
    Unknown,
    Predicate,
    ActionList,
    /// Raised outside clause cooking, which DTrace never labels.
    None,
}

/// A compile error in D source. `message` is DTrace's wording where DTrace has one,
/// without the `line N:` prefix (the renderer adds that from `span`).
///
/// Kept small: checker and parser results carry it through deep recursion.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CompileError {
    /// DTrace's tag for this kind of error, printed with `-x errtags`.
    pub tag: Tag,
    pub region: Region,
    pub message: String,
    pub span: Span,
    /// Where the reported line is, when DTrace reports another line than the
    /// span's (an operator's errors are at the token its parser read after it).
    pub line_at: Option<u32>,
}

impl CompileError {
    pub fn new(tag: Tag, span: Span, message: impl Into<String>) -> CompileError {
        CompileError { tag, message: message.into(), span, region: Region::Unknown, line_at: None }
    }

    /// Tags the error with the clause region it arose in, unless already tagged.
    pub fn in_region(mut self, region: Region) -> CompileError {
        if self.region == Region::Unknown {
            self.region = region;
        }
        self
    }

    /// Marks an error DTrace raises outside clause cooking: while parsing (dt_lex.l
    /// macro references, dt_node_op2's constant checks) or while compiling statements
    /// (dt_cc.c). It keeps no region label.
    pub fn unlabelled(mut self) -> CompileError {
        self.region = Region::None;
        self
    }

    /// The region to name in the message, if any.
    pub fn label(&self) -> Option<&'static str> {
        match self.region {
            Region::Predicate => Some("predicate"),
            Region::ActionList => Some("action list"),
            Region::Unknown | Region::None => None,
        }
    }
}

pub type Result<T, E = CompileError> = std::result::Result<T, E>;
