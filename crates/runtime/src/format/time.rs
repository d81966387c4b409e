//! Wall-clock renderings for `%Y` and `%T`, computed from nanoseconds and a fixed
//! time-zone offset (the crate reads no clock and no zone files).

const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];

/// Broken-down local time.
struct Tm {
    year: i64,
    mon: usize,
    mday: i64,
    wday: usize,
    hour: i64,
    min: i64,
    sec: i64,
}

fn tm(ns: i64, tz_offset_secs: i64) -> Tm {
    // hrtime_t is signed; DTrace divides by NANOSEC truncating toward zero.
    let secs = (ns / 1_000_000_000).saturating_add(tz_offset_secs);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (proleptic Gregorian), days since 1970-01-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let mday = doy - (153 * mp + 2) / 5 + 1;
    let mon = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(mon <= 2);
    Tm {
        year,
        mon: (mon - 1) as usize,
        mday,
        wday: days.rem_euclid(7) as usize,
        hour: rem / 3600,
        min: rem % 3600 / 60,
        sec: rem % 60,
    }
}

/// `%Y`: ctime(3C) rearranged as "2026 Nov 22 07:01:02" (day space-padded to 2).
pub fn ymd_hms(ns: i64, tz_offset_secs: i64) -> String {
    let t = tm(ns, tz_offset_secs);
    format!("{} {} {:>2} {:02}:{:02}:{:02}", t.year, MONTHS[t.mon], t.mday, t.hour, t.min, t.sec)
}

/// `%T`: RFC 822 form "%a, %d %b %G %T %Z".
pub fn rfc822(ns: i64, tz_offset_secs: i64, tz_name: &str) -> String {
    let t = tm(ns, tz_offset_secs);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} {}",
        DAYS[t.wday], t.mday, MONTHS[t.mon], t.year, t.hour, t.min, t.sec, tz_name
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctime_layout() {
        assert_eq!(ymd_hms(0, 0), "1970 Jan  1 00:00:00");
        // 2026-11-22 07:01:02 UTC.
        let ns = 1_795_330_862i64 * 1_000_000_000 + 5;
        assert_eq!(ymd_hms(ns, 0), "2026 Nov 22 07:01:02");
        assert_eq!(ymd_hms(ns, 3600), "2026 Nov 22 08:01:02");
        assert_eq!(ymd_hms(ns, -8 * 3600), "2026 Nov 21 23:01:02");
        assert_eq!(rfc822(0, 0, "UTC"), "Thu, 01 Jan 1970 00:00:00 UTC");
    }
}
