//! `strftime_now(format)`, the template function transformers gives chat templates (gpt-oss's
//! harmony template prints "Current date: " with it): the time now, or a fixed time where a
//! rendering must be reproducible, formatted like Python's `datetime.strftime` in UTC.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::{Error, ErrorKind};

/// The clock `strftime_now` reads: the system time, or a fixed one.
#[derive(Debug, Clone, Default)]
pub(crate) struct TemplateClock(Arc<AtomicI64>);

/// The stored value meaning "the system time".
const NOW: i64 = i64::MIN;

impl TemplateClock {
    /// A clock that reads the system time until [`Self::fix`] is called.
    pub(crate) fn system() -> Self {
        Self(Arc::new(AtomicI64::new(NOW)))
    }

    /// Makes the clock read `unix_seconds` (seconds since 1970-01-01T00:00:00Z) from now on.
    pub(crate) fn fix(&self, unix_seconds: i64) {
        self.0.store(unix_seconds.max(NOW + 1), Ordering::Relaxed);
    }

    fn seconds(&self) -> i64 {
        match self.0.load(Ordering::Relaxed) {
            NOW => SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0),
            fixed => fixed,
        }
    }

    /// The template function: this clock's time formatted by `format`.
    pub(crate) fn strftime_now(&self, format: &str) -> Result<String, Error> {
        strftime(format, self.seconds())
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// Year, month (1-12) and day (1-31) of a count of days since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// `unix_seconds` (UTC) formatted by Python's `strftime` directives `%Y %y %m %d %e %H %I %M
/// %S %p %B %b %h %A %a %j %F %T %D %%`; any other directive is an error.
pub(crate) fn strftime(format: &str, unix_seconds: i64) -> Result<String, Error> {
    let days = unix_seconds.div_euclid(86_400);
    let secs = unix_seconds.rem_euclid(86_400);
    let (year, month, day) = civil(days);
    let (hour, minute, second) = (secs / 3600, secs / 60 % 60, secs % 60);
    // 1970-01-01 was a Thursday (index 3 from Monday)
    let weekday = (days + 3).rem_euclid(7) as usize;
    let before = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334][month as usize - 1];
    let yday = before + day + u32::from(month > 2 && is_leap(year));
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let directive = chars.next();
        let piece = match directive {
            Some('Y') => format!("{year:04}"),
            Some('y') => format!("{:02}", year.rem_euclid(100)),
            Some('m') => format!("{month:02}"),
            Some('d') => format!("{day:02}"),
            Some('e') => format!("{day:>2}"),
            Some('H') => format!("{hour:02}"),
            Some('I') => format!("{hour12:02}"),
            Some('M') => format!("{minute:02}"),
            Some('S') => format!("{second:02}"),
            Some('p') => (if hour < 12 { "AM" } else { "PM" }).to_owned(),
            Some('B') => MONTHS[month as usize - 1].to_owned(),
            Some('b' | 'h') => MONTHS[month as usize - 1][..3].to_owned(),
            Some('A') => DAYS[weekday].to_owned(),
            Some('a') => DAYS[weekday][..3].to_owned(),
            Some('j') => format!("{yday:03}"),
            Some('F') => format!("{year:04}-{month:02}-{day:02}"),
            Some('T') => format!("{hour:02}:{minute:02}:{second:02}"),
            Some('D') => format!("{month:02}/{day:02}/{:02}", year.rem_euclid(100)),
            Some('%') => "%".to_owned(),
            other => {
                let shown = other.map(|c| format!("%{c}")).unwrap_or_else(|| "a trailing %".to_owned());
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("strftime_now: unsupported directive {shown}"),
                ));
            }
        };
        out.push_str(&piece);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_python_strftime() {
        // python3 -c "import datetime; print(datetime.datetime(2026,1,15,12,0,0).strftime(...))"
        let t = 1_768_478_400; // 2026-01-15T12:00:00Z
        assert_eq!(strftime("%Y-%m-%d", t).unwrap(), "2026-01-15");
        assert_eq!(
            strftime("%d %B %Y, %A %I:%M:%S %p (%j)", t).unwrap(),
            "15 January 2026, Thursday 12:00:00 PM (015)"
        );
        assert_eq!(strftime("%a %b %e %T %y %%", t).unwrap(), "Thu Jan 15 12:00:00 26 %");
        // a leap day, before the epoch and after 2100
        assert_eq!(strftime("%F %j %A", 951_782_400).unwrap(), "2000-02-29 060 Tuesday");
        assert_eq!(strftime("%F %T", -1).unwrap(), "1969-12-31 23:59:59");
        assert_eq!(strftime("%F %j", 4_107_542_400).unwrap(), "2100-03-01 060");
    }

    #[test]
    fn unknown_directives_are_errors() {
        assert!(strftime("%Q", 0).is_err());
        assert!(strftime("100%", 0).is_err());
    }

    #[test]
    fn a_fixed_clock_reads_its_time() {
        let clock = TemplateClock::system();
        clock.fix(1_768_478_400);
        assert_eq!(clock.strftime_now("%Y-%m-%d").unwrap(), "2026-01-15");
    }
}
