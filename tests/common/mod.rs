//! Shared helpers for the end-to-end tests: run the udtrace binary with a time
//! limit, capture what it prints, and write scripts to temporary files.

#![allow(dead_code)]

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// No test may hang: a run that takes longer than this is killed and fails.
pub const TIME_LIMIT: Duration = Duration::from_secs(20);

/// The column header of the default output.
pub const HEADER: &str = "CPU     ID                    FUNCTION:NAME\n";

/// What one udtrace run printed, and how it ended.
#[derive(Debug)]
pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
    pub elapsed: Duration,
}

impl Run {
    /// Asserts a clean successful run (status 0, nothing on stderr); returns stdout.
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "exit status; stderr: {}", self.stderr);
        assert_eq!(self.stderr, "", "stderr");
        &self.stdout
    }

    /// The first line of stderr (compile errors add a source snippet after it).
    pub fn first_error_line(&self) -> &str {
        self.stderr.lines().next().unwrap_or("")
    }
}

/// Runs udtrace with `args` and extra environment variables.
pub fn udtrace_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    let start = Instant::now();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_udtrace"));
    cmd.args(args).envs(env.iter().copied()).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // udtrace, as dtrace, leaves a signal alone that it was started ignoring (`nohup
    // udtrace …`): the tests' own signals must not depend on how the tests were run.
    // SAFETY: runs in the child between fork and exec; signal(2) is async-signal-safe
    // and touches no memory of the parent's.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("start udtrace");
    // Drain both pipes on their own threads so a full pipe cannot stall the child.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for udtrace") {
            break st;
        }
        if start.elapsed() > TIME_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("udtrace {args:?} did not finish within {TIME_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = start.elapsed();
    let stdout = String::from_utf8(out_t.join().unwrap()).expect("stdout is UTF-8");
    let stderr = String::from_utf8(err_t.join().unwrap()).expect("stderr is UTF-8");
    // A signal death has no code; report it as -1 so it can never pass as success.
    Run { stdout, stderr, code: status.code().unwrap_or(-1), elapsed }
}

pub fn udtrace(args: &[&str]) -> Run {
    udtrace_env(args, &[])
}

/// Runs a `-q -n` program that must succeed silently on stderr; returns stdout.
pub fn quiet(program: &str) -> String {
    let r = udtrace(&["-q", "-n", program]);
    r.ok();
    r.stdout
}

/// A fresh private directory for one test's files.
pub fn temp_dir() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d =
        std::env::temp_dir().join(format!("udtrace-tests-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create temp dir");
    d
}

/// Writes `text` to `name` in a fresh temporary directory; returns its path.
pub fn write_temp(name: &str, text: &str) -> PathBuf {
    let p = temp_dir().join(name);
    std::fs::write(&p, text).expect("write temp file");
    p
}

/// Runs a script file (`-s`) with extra arguments before it.
pub fn run_script(flags: &[&str], text: &str) -> Run {
    let p = write_temp("prog.d", text);
    let mut args: Vec<&str> = flags.to_vec();
    let path = p.to_str().unwrap().to_string();
    args.push("-s");
    args.push(&path);
    udtrace(&args)
}

/// Splits a default-mode record line into its CPU number and the rest of the line:
/// the CPU is the one column that depends on the machine ("%3d ").
pub fn split_cpu(line: &str) -> (u32, &str) {
    assert!(line.len() > 3, "record line too short: {line:?}");
    let cpu = line[..3].trim_start().parse().unwrap_or_else(|_| panic!("no CPU column in {line:?}"));
    (cpu, &line[3..])
}

/// The number of CPUs configured on the machine, which every printed CPU id must
/// be below.
pub fn ncpus() -> u32 {
    // SAFETY: sysconf only reads a system parameter.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    u32::try_from(n).unwrap_or(1).max(1)
}
