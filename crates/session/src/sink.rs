//! Where traced output goes: stdout or the `-o` file, which freopen() can replace by
//! another file (appended to) until an empty freopen() restores it, and where
//! system() commands run, in order with the output around them.

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
}

impl Sink {
    pub fn new(original: Box<dyn Write>, on_stdout: bool) -> Sink {
        Sink { original, file: None, reopened: None, on_stdout }
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
        self.current().write(buf)
    }
    // Whole, as the buffer takes it: a record is one call, not a loop of writes.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.current().write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.current().flush()
    }
}

impl Output for Sink {
    fn system(&mut self, command: &str) -> io::Result<()> {
        self.flush()?;
        let stdout = match (&self.reopened, self.on_stdout) {
            (Some(f), true) => Stdio::from(f.get_ref().try_clone()?),
            _ => Stdio::inherit(),
        };
        // As system(3): the shell's own failures are its business, not udtrace's.
        if let Err(e) = Command::new("/bin/sh").arg("-c").arg(command).stdin(Stdio::inherit()).stdout(stdout).status() {
            note!("failed to run \"{command}\": {}", io_reason(&e));
        }
        Ok(())
    }

    fn ftruncate(&mut self) -> io::Result<()> {
        self.flush()?;
        // As dtrace's ftruncate(fileno(fp), 0): an output that is no regular file
        // (a terminal, a pipe) stays as it is.
        let _ = match (&self.reopened, &self.file) {
            (Some(f), _) => f.get_ref().set_len(0),
            (None, Some(f)) => f.set_len(0),
            (None, None) => stdout_truncate(),
        };
        Ok(())
    }

    fn freopen(&mut self, path: &str) -> Result<(), String> {
        let _ = self.flush();
        if path.is_empty() {
            self.reopened = None;
            return Ok(());
        }
        let file = OpenOptions::new().create(true).append(true).open(path).map_err(|e| io_reason(&e))?;
        self.reopened = Some(BufWriter::with_capacity(BUFFER, file));
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
