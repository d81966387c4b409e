//! Local time as the C library computes it (the TZ variable, the zone files and
//! their rules), for printing wall-clock times as dtrace does.

use std::ffi::CStr;

extern "C" {
    /// POSIX tzset(3), which the libc crate does not declare.
    fn tzset();
}

/// A broken-down local time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalTime {
    pub year: i64,
    /// 0 = January.
    pub mon: u32,
    pub mday: u32,
    /// 0 = Sunday.
    pub wday: u32,
    pub hour: u32,
    pub min: u32,
    pub sec: u32,
    /// The zone's abbreviation at that time (`PST`, `CEST`, `UTC`).
    pub zone: String,
}

/// `localtime_r(3)` of seconds since the epoch; `None` if the C library cannot
/// represent it.
pub fn localtime(secs: i64) -> Option<LocalTime> {
    let t: libc::time_t = secs;
    // SAFETY: tzset() reads the environment and the zone files into libc's state;
    // udtrace does not change TZ while running.
    unsafe { tzset() };
    // SAFETY: an all-zero tm is a valid value for localtime_r to overwrite.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers refer to live locals of the right types.
    let r = unsafe { libc::localtime_r(&t, &mut tm) };
    if r.is_null() {
        return None;
    }
    let zone = if tm.tm_zone.is_null() {
        String::new()
    } else {
        // SAFETY: tm_zone points to a NUL-terminated abbreviation in libc's static
        // zone data, which outlives this call.
        unsafe { CStr::from_ptr(tm.tm_zone) }.to_string_lossy().into_owned()
    };
    Some(LocalTime {
        year: i64::from(tm.tm_year) + 1900,
        mon: tm.tm_mon as u32,
        mday: tm.tm_mday as u32,
        wday: tm.tm_wday as u32,
        hour: tm.tm_hour as u32,
        min: tm.tm_min as u32,
        sec: tm.tm_sec as u32,
        zone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_is_1970() {
        let t = localtime(0).unwrap();
        // Whatever the zone, the epoch falls on Dec 31 1969 or Jan 1 1970.
        assert!(matches!((t.year, t.mon), (1970, 0) | (1969, 11)));
    }
}
