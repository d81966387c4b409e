//! A program driven through its stdin while udtrace traces it with `-p`: the program
//! waits for a line before its counted calls, and udtrace's program prints "ready" in
//! BEGIN, once its probes are armed. Both are killed when dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{ChildStdout, Command, ExitStatus, Stdio};

use super::{bpf_gate, kill_after_deadline, Backend, Guard};

/// A program with stdin and stdout piped.
pub struct Driven {
    child: Guard,
    out: BufReader<ChildStdout>,
}

impl Driven {
    pub fn start(argv: &[&str]) -> Driven {
        let mut child =
            Guard::spawn(Command::new(argv[0]).args(&argv[1..]).stdin(Stdio::piped()).stdout(Stdio::piped()));
        kill_after_deadline(child.child().id());
        let out = BufReader::new(child.child().stdout.take().expect("piped stdout"));
        Driven { child, out }
    }

    pub fn pid(&mut self) -> u32 {
        self.child.child().id()
    }

    /// The next line it prints ("" at its end).
    pub fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).expect("the program's output");
        l
    }

    pub fn send(&mut self, line: &str) {
        self.child.child().stdin.as_mut().expect("stdin").write_all(line.as_bytes()).expect("write to the program");
    }

    /// Closes its stdin and waits for its end: what it printed since, and its status.
    pub fn finish(mut self) -> (String, Option<i32>) {
        drop(self.child.child().stdin.take());
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).expect("the program's output");
        (rest, self.child.take().wait().expect("wait").code())
    }
}

/// udtrace on `backend` with `args`, whose program prints "ready" in BEGIN, started and
/// waited for until it has: its probes are armed.
pub struct Ready {
    child: Guard,
    out: BufReader<ChildStdout>,
}

impl Ready {
    /// `None` when the kernel refuses BPF (the test skips); any other early end fails.
    pub fn start(backend: Backend, args: &[&str]) -> Option<Ready> {
        let mut child = Guard::spawn(&mut backend.command(args));
        kill_after_deadline(child.child().id());
        let mut out = BufReader::new(child.child().stdout.take().expect("piped stdout"));
        let mut ready = String::new();
        out.read_line(&mut ready).expect("udtrace's output");
        if ready.is_empty() {
            let done = child.take().wait_with_output().expect("udtrace ends");
            bpf_gate(&done)?;
            panic!("udtrace ended before BEGIN: {}", String::from_utf8_lossy(&done.stderr));
        }
        assert_eq!(ready, "ready\n");
        Some(Ready { child, out })
    }

    pub fn pid(&mut self) -> u32 {
        self.child.child().id()
    }

    /// Waits for its end: its status, what it printed after "ready", its stderr.
    pub fn finish(mut self) -> (ExitStatus, String, String) {
        let mut text = String::new();
        self.out.read_to_string(&mut text).expect("udtrace's output");
        let o = self.child.take().wait_with_output().expect("udtrace ends");
        (o.status, text, String::from_utf8_lossy(&o.stderr).into_owned())
    }
}
