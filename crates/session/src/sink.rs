//! Where traced output goes: stdout or the `-o` file, which freopen() can replace by
//! another file (appended to) until an empty freopen() restores it, and where
//! system() commands run, in order with the output around them.
//!
//! With `pid*`/`provider*` probes the session runs system() commands itself, held at
//! each new image until its probes are armed ([`Sink::hold_commands`]): system() then
//! queues the command, and what is written after it waits in memory until it has ended,
//! so the output reads as if system() had waited.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::process::{Command, Stdio};

use udtrace_messages::note;
use udtrace_runtime::Output;

use crate::compile::io_reason;

/// Bytes of output gathered before a write: output goes out when a drain ends (or
/// fills this), in writes of this size, not a record or a line at a time.
pub const BUFFER: usize = 64 << 10;

pub struct Sink {
    original: Box<dyn Write>,
    /// The `-o` file, for ftruncate().
    file: Option<File>,
    /// The file freopen() named, while it replaces the original output.
    reopened: Option<BufWriter<File>>,
    /// The original output is stdout (no `-o`): a freopen() then replaces stdout
    /// itself, so system() commands write to the new file too, as dtrace's do.
    on_stdout: bool,
    /// Commands the session runs, and what was written after them: `None` when
    /// system() runs its command in line.
    queue: Option<VecDeque<Queued>>,
    /// The queued command running now.
    running: Option<i32>,
}

/// What waits behind a queued command.
enum Queued {
    Bytes(Vec<u8>),
    Command(String),
    /// freopen(): the file opened at the call (or none: back to the original output).
    Reopen(Option<BufWriter<File>>),
    Truncate,
}

impl Sink {
    pub fn new(original: Box<dyn Write>, on_stdout: bool) -> Sink {
        Sink { original, file: None, reopened: None, on_stdout, queue: None, running: None }
    }

    /// From now on system() queues its command for the session to run
    /// ([`Sink::next_command`]).
    pub fn hold_commands(&mut self) {
        self.queue.get_or_insert_with(VecDeque::new);
    }

    /// Whether output waits for a command.
    fn deferred(&self) -> bool {
        self.running.is_some() || self.queue.as_ref().is_some_and(|q| !q.is_empty())
    }

    /// A queued command, running or not yet started.
    pub fn commands_pending(&self) -> bool {
        self.deferred()
    }

    /// Writes out what waited, up to the next queued command, which it returns with
    /// the file its output goes to (`None`: udtrace's stdout), unless a command runs.
    pub fn next_command(&mut self) -> io::Result<Option<(String, Option<File>)>> {
        if self.running.is_some() {
            return Ok(None);
        }
        while let Some(q) = self.queue.as_mut().and_then(VecDeque::pop_front) {
            match q {
                Queued::Bytes(b) => self.current().write_all(&b)?,
                Queued::Reopen(f) => {
                    self.current().flush()?;
                    self.reopened = f;
                }
                Queued::Truncate => self.truncate()?,
                Queued::Command(c) => {
                    self.current().flush()?;
                    return Ok(Some((c, self.commands_stdout()?)));
                }
            }
        }
        self.current().flush()?;
        Ok(None)
    }

    /// Where a command's output goes: the file freopen() made stdout (`None`: udtrace's
    /// own stdout, inherited).
    fn commands_stdout(&self) -> io::Result<Option<File>> {
        match (&self.reopened, self.on_stdout) {
            (Some(f), true) => f.get_ref().try_clone().map(Some),
            _ => Ok(None),
        }
    }

    /// The command [`Sink::next_command`] gave runs as process `pid`.
    pub fn command_started(&mut self, pid: i32) {
        self.running = Some(pid);
    }

    /// Process `pid` ended: if it is the running command, what follows it may go on.
    pub fn ended(&mut self, pid: i32) {
        if self.running == Some(pid) {
            self.running = None;
        }
    }

    /// Tracing ends before the queued commands have run (an interrupt): they are not
    /// run, what waited behind them is written out.
    pub fn drop_commands(&mut self) -> io::Result<()> {
        self.running = None;
        if let Some(q) = self.queue.as_mut() {
            q.retain(|q| !matches!(q, Queued::Command(_)));
        }
        self.next_command().map(|_| ())
    }

    fn push(&mut self, q: Queued) {
        if let Some(queue) = self.queue.as_mut() {
            queue.push_back(q);
        }
    }

    /// Output to the `-o` file: ftruncate() empties it.
    pub fn to_file(file: File) -> io::Result<Sink> {
        let handle = file.try_clone()?;
        let mut sink = Sink::new(Box::new(BufWriter::with_capacity(BUFFER, file)), false);
        sink.file = Some(handle);
        Ok(sink)
    }

    fn current(&mut self) -> &mut dyn Write {
        match self.reopened.as_mut() {
            Some(f) => f,
            None => self.original.as_mut(),
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf).map(|()| buf.len())
    }
    // Whole, as the buffer takes it: a record is one call, not a loop of writes.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if !self.deferred() {
            return self.current().write_all(buf);
        }
        match self.queue.as_mut().and_then(|q| q.back_mut()) {
            Some(Queued::Bytes(b)) => b.extend_from_slice(buf),
            _ => self.push(Queued::Bytes(buf.to_vec())),
        }
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        if self.deferred() {
            return Ok(());
        }
        self.current().flush()
    }
}

impl Output for Sink {
    fn system(&mut self, command: &str) -> io::Result<()> {
        self.flush()?;
        if self.queue.is_some() {
            self.push(Queued::Command(command.to_string()));
            return Ok(());
        }
        let stdout = self.commands_stdout()?.map_or_else(Stdio::inherit, Stdio::from);
        // As system(3): the shell's own failures are its business, not udtrace's.
        if let Err(e) = Command::new("/bin/sh").arg("-c").arg(command).stdin(Stdio::inherit()).stdout(stdout).status() {
            note!("failed to run \"{command}\": {}", io_reason(&e));
        }
        Ok(())
    }

    fn ftruncate(&mut self) -> io::Result<()> {
        if self.deferred() {
            self.push(Queued::Truncate);
            return Ok(());
        }
        self.truncate()
    }

    fn freopen(&mut self, path: &str) -> Result<(), String> {
        if self.deferred() {
            let file = match path.is_empty() {
                true => None,
                false => Some(self.open_appended(path)?),
            };
            self.push(Queued::Reopen(file));
            return Ok(());
        }
        let _ = self.flush();
        if path.is_empty() {
            self.reopened = None;
            return Ok(());
        }
        self.reopened = Some(self.open_appended(path)?);
        Ok(())
    }
}

impl Sink {
    fn open_appended(&self, path: &str) -> Result<BufWriter<File>, String> {
        let file = OpenOptions::new().create(true).append(true).open(path).map_err(|e| io_reason(&e))?;
        Ok(BufWriter::with_capacity(BUFFER, file))
    }

    fn truncate(&mut self) -> io::Result<()> {
        self.current().flush()?;
        // As dtrace's ftruncate(fileno(fp), 0): an output that is no regular file
        // (a terminal, a pipe) stays as it is.
        let _ = match (&self.reopened, &self.file) {
            (Some(f), _) => f.get_ref().set_len(0),
            (None, Some(f)) => f.set_len(0),
            (None, None) => stdout_truncate(),
        };
        Ok(())
    }
}

/// Empties stdout when it is a regular file, and rewinds it (it need not have been
/// opened for appending).
fn stdout_truncate() -> io::Result<()> {
    use std::os::fd::{AsFd, AsRawFd};
    let out = io::stdout();
    nix::unistd::ftruncate(out.as_fd(), 0)?;
    nix::unistd::lseek(out.as_raw_fd(), 0, nix::unistd::Whence::SeekSet)?;
    Ok(())
}
