//! The open-file limit: arming one perf event per probe site needs one descriptor each.

use std::io;

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the new soft limit.
pub fn raise_nofile() -> io::Result<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `r` is a valid rlimit for the kernel to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } < 0 {
        return Err(io::Error::last_os_error());
    }
    if r.rlim_cur < r.rlim_max {
        r.rlim_cur = r.rlim_max;
        // SAFETY: `r` is a valid rlimit, read above, with cur <= max.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(r.rlim_cur)
}
