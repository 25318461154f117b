//! Whether a job's maintenance window is open (a job whose `reboot` is `in_window` reboots only
//! inside it). The window is RFC 5545 RRULE text with an IANA time zone and a duration, as the
//! service sends it; a rule without `DTSTART` is read from midnight, a year ago, in its time
//! zone (the service counts such a rule from its policy's creation, which the job does not
//! carry: rules whose openings depend on that, like `INTERVAL=2`, may be placed differently,
//! and the agent then errs on the side of not rebooting).

use chrono::{DateTime, Duration, TimeZone as _, Utc};
use protocol::wire::JobWindow;

/// Whether `window` is open at `now`; `false` when it cannot be read.
pub fn is_open(window: &JobWindow, now: DateTime<Utc>) -> bool {
    match opening_before(window, now) {
        Ok(Some(start)) => now < start + Duration::minutes(i64::from(window.duration_minutes)),
        Ok(None) => false,
        Err(err) => {
            tracing::warn!("the job's window cannot be read ({err}): not rebooting");
            false
        }
    }
}

fn opening_before(window: &JobWindow, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>, String> {
    let zone: chrono_tz::Tz = window
        .time_zone
        .parse()
        .map_err(|_| format!("unknown time zone {}", window.time_zone))?;
    let text = window.rrule.trim();
    let has_start = text
        .lines()
        .any(|l| l.trim().to_ascii_uppercase().starts_with("DTSTART"));
    let rule = if text.to_ascii_uppercase().contains("RRULE:") {
        text.to_owned()
    } else {
        format!("RRULE:{text}")
    };
    let full = if has_start {
        rule
    } else {
        let year_ago = (now - Duration::days(366))
            .with_timezone(&zone)
            .date_naive();
        let midnight = zone
            .from_local_datetime(&year_ago.and_hms_opt(0, 0, 0).ok_or("no midnight")?)
            .earliest()
            .ok_or("no midnight in the time zone")?;
        format!(
            "DTSTART;TZID={}:{}\n{rule}",
            window.time_zone,
            midnight.format("%Y%m%dT%H%M%S")
        )
    };
    let set: rrule::RRuleSet = full.parse().map_err(|e| format!("{e}"))?;
    let lookback =
        now - Duration::minutes(i64::from(window.duration_minutes)) - Duration::seconds(1);
    let after = lookback.with_timezone(&rrule::Tz::UTC);
    let before = now.with_timezone(&rrule::Tz::UTC);
    let found = set.after(after).before(before).all(1000);
    Ok(found.dates.last().map(|d| d.with_timezone(&Utc)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn window(rrule: &str) -> JobWindow {
        JobWindow {
            rrule: rrule.to_owned(),
            duration_minutes: 240,
            time_zone: "Europe/Berlin".to_owned(),
        }
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn a_weekly_window_is_open_only_inside_its_hours() {
        let saturday = window("FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0;BYSECOND=0");
        // 2026-11-28 is a Saturday; 02:00 Berlin is 01:00 UTC.
        assert!(is_open(&saturday, at("2026-11-28T01:30:00Z")));
        assert!(is_open(&saturday, at("2026-11-28T04:59:00Z")));
        assert!(!is_open(&saturday, at("2026-11-28T05:01:00Z")));
        assert!(!is_open(&saturday, at("2026-11-27T01:30:00Z")));
        assert!(!is_open(&saturday, at("2026-11-28T00:59:00Z")));
    }

    #[test]
    fn rules_with_a_start_and_bad_rules() {
        let daily = window("DTSTART;TZID=Europe/Berlin:20260101T220000\nRRULE:FREQ=DAILY");
        assert!(is_open(&daily, at("2026-11-27T21:30:00Z")));
        assert!(!is_open(&daily, at("2026-11-27T12:00:00Z")));
        assert!(!is_open(&window("FREQ=NEVER"), at("2026-11-27T12:00:00Z")));
        let mut zone = window("FREQ=DAILY");
        zone.time_zone = "Mars/Olympus".into();
        assert!(!is_open(&zone, at("2026-11-27T12:00:00Z")));
    }
}
