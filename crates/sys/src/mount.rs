//! Mounting tracefs where the machine has not (fresh machines do not).

use std::ffi::CStr;
use std::io;

pub fn mount_tracefs(target: &CStr) -> io::Result<()> {
    // SAFETY: all pointers are NUL-terminated strings alive across the call; no data.
    let r = unsafe { libc::mount(c"nodev".as_ptr(), target.as_ptr(), c"tracefs".as_ptr(), 0, std::ptr::null()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
