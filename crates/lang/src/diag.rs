//! Rendering compile errors as dtrace words them: with `-x errtags` the error's
//! `[D_…]` tag first, then the place (`line N:`, or the clause region for `-n`
//! descriptions), then the message. A person at a terminal also gets a snippet of the
//! source line with a caret under the error; redirected output gets dtrace's one line.
//!
//! Line numbers honour C preprocessor line markers (`# 12 "file.d"`, `#line 12`),
//! which appear when a script went through cpp (`-C`): the line reported is the line
//! of the original file.

use std::ops::Range;

use codespan_reporting::diagnostic::{Diagnostic, Label};
use codespan_reporting::files::{self, Files};
use codespan_reporting::term::{self, termcolor::NoColor, Chars, Config};

use crate::error::CompileError;
use crate::lexer::line_marker;

/// Where the source text of an error came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A script (`-s`), with its path as given on the command line.
    Script(String),
    /// An `-n`/`-P`/`-m`/`-f` argument.
    Description,
}

/// How an error is shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Style {
    /// `-x errtags`: prefix the error's tag, `[D_SYNTAX] `.
    pub errtags: bool,
    /// Follow the message with the source line and a caret (for a terminal).
    pub excerpt: bool,
}

/// The tag prefix `-x errtags` asks for, or nothing.
pub fn tag_prefix(err: &CompileError, style: Style) -> String {
    if style.errtags {
        format!("[{}] ", err.tag)
    } else {
        String::new()
    }
}

/// The whole message for `err` in `src`, without the leading program name and
/// without a trailing newline: dtrace's one-line message, then (for a terminal) the
/// snippet.
pub fn render(err: &CompileError, origin: &Origin, src: &str, style: Style) -> String {
    let map = LineMap::new(src, origin);
    let range = clamp(src, err.span.range());
    let at = err.line_at.map_or(range.start, |at| clamp(src, at as usize..at as usize).start);
    let line = map.line_index(at);
    let tag = tag_prefix(err, style);
    let mut out = match origin {
        Origin::Script(path) => {
            let place = match map.foreign_file(line) {
                Some(file) => format!("\"{file}\", line {}", map.numbers[line]),
                None => format!("line {}", map.numbers[line]),
            };
            format!("failed to compile script {path}: {tag}{place}: {}", err.message)
        }
        // dtrace names the clause region where it cannot name a line.
        Origin::Description => match err.label() {
            Some(region) => format!("invalid probe specifier {src}: {tag}in {region}: {}", err.message),
            None => format!("invalid probe specifier {src}: {tag}{}", err.message),
        },
    };
    if style.excerpt {
        let snippet = snippet(&map, line, range);
        if !snippet.is_empty() {
            out.push('\n');
            out.push_str(&snippet);
        }
    }
    out
}

/// An error that belongs to no place in the source (a line-less message).
pub fn render_unplaced(err: &CompileError, origin: &Origin, src: &str, style: Style) -> String {
    let tag = tag_prefix(err, style);
    match origin {
        Origin::Script(path) => format!("failed to compile script {path}: {tag}{}", err.message),
        Origin::Description => format!("invalid probe specifier {src}: {tag}{}", err.message),
    }
}

/// Clamps a span to the source and to character boundaries, so that a bad span can
/// never make rendering fail.
fn clamp(src: &str, r: Range<usize>) -> Range<usize> {
    let floor = |mut i: usize| {
        i = i.min(src.len());
        while !src.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let start = floor(r.start);
    start..floor(r.end.max(start))
}

/// The caret snippet, rendered by codespan with colours off.
fn snippet(map: &LineMap, line: usize, range: Range<usize>) -> String {
    let file = MappedFile { map, name: map.display_name(line) };
    let diagnostic = Diagnostic::error().with_labels(vec![Label::primary((), range)]);
    let config = Config { chars: Chars::ascii(), ..Config::default() };
    let mut writer = NoColor::new(Vec::new());
    if term::emit(&mut writer, &config, &file, &diagnostic).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&writer.into_inner()).into_owned();
    // Drop codespan's own header line ("error"): our message is already above.
    let body = text.split_once('\n').map_or("", |(_, rest)| rest);
    body.trim_end().to_string()
}

/// Physical lines of a source and the line number and file each one reports.
struct LineMap<'a> {
    src: &'a str,
    starts: Vec<usize>,
    /// Reported (1-based) line number of each physical line.
    numbers: Vec<usize>,
    /// File named by the last line marker before each physical line, if any.
    files: Vec<Option<String>>,
    /// The name the main file goes by: the script path, or `<description>`.
    main_name: String,
    /// The file named by the first line marker: cpp names the main file first.
    first_marker_file: Option<String>,
}

impl<'a> LineMap<'a> {
    fn new(src: &'a str, origin: &Origin) -> LineMap<'a> {
        let mut starts = vec![0];
        starts.extend(src.match_indices('\n').map(|(i, _)| i + 1));
        let mut numbers = Vec::with_capacity(starts.len());
        let mut files = Vec::with_capacity(starts.len());
        let mut first_marker_file = None;
        let mut next = 1usize;
        let mut file: Option<String> = None;
        for (i, &start) in starts.iter().enumerate() {
            numbers.push(next);
            files.push(file.clone());
            let end = starts.get(i + 1).map_or(src.len(), |&s| s - 1);
            match line_marker(&src[start..end]) {
                Some((n, f)) => {
                    next = usize::try_from(n).unwrap_or(usize::MAX);
                    if let Some(f) = f {
                        first_marker_file.get_or_insert_with(|| f.clone());
                        file = Some(f);
                    }
                }
                None => next = next.saturating_add(1),
            }
        }
        let main_name = match origin {
            Origin::Script(path) => path.clone(),
            Origin::Description => "<description>".to_string(),
        };
        LineMap { src, starts, numbers, files, main_name, first_marker_file }
    }

    fn line_index(&self, byte: usize) -> usize {
        match self.starts.binary_search(&byte) {
            Ok(i) => i,
            Err(next) => next.saturating_sub(1),
        }
    }

    fn line_range(&self, line: usize) -> Option<Range<usize>> {
        let start = *self.starts.get(line)?;
        let end = self.starts.get(line + 1).copied().unwrap_or(self.src.len());
        Some(start..end)
    }

    /// The file a line belongs to when it is not the main file (an `#include`d
    /// header after cpp), as dtrace then names it in its message.
    fn foreign_file(&self, line: usize) -> Option<&str> {
        let file = self.files.get(line)?.as_deref()?;
        let is_main = file == self.main_name
            || Some(file) == self.first_marker_file.as_deref()
            || file.starts_with("/dev/fd/")
            || file.starts_with('<');
        (!is_main).then_some(file)
    }

    fn display_name(&self, line: usize) -> String {
        self.foreign_file(line).map_or_else(|| self.main_name.clone(), str::to_string)
    }
}

/// The source as codespan sees it: one file whose line numbers come from the
/// line map.
struct MappedFile<'m> {
    map: &'m LineMap<'m>,
    name: String,
}

impl<'f> Files<'f> for MappedFile<'f> {
    type FileId = ();
    type Name = String;
    type Source = &'f str;

    fn name(&'f self, (): ()) -> Result<String, files::Error> {
        Ok(self.name.clone())
    }

    fn source(&'f self, (): ()) -> Result<&'f str, files::Error> {
        Ok(self.map.src)
    }

    fn line_index(&'f self, (): (), byte_index: usize) -> Result<usize, files::Error> {
        Ok(self.map.line_index(byte_index))
    }

    fn line_number(&'f self, (): (), line_index: usize) -> Result<usize, files::Error> {
        match self.map.numbers.get(line_index) {
            Some(&n) => Ok(n),
            // codespan asks for the line after the last one when a span ends there.
            None => Ok(self.map.numbers.last().map_or(1, |n| n.saturating_add(1))),
        }
    }

    fn line_range(&'f self, (): (), line_index: usize) -> Result<Range<usize>, files::Error> {
        if line_index == self.map.starts.len() {
            return Ok(self.map.src.len()..self.map.src.len());
        }
        self.map
            .line_range(line_index)
            .ok_or(files::Error::LineTooLarge { given: line_index, max: self.map.starts.len().saturating_sub(1) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::{parse_program, parse_script, DescAlign};
    use crate::span::Span;

    const TTY: Style = Style { errtags: false, excerpt: true };

    fn script_err(src: &str) -> String {
        let e = parse_script(src).unwrap_err();
        render(&e, &Origin::Script("x.d".into()), src, TTY)
    }

    #[test]
    fn script_error_with_snippet() {
        let src = "BEGIN\n{\n\tx = ;\n}\n";
        let out = script_err(src);
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("failed to compile script x.d: line 3: syntax error near \";\""));
        let rest: Vec<&str> = lines.collect();
        assert!(rest[0].contains("x.d:3:6"), "{out}");
        assert!(rest.iter().any(|l| l.ends_with("x = ;")), "{out}");
        let caret = rest.iter().find(|l| l.trim_end().ends_with('^')).expect(&out);
        let code = rest.iter().find(|l| l.ends_with("x = ;")).unwrap();
        // The caret sits under the `;`.
        assert_eq!(caret.trim_end().len(), code.len());
        assert!(!out.ends_with('\n'));
    }

    #[test]
    fn description_error() {
        let src = "BEGIN { x = ; }";
        let e = parse_program(src, DescAlign::Name).unwrap_err();
        let out = render(&e, &Origin::Description, src, TTY);
        let expected = "invalid probe specifier BEGIN { x = ; }: syntax error near \";\"\n  --> <description>:1:13\n  |\n1 | BEGIN { x = ; }\n  |             ^";
        assert_eq!(out, expected);
    }

    #[test]
    fn end_of_input() {
        let src = "BEGIN {\n";
        let out = script_err(src);
        assert!(out.starts_with("failed to compile script x.d: line 2: syntax error near end of input"), "{out}");
    }

    #[test]
    fn cpp_line_markers_give_original_lines() {
        let src = "# 1 \"x.d\"\n# 1 \"<built-in>\"\n# 1 \"x.d\"\n\n\n# 7 \"x.d\"\nBEGIN\n{\n\tx = ;\n}\n";
        let out = script_err(src);
        assert!(out.starts_with("failed to compile script x.d: line 9: syntax error"), "{out}");
        assert!(out.contains("x.d:9:6"), "{out}");
        assert!(out.contains("\n9 |     x = ;"), "{out}");
    }

    #[test]
    fn errors_in_included_files_name_them() {
        let src = "# 1 \"/dev/fd/5\"\n# 1 \"defs.h\" 1\nint x y;\n# 3 \"/dev/fd/5\" 2\nBEGIN {}\n";
        let e = parse_script(src).unwrap_err();
        let out = render(&e, &Origin::Script("x.d".into()), src, TTY);
        assert!(out.starts_with("failed to compile script x.d: \"defs.h\", line 1: syntax error near \"y;\""), "{out}");
        assert!(out.contains("defs.h:1:"), "{out}");
        let src = "#line 20\nBEGIN { x = ; }\n";
        assert!(script_err(src).starts_with("failed to compile script x.d: line 20:"));
    }

    #[test]
    fn odd_spans_do_not_break_rendering() {
        let src = "é\n";
        for span in [Span::new(1, 2), Span::new(0, 99), Span::new(50, 60), Span::new(3, 1)] {
            let e = CompileError::new(crate::Tag::D_UNKNOWN, span, "m");
            let out = render(&e, &Origin::Script("x.d".into()), src, TTY);
            assert!(out.starts_with("failed to compile script x.d: line "), "{out}");
        }
        let e = CompileError::new(crate::Tag::D_UNKNOWN, Span::new(0, 0), "m");
        assert!(render(&e, &Origin::Description, "", TTY).starts_with("invalid probe specifier : m"));
    }

    #[test]
    fn errtags_and_plain_output() {
        let src = "BEGIN\n{\n\tx = ;\n}\n";
        let e = parse_script(src).unwrap_err();
        let style = Style { errtags: true, excerpt: false };
        assert_eq!(
            render(&e, &Origin::Script("x.d".into()), src, style),
            "failed to compile script x.d: [D_SYNTAX] line 3: syntax error near \";\""
        );
        let e = CompileError::new(crate::Tag::D_PROTO_LEN, Span::new(6, 13), "m")
            .in_region(crate::error::Region::ActionList);
        assert_eq!(
            render(&e, &Origin::Description, "BEGIN{trace()}", style),
            "invalid probe specifier BEGIN{trace()}: [D_PROTO_LEN] in action list: m"
        );
    }

    #[test]
    fn multi_line_span() {
        let src = "BEGIN { x = \"a\nb\"; }";
        let e = parse_program(src, DescAlign::Name).unwrap_err();
        let out = render(&e, &Origin::Description, src, TTY);
        assert!(
            out.starts_with("invalid probe specifier BEGIN { x = \"a\nb\"; }: newline encountered in string literal"),
            "{out}"
        );
    }
}
