//! Wall-clock renderings for `%Y` and `%T`, from nanoseconds, in local time as the
//! caller's zone function gives it (the crate reads no clock and no zone files), or
//! at a fixed offset from UTC.

const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];

/// Broken-down local time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tm {
    pub year: i64,
    /// 0 = January.
    pub mon: usize,
    pub mday: i64,
    /// 0 = Thursday (the epoch's weekday).
    pub wday: usize,
    pub hour: i64,
    pub min: i64,
    pub sec: i64,
    /// The zone's abbreviation then.
    pub zone: String,
}

/// Local time of seconds since the epoch, as the C library's localtime() gives it.
pub type LocalTime = fn(i64) -> Option<Tm>;

/// Where `%Y` and `%T` take their local time from.
#[derive(Debug, Clone, Copy)]
pub struct Zone<'a> {
    /// The system's rules (TZ and the zone files), when the caller has them.
    pub local: Option<LocalTime>,
    /// Otherwise a fixed offset from UTC, with its name.
    pub offset_secs: i64,
    pub name: &'a str,
}

impl Zone<'_> {
    /// The broken-down time of `ns` (hrtime_t is signed; DTrace divides by NANOSEC
    /// truncating toward zero).
    fn tm(&self, ns: i64) -> Tm {
        let secs = ns / 1_000_000_000;
        self.local.and_then(|f| f(secs)).unwrap_or_else(|| {
            let mut t = tm(ns, self.offset_secs);
            t.zone = self.name.to_string();
            t
        })
    }
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
        zone: String::new(),
    }
}

/// `%Y`: ctime(3C) rearranged as "2026 Nov 22 07:01:02" (day space-padded to 2).
pub fn ymd_hms(ns: i64, zone: &Zone<'_>) -> String {
    let t = zone.tm(ns);
    format!("{} {} {:>2} {:02}:{:02}:{:02}", t.year, MONTHS[t.mon % 12], t.mday, t.hour, t.min, t.sec)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (month 1-12).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// strftime's `%G`: the ISO 8601 week-based year, the year of the Thursday of the
/// date's week (so Dec 31, 1969, a Wednesday, is in 1970).
fn iso_year(t: &Tm) -> i64 {
    let days = days_from_civil(t.year, t.mon as i64 + 1, t.mday);
    // Days since the epoch's Thursday: 0 = Thursday; Monday starts a week.
    let from_monday = (days + 3).rem_euclid(7);
    let thursday = days - from_monday + 3;
    tm(thursday * 86_400 * 1_000_000_000, 0).year
}

/// `%T`: RFC 822 form, strftime's "%a, %d %b %G %T %Z" (with %G's week-based year).
pub fn rfc822(ns: i64, zone: &Zone<'_>) -> String {
    let t = zone.tm(ns);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} {}",
        DAYS[t.wday % 7],
        t.mday,
        MONTHS[t.mon % 12],
        iso_year(&t),
        t.hour,
        t.min,
        t.sec,
        t.zone
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(offset_secs: i64) -> Zone<'static> {
        Zone { local: None, offset_secs, name: "UTC" }
    }

    #[test]
    fn ctime_layout() {
        assert_eq!(ymd_hms(0, &fixed(0)), "1970 Jan  1 00:00:00");
        // 2026-11-22 07:01:02 UTC.
        let ns = 1_795_330_862i64 * 1_000_000_000 + 5;
        assert_eq!(ymd_hms(ns, &fixed(0)), "2026 Nov 22 07:01:02");
        assert_eq!(ymd_hms(ns, &fixed(3600)), "2026 Nov 22 08:01:02");
        assert_eq!(ymd_hms(ns, &fixed(-8 * 3600)), "2026 Nov 21 23:01:02");
        assert_eq!(rfc822(0, &fixed(0)), "Thu, 01 Jan 1970 00:00:00 UTC");
    }

    #[test]
    fn local_time_from_the_zone_function() {
        fn pacific(secs: i64) -> Option<Tm> {
            let mut t = tm(secs * 1_000_000_000, -8 * 3600);
            t.zone = "PST".into();
            Some(t)
        }
        let z = Zone { local: Some(pacific), offset_secs: 0, name: "UTC" };
        // %G: the ISO week-based year, 1970 for Wednesday, Dec 31, 1969.
        assert_eq!(rfc822(0, &z), "Wed, 31 Dec 1970 16:00:00 PST");
        assert_eq!(ymd_hms(0, &z), "1969 Dec 31 16:00:00");
        // Sunday, Jan 3, 2010 belongs to 2009's last week.
        assert_eq!(rfc822(1_262_520_000 * 1_000_000_000, &fixed(0)), "Sun, 03 Jan 2009 12:00:00 UTC");
    }
}
