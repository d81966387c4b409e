//! Kernel tracepoints: finding tracefs (mounting it if the machine has not), reading an
//! event's id and field layout, and attaching a TRACEPOINT program to it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use thiserror::Error;

use udtrace_sys::{mount, perf};

use crate::prog::{Program, ProgramKind};
use crate::uprobe::{link_perf_event, AttachError};

#[derive(Debug, Error)]
pub enum TracepointError {
    #[error("tracefs is not mounted and mounting it at /sys/kernel/tracing failed: {0}")]
    Mount(io::Error),
    #[error("no tracepoint {group}:{name}: {source}")]
    Missing { group: String, name: String, source: io::Error },
    #[error("{file}: unexpected contents: {line}")]
    Parse { file: PathBuf, line: String },
    #[error("a {0:?} program cannot be attached to a tracepoint")]
    WrongKind(ProgramKind),
    #[error("cannot open tracepoint {group}:{name}: {source}")]
    Open { group: String, name: String, source: io::Error },
    #[error(transparent)]
    Attach(#[from] AttachError),
}

const TRACEFS: &str = "/sys/kernel/tracing";
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// The tracefs root; mounts tracefs at /sys/kernel/tracing if neither usual place has it.
pub fn tracefs_root() -> Result<PathBuf, TracepointError> {
    for p in [TRACEFS, DEBUGFS_TRACING] {
        if Path::new(p).join("events").is_dir() {
            return Ok(PathBuf::from(p));
        }
    }
    let target = CString::new(TRACEFS).expect("no NUL");
    mount::mount_tracefs(&target).map_err(TracepointError::Mount)?;
    Ok(PathBuf::from(TRACEFS))
}

/// One field of a tracepoint's record, as its `format` file declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: u32,
    pub size: u32,
    pub signed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracepointFormat {
    pub id: u64,
    pub fields: Vec<Field>,
}

impl TracepointFormat {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

fn event_dir(group: &str, name: &str) -> Result<PathBuf, TracepointError> {
    Ok(tracefs_root()?.join("events").join(group).join(name))
}

fn read(group: &str, name: &str, file: &Path) -> Result<String, TracepointError> {
    std::fs::read_to_string(file).map_err(|source| TracepointError::Missing {
        group: group.into(),
        name: name.into(),
        source,
    })
}

/// Reads `events/<group>/<name>/id` and `format`.
pub fn format(group: &str, name: &str) -> Result<TracepointFormat, TracepointError> {
    let dir = event_dir(group, name)?;
    let id_file = dir.join("id");
    let id_text = read(group, name, &id_file)?;
    let id = id_text
        .trim()
        .parse()
        .map_err(|_| TracepointError::Parse { file: id_file, line: id_text.trim().to_string() })?;
    let fmt_file = dir.join("format");
    let fields =
        parse_format(&read(group, name, &fmt_file)?).map_err(|line| TracepointError::Parse { file: fmt_file, line })?;
    Ok(TracepointFormat { id, fields })
}

/// Parses the `field:<decl>; offset:N; size:N; signed:N;` lines of a format file. The
/// field name is the last identifier of the declaration, before any `[N]`.
pub fn parse_format(text: &str) -> Result<Vec<Field>, String> {
    let mut fields = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with("field:") {
            continue;
        }
        let bad = || line.to_string();
        let mut decl = None;
        let (mut offset, mut size, mut signed) = (None, None, None);
        for part in line.split(';') {
            let Some((k, v)) = part.trim().split_once(':') else { continue };
            match k {
                "field" => decl = Some(v.trim()),
                "offset" => offset = v.trim().parse().ok(),
                "size" => size = v.trim().parse().ok(),
                "signed" => signed = v.trim().parse::<u32>().ok().map(|s| s != 0),
                _ => {}
            }
        }
        let decl = decl.ok_or_else(bad)?;
        // Drop every `[..]`: both `char comm[16]` and `__data_loc char[] comm` occur.
        let mut plain = String::new();
        let mut depth = 0;
        for c in decl.chars() {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                _ if depth == 0 => plain.push(c),
                _ => {}
            }
        }
        let decl = plain.trim_end();
        let name = decl
            .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .next()
            .filter(|n| !n.is_empty())
            .ok_or_else(bad)?;
        fields.push(Field {
            name: name.to_string(),
            offset: offset.ok_or_else(bad)?,
            size: size.ok_or_else(bad)?,
            signed: signed.unwrap_or(false),
        });
    }
    Ok(fields)
}

/// A program attached to a tracepoint; detached on drop.
#[derive(Debug)]
pub struct TracepointLink {
    _link: OwnedFd,
    _event: OwnedFd,
}

/// Attaches a TRACEPOINT program to `group:name` for every process, through a perf
/// link (`cookie` is what `bpf_get_attach_cookie` returns in it).
pub fn attach(prog: &Program, group: &str, name: &str, cookie: u64) -> Result<TracepointLink, TracepointError> {
    if prog.kind() != ProgramKind::Tracepoint {
        return Err(TracepointError::WrongKind(prog.kind()));
    }
    let fmt = format(group, name)?;
    let event = perf::open_tracepoint(fmt.id, -1, 0).map_err(|source| TracepointError::Open {
        group: group.into(),
        name: name.into(),
        source,
    })?;
    let link = link_perf_event(prog, &event, cookie, || format!("tracepoint {group}:{name}"))?;
    Ok(TracepointLink { _link: link, _event: event })
}

/// A RAW_TRACEPOINT program on a kernel tracepoint; detached on drop.
#[derive(Debug)]
pub struct RawTracepointLink {
    _link: OwnedFd,
}

/// Attaches a RAW_TRACEPOINT program to the tracepoint `name` (no group: raw
/// tracepoints are named by the kernel's `trace_<name>`), for every process.
pub fn attach_raw(prog: &Program, name: &str) -> Result<RawTracepointLink, TracepointError> {
    if prog.kind() != ProgramKind::RawTracepoint {
        return Err(TracepointError::WrongKind(prog.kind()));
    }
    let cname = CString::new(name).map_err(|_| TracepointError::Open {
        group: "raw".into(),
        name: name.into(),
        source: io::Error::from(io::ErrorKind::InvalidInput),
    })?;
    let link = udtrace_sys::bpf::raw_tracepoint_open(prog.as_fd(), &cname).map_err(|source| TracepointError::Open {
        group: "raw".into(),
        name: name.into(),
        source,
    })?;
    Ok(RawTracepointLink { _link: link })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORK: &str = "name: sched_process_fork
ID: 318
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:char parent_comm[16];	offset:8;	size:16;	signed:0;
	field:pid_t parent_pid;	offset:24;	size:4;	signed:1;
	field:__data_loc char[] child_comm;	offset:28;	size:4;	signed:0;
	field:pid_t child_pid;	offset:32;	size:4;	signed:1;

print fmt: \"comm=%s pid=%d\", REC->parent_comm, REC->parent_pid
";

    #[test]
    fn parses_fields() {
        let f = parse_format(FORK).unwrap();
        assert_eq!(f.len(), 7);
        assert_eq!(f[2], Field { name: "common_pid".into(), offset: 4, size: 4, signed: true });
        assert_eq!(f[3], Field { name: "parent_comm".into(), offset: 8, size: 16, signed: false });
        assert_eq!(f[5].name, "child_comm");
        assert_eq!(f[6], Field { name: "child_pid".into(), offset: 32, size: 4, signed: true });
    }
}
