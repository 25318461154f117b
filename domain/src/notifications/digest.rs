//! When a member's digest is due (decisions §10): at 08:00 in the member's own time zone,
//! daily, or on Mondays for weekly, at most once per local day (week). The period's key
//! (`daily:2026-11-03`, `weekly:2026-11-02`) is what makes it once: the scheduler queues one
//! job per key and the job records the key it sent.

use chrono::{DateTime, Datelike, Duration, NaiveDate, Timelike, Utc, Weekday};
use chrono_tz::Tz;

/// The local hour digests are sent at.
pub const HOUR: u32 = 8;
/// Hours after 08:00 in which a digest not yet sent still goes (a scheduler that was down at
/// 08:00 catches up); later that day it waits for the next period, so nobody gets a morning
/// digest in the evening (nor the moment they first turn digests on in the afternoon).
pub const CATCH_UP_HOURS: u32 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frequency {
    Off,
    Daily,
    Weekly,
}

impl Frequency {
    pub fn as_str(self) -> &'static str {
        match self {
            Frequency::Off => "off",
            Frequency::Daily => "daily",
            Frequency::Weekly => "weekly",
        }
    }

    pub fn parse(text: &str) -> Option<Frequency> {
        match text {
            "off" => Some(Frequency::Off),
            "daily" => Some(Frequency::Daily),
            "weekly" => Some(Frequency::Weekly),
            _ => None,
        }
    }

    /// How far back a first digest looks.
    pub fn period(self) -> Duration {
        match self {
            Frequency::Weekly => Duration::days(7),
            _ => Duration::days(1),
        }
    }
}

/// A member's time zone; an unreadable one is UTC (the profile refuses those).
pub fn zone(name: &str) -> Tz {
    name.parse().unwrap_or(Tz::UTC)
}

/// The key of the digest due at `now` for a member in `zone`, or `None` when none is: the
/// local clock is between 08:00 and 12:00 (on a Monday, for weekly). Every instant of that
/// window gives the same key, so a scheduler that was down at 08:00 still sends that day's,
/// once.
pub fn due(frequency: Frequency, zone: Tz, now: DateTime<Utc>) -> Option<String> {
    let local = now.with_timezone(&zone);
    if !(HOUR..HOUR + CATCH_UP_HOURS).contains(&local.hour()) {
        return None;
    }
    let day: NaiveDate = local.date_naive();
    match frequency {
        Frequency::Off => None,
        Frequency::Daily => Some(format!("daily:{day}")),
        Frequency::Weekly => (day.weekday() == Weekday::Mon).then(|| format!("weekly:{day}")),
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn utc(y: i32, m: u32, d: u32, h: u32, min: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, h, min, 0)
            .single()
            .expect("valid")
    }

    #[test]
    fn a_daily_digest_is_due_from_eight_local_time() {
        let tokyo = zone("Asia/Tokyo");
        // 2026-11-02 22:59 UTC is 07:59 on Tuesday 3 November in Tokyo.
        assert_eq!(due(Frequency::Daily, tokyo, utc(2026, 11, 2, 22, 59)), None);
        assert_eq!(
            due(Frequency::Daily, tokyo, utc(2026, 11, 2, 23, 0)).as_deref(),
            Some("daily:2026-11-03")
        );
        assert_eq!(
            due(Frequency::Daily, tokyo, utc(2026, 11, 3, 2, 59)).as_deref(),
            Some("daily:2026-11-03"),
            "11:59 catches up the same digest"
        );
        assert_eq!(
            due(Frequency::Daily, tokyo, utc(2026, 11, 3, 3, 0)),
            None,
            "not in the afternoon or evening"
        );
        let new_york = zone("America/New_York");
        // 8:00 EST is 13:00 UTC.
        assert_eq!(
            due(Frequency::Daily, new_york, utc(2026, 11, 3, 12, 59)),
            None
        );
        assert_eq!(
            due(Frequency::Daily, new_york, utc(2026, 11, 3, 13, 0)).as_deref(),
            Some("daily:2026-11-03")
        );
    }

    #[test]
    fn a_weekly_digest_is_due_only_on_a_local_monday() {
        let tokyo = zone("Asia/Tokyo");
        // Sunday 1 November 23:00 UTC is Monday 2 November 08:00 in Tokyo.
        assert_eq!(
            due(Frequency::Weekly, tokyo, utc(2026, 11, 1, 23, 0)).as_deref(),
            Some("weekly:2026-11-02")
        );
        assert_eq!(
            due(Frequency::Weekly, tokyo, utc(2026, 11, 2, 23, 0)),
            None,
            "Tuesday"
        );
        let new_york = zone("America/New_York");
        assert_eq!(
            due(Frequency::Weekly, new_york, utc(2026, 11, 2, 13, 0)).as_deref(),
            Some("weekly:2026-11-02")
        );
        assert_eq!(due(Frequency::Off, new_york, utc(2026, 11, 2, 13, 0)), None);
    }

    #[test]
    fn daylight_saving_moves_the_utc_hour_not_the_local_one() {
        let new_york = zone("America/New_York");
        // In summer (EDT) 08:00 is 12:00 UTC.
        assert_eq!(
            due(Frequency::Daily, new_york, utc(2026, 7, 1, 11, 59)),
            None
        );
        assert!(due(Frequency::Daily, new_york, utc(2026, 7, 1, 12, 0)).is_some());
        assert_eq!(zone("Not/AZone"), Tz::UTC);
        assert_eq!(Frequency::parse("weekly"), Some(Frequency::Weekly));
        assert_eq!(Frequency::parse("hourly"), None);
    }
}
