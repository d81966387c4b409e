//! Sessions asking each other for probe sites (docs/pid-provider.md, "Several
//! sessions on one process").
//!
//! A process has one ptrace tracer. A second session probes it with uprobes, and a
//! uprobe must not go where the first session patched a jump in (the kernel would run
//! the file's instruction over the jump). So the second asks the first to give those
//! sites up: the first stops the processes that carry them, puts the original bytes
//! back, probes the sites with its own uprobes, and answers; the second then arms its
//! uprobes there too (uprobes at one place share it).
//!
//! The first session listens on a Unix socket in the abstract namespace named after its
//! pid ([`socket_name`]): nothing on disk to clean up after a SIGKILL, and the name is
//! found from the process's `TracerPid`. One request per connection, one line each way:
//!
//! ```text
//!   H pid:addr pid:addr ...    give up the patches covering these addresses
//!   OK                         done: the original bytes are back
//!   NO reason                  not done, and why
//! ```
//!
//! Only a peer of the listener's user, or root, is heard.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// How long a request line may take to arrive once connected: the asker writes it at
/// once, and the session's loop waits meanwhile.
const READ_TIMEOUT: Duration = Duration::from_millis(100);

/// The longest request heard (sites of many processes).
const MAX_REQUEST: u64 = 1 << 20;

/// The abstract socket name of the session whose pid is `pid`.
pub fn socket_name(pid: u32) -> String {
    format!("udtrace-handoff.{pid}")
}

/// The request line for `sites`, (process, address of the site's instruction).
pub fn format_request(sites: &[(i32, u64)]) -> String {
    let mut s = String::from("H");
    for (pid, addr) in sites {
        s.push_str(&format!(" {pid}:{addr:x}"));
    }
    s.push('\n');
    s
}

/// The sites a request line asks for; `None` if it is not one.
pub fn parse_request(line: &str) -> Option<Vec<(i32, u64)>> {
    let mut words = line.split_whitespace();
    if words.next()? != "H" {
        return None;
    }
    words
        .map(|w| {
            let (pid, addr) = w.split_once(':')?;
            Some((pid.parse().ok().filter(|&p: &i32| p > 0)?, u64::from_str_radix(addr, 16).ok()?))
        })
        .collect()
}

/// The answer line: `Ok` or why not.
pub fn parse_answer(line: &str) -> Result<(), String> {
    match line.trim_end() {
        "OK" => Ok(()),
        l => Err(l.strip_prefix("NO ").unwrap_or("no answer").to_string()),
    }
}

/// Why [`ask`] got no site.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// Nothing listens under the tracer's name: it is no udtrace that patches.
    #[error("it does not listen ({0})")]
    NotListening(io::Error),
    /// A session listens, and kept the sites (or did not answer).
    #[error("{0}")]
    Kept(String),
}

/// The first session's side: requests heard and not yet answered.
pub struct Server {
    listener: UnixListener,
    pending: Vec<UnixStream>,
}

impl Server {
    /// Listens under this process's name.
    pub fn listen() -> io::Result<Server> {
        let addr = SocketAddr::from_abstract_name(socket_name(std::process::id()))?;
        let listener = UnixListener::bind_addr(&addr)?;
        listener.set_nonblocking(true)?;
        Ok(Server { listener, pending: Vec::new() })
    }

    /// Readable when someone connects.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }

    /// The sites asked for since the last look. Their askers wait for [`Server::answer`];
    /// a malformed request, or one from another user, is answered at once.
    pub fn take(&mut self) -> Vec<(i32, u64)> {
        let mut sites = Vec::new();
        // Polled first: an accept with none pending still makes and frees a socket
        // (an inode, RCU work), and this runs at every drain, 100 times a second.
        let pending = |l: &UnixListener| {
            let mut fds = [PollFd::new(l.as_fd(), PollFlags::POLLIN)];
            poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
        };
        while pending(&self.listener) {
            let Ok((mut stream, _)) = self.listener.accept() else { break };
            match read_request(&stream) {
                Ok(mut s) => {
                    sites.append(&mut s);
                    self.pending.push(stream);
                }
                Err(why) => {
                    let _ = stream.write_all(format!("NO {why}\n").as_bytes());
                }
            }
        }
        sites
    }

    /// Whether a request waits for its answer.
    pub fn waiting(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Answers every request waiting.
    pub fn answer(&mut self, outcome: &Result<(), String>) {
        let line = match outcome {
            Ok(()) => "OK\n".to_string(),
            Err(why) => format!("NO {}\n", why.replace('\n', " ")),
        };
        for mut s in self.pending.drain(..) {
            let _ = s.write_all(line.as_bytes());
        }
    }
}

/// One request from `stream`, if its peer may ask.
fn read_request(stream: &UnixStream) -> Result<Vec<(i32, u64)>, String> {
    let cred = nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| format!("cannot tell who asks: {e}"))?;
    let me = nix::unistd::geteuid().as_raw();
    if cred.uid() != 0 && cred.uid() != me {
        return Err(format!("user {} may not ask a session of user {me}", cred.uid()));
    }
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(READ_TIMEOUT)).map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(stream.take(MAX_REQUEST))
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the request: {e}"))?;
    parse_request(&line).ok_or_else(|| "not a request".to_string())
}

/// Asks the session `tracer` to give up its patches at `sites`; waits up to `timeout`
/// for its answer.
pub fn ask(tracer: i32, sites: &[(i32, u64)], timeout: Duration) -> Result<(), AskError> {
    let addr = SocketAddr::from_abstract_name(socket_name(tracer as u32)).map_err(AskError::NotListening)?;
    let mut stream = UnixStream::connect_addr(&addr).map_err(AskError::NotListening)?;
    let kept = |what: &str, e: io::Error| AskError::Kept(format!("{what}: {e}"));
    stream.set_read_timeout(Some(timeout)).map_err(|e| kept("cannot wait for it", e))?;
    stream.write_all(format_request(sites).as_bytes()).map_err(|e| kept("cannot ask it", e))?;
    let mut line = String::new();
    BufReader::new(stream.take(4096)).read_line(&mut line).map_err(|e| kept("it did not answer", e))?;
    parse_answer(&line).map_err(AskError::Kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_bad_ones_are_refused() {
        let sites = vec![(12, 0x7f00_1000), (4321, 0x5555_0000_0abc)];
        assert_eq!(format_request(&sites), "H 12:7f001000 4321:555500000abc\n");
        assert_eq!(parse_request(&format_request(&sites)), Some(sites));
        assert_eq!(parse_request("H\n"), Some(vec![]));
        for bad in ["", "X 1:2", "H 1", "H -1:10", "H 1:zz", "H 0:10"] {
            assert_eq!(parse_request(bad), None, "{bad:?}");
        }
        assert_eq!(parse_answer("OK\n"), Ok(()));
        assert_eq!(parse_answer("NO it runs without BPF\n"), Err("it runs without BPF".into()));
        assert_eq!(parse_answer(""), Err("no answer".into()));
    }

    #[test]
    fn a_request_reaches_the_listener_and_its_answer_comes_back() {
        let mut server = Server::listen().expect("listen");
        let asker = std::thread::spawn(|| ask(std::process::id() as i32, &[(7, 0x1234)], Duration::from_secs(10)));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        while got.is_empty() && std::time::Instant::now() < deadline {
            got = server.take();
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(got, vec![(7, 0x1234)]);
        server.answer(&Err("busy".into()));
        assert!(matches!(asker.join().expect("join"), Err(AskError::Kept(why)) if why == "busy"));
    }
}
