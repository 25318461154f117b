//! Maintenance windows: when a policy lets updates run.
//!
//! A policy's window is an RFC 5545 `RRULE` (when the window opens), a duration in minutes (how
//! long it stays open) and an IANA time zone (the wall clock the rule is read on). [`Window::parse`]
//! turns a [`WindowSpec`] into a [`Window`]; the rest of the API answers "is it open now?", "until
//! when?" and "when does it open next?".
//!
//! # The rule text
//!
//! [`WindowSpec::rrule`] holds one `RRULE` and at most one `DTSTART`, one per line:
//!
//! * a bare rule: `FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0`;
//! * the same with its property name: `RRULE:FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0`;
//! * a `DTSTART` line plus an `RRULE:` line:
//!   `DTSTART;TZID=Europe/Berlin:20270105T220000` / `RRULE:FREQ=WEEKLY;INTERVAL=2`.
//!
//! Other properties (`RDATE`, `EXDATE`, `EXRULE`, ...) are refused rather than half-honoured.
//!
//! Without `DTSTART` the rule counts from the policy's creation instant, truncated to the whole
//! minute and read in [`WindowSpec::time_zone`]. That start also supplies what the rule leaves
//! out, as RFC 5545 says: `FREQ=DAILY` alone opens every day at the creation's local hour and
//! minute, and a rule without `BYSECOND` opens at second 0.
//!
//! An explicit `DTSTART` may be floating (`DTSTART:20270105T220000`, read in `time_zone`), carry
//! `TZID=` naming the same zone as `time_zone` (any other zone is refused: the window has one
//! wall clock), or be UTC (`...Z`), in which case that instant is read on `time_zone`'s wall clock.
//! A floating or `TZID` start that falls in a daylight-saving gap is refused; one that falls in
//! a repeated hour means its earlier instant.
//!
//! # Time zones and daylight saving
//!
//! Occurrences are expanded by the `rrule` crate on `time_zone`'s wall clock (chrono-tz data),
//! so "every day at 02:30 Europe/Berlin" opens at 02:30 local in winter (01:30Z) and in summer
//! (00:30Z). On the two days a year where that wall-clock time is not a single instant, this
//! module follows `rrule`:
//!
//! * **Spring forward** (the time does not exist): the occurrence is local midnight plus the
//!   time of day as elapsed time, so it moves later by the length of the gap. 02:30 Berlin on
//!   2027-03-28 opens at 03:30 CEST (01:30Z).
//! * **Fall back** (the time happens twice): the occurrence is the earlier instant. 02:30 Berlin
//!   on 2027-10-31 opens at 02:30 CEST (00:30Z), once.
//! * If local midnight itself does not exist that day, `rrule` skips the occurrence.
//!
//! The duration is elapsed time: an occurrence is open over `[start, start + duration)`,
//! whatever the wall clock does in between. Overlapping occurrences are not merged:
//! [`Window::open_until`] gives the end of the latest-starting occurrence that contains the
//! instant.
//!
//! # Bounded work
//!
//! Every query does a bounded amount of work, whatever the input:
//!
//! * `FREQ=SECONDLY` and `FREQ=MINUTELY` are refused, and so is any rule that can open more
//!   than once an hour (`FREQ=HOURLY` with several `BYMINUTE`/`BYSECOND` values) or more than
//!   [`MAX_OPENINGS_PER_DAY`] times a day (`BYHOUR` × `BYMINUTE` × `BYSECOND`).
//! * `COUNT` is at most [`MAX_COUNT`]; rule text is at most [`MAX_RRULE_LEN`] bytes.
//! * A rule without `COUNT` is not expanded from its start each time: the expansion starts at
//!   the latest whole period (year, month, week, day or hour, times `INTERVAL`, counted from the
//!   rule's start) that begins at least a day before the instant asked about, which yields the
//!   same occurrences from that instant on. A rule with `COUNT` must be expanded from its start,
//!   which `MAX_COUNT` bounds.
//! * [`Window::next_opening`] looks at most [`SEARCH_HORIZON_DAYS`] (five years) ahead, and no
//!   query visits more than 100,000 occurrences. A rule whose next opening is further away
//!   than the horizon is treated as never opening again. Between two occurrences, `rrule`'s own
//!   guard stops a search after 100,000 empty periods (or at year 10,000).

use std::str::FromStr;

use chrono::{
    DateTime, Datelike, Days, Months, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, TimeZone,
    Timelike, Utc, Weekday,
};
use entities::json::WindowSpec;
use rrule::{Frequency, RRule, RRuleError, RRuleSet, Unvalidated, ValidationError};

/// The longest rule text accepted, in bytes.
pub const MAX_RRULE_LEN: usize = 1_000;
/// The longest window accepted, in minutes (one week).
pub const MAX_DURATION_MINUTES: u32 = 10_080;
/// The largest `COUNT` accepted: a rule with `COUNT` is expanded from its start on every query.
pub const MAX_COUNT: u32 = 10_000;
/// The most distinct opening times a day a rule may have (`BYHOUR` × `BYMINUTE` × `BYSECOND`).
pub const MAX_OPENINGS_PER_DAY: usize = 24;
/// How far ahead [`Window::next_opening`] and [`Window::check_fires`] look: five years.
pub const SEARCH_HORIZON_DAYS: i64 = 5 * 365 + 2;

/// The most occurrences one query visits, counted from where the expansion starts.
const MAX_STEPS: usize = 100_000;
/// Years a rule's start and the instants asked about may fall in (`rrule` stops at 10,000).
const MIN_YEAR: i32 = 1;
const MAX_YEAR: i32 = 9_999;

/// Why a [`WindowSpec`] is refused. Every variant is a client error (`invalid-request`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// `time_zone` is not an IANA time zone name.
    #[error("time_zone is not a known IANA time zone name (such as \"Europe/Berlin\")")]
    BadTimeZone,
    /// The rule text cannot be used; the message says why.
    #[error("rrule is not a usable RFC 5545 recurrence rule: {0}")]
    BadRrule(String),
    /// `duration_minutes` is outside `1..=10080`.
    #[error("duration_minutes must be between 1 and 10080 (one week)")]
    BadDuration,
    /// The rule never opens the window again (within the five-year search horizon).
    #[error("the rrule never opens the window again (no occurrence in the next five years)")]
    NeverFires,
}

/// A parsed maintenance window, ready to answer questions about instants. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Window {
    rule: RRule,
    start: DateTime<rrule::Tz>,
    zone: chrono_tz::Tz,
    duration: TimeDelta,
}

impl Window {
    /// Parses and validates `spec`.
    ///
    /// `created` is the policy's creation instant: when the text has no `DTSTART`, the rule
    /// counts from `created` (truncated to the minute) on `time_zone`'s wall clock. Accepts a bare
    /// rule (`FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0`), an `RRULE:` line, or a `DTSTART` line
    /// plus an `RRULE:` line. An `UNTIL` before the start gives [`WindowError::NeverFires`].
    pub fn parse(spec: &WindowSpec, created: DateTime<Utc>) -> Result<Window, WindowError> {
        let zone = parse_time_zone(&spec.time_zone)?;
        let duration = parse_duration(spec.duration_minutes)?;
        let lines = RuleLines::split(&spec.rrule)?;
        let rule = parse_rule(lines.rule)?;
        let start = match lines.dtstart {
            Some(line) => parse_dtstart(line, zone)?,
            None => implicit_start(created, zone)?,
        };
        check_year(start.year())?;
        let rule = rule.validate(start).map_err(validation_error)?;
        check_density(&rule)?;
        Ok(Window {
            rule,
            start,
            zone,
            duration,
        })
    }

    /// Write-time validation: [`WindowError::NeverFires`] when no occurrence starts at or after
    /// `now` within the [`SEARCH_HORIZON_DAYS`] horizon (`UNTIL` in the past, `COUNT` used up,
    /// an impossible date such as `BYMONTH=2;BYMONTHDAY=31`).
    pub fn check_fires(&self, now: DateTime<Utc>) -> Result<(), WindowError> {
        self.next_opening(now)
            .map(|_| ())
            .ok_or(WindowError::NeverFires)
    }

    /// Whether `at` lies inside an occurrence `[start, start + duration)`.
    pub fn is_open(&self, at: DateTime<Utc>) -> bool {
        self.open_until(at).is_some()
    }

    /// The earliest occurrence start `>= after`, looking at most [`SEARCH_HORIZON_DAYS`] ahead;
    /// `None` when there is none. An occurrence already under way at `after` does not count:
    /// when the window is shut at `after`, this is when it next opens.
    pub fn next_opening(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let horizon = after
            .checked_add_signed(TimeDelta::days(SEARCH_HORIZON_DAYS))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        self.starts_between(after, horizon).next()
    }

    /// If `at` is inside an occurrence, the end of that occurrence (`start + duration`);
    /// `None` when the window is shut at `at`. With overlapping occurrences, the end of the
    /// latest-starting one that contains `at`.
    pub fn open_until(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let opened_after = at.checked_sub_signed(self.duration)?;
        let start = self
            .starts_between(opened_after, at)
            .filter(|start| *start > opened_after)
            .last()?;
        start.checked_add_signed(self.duration)
    }

    /// Occurrence starts in `[from, to]`, in order, visiting at most `MAX_STEPS` occurrences.
    fn starts_between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> impl Iterator<Item = DateTime<Utc>> {
        let occurrences = self.expansion_start(from).map(|start| {
            let set = RRuleSet::new(start).rrule(self.rule.clone()).limit();
            (&set).into_iter()
        });
        occurrences
            .into_iter()
            .flatten()
            .take(MAX_STEPS)
            .map(|start| start.with_timezone(&Utc))
            .skip_while(move |start| *start < from)
            .take_while(move |start| *start <= to)
    }

    /// Where to start expanding so as to see every occurrence `>= from`; `None` when `from` is
    /// beyond the years `rrule` can reach.
    fn expansion_start(&self, from: DateTime<Utc>) -> Option<DateTime<rrule::Tz>> {
        if from.year() > MAX_YEAR {
            return None;
        }
        if self.rule.get_count().is_some() {
            return Some(self.start);
        }
        let rebased = self
            .rebased_start(from)
            .filter(|rebased| *rebased > self.start);
        Some(rebased.unwrap_or(self.start))
    }

    /// The start of the latest rule period (counted from the rule's own start, `INTERVAL` periods
    /// apart) that begins at least a day before `from` on the local wall clock. Expanding the
    /// validated rule (whose defaults are already filled in from the real start) from there gives
    /// the same occurrences from `from` on: the rule's periods are the same, and only occurrences
    /// before the new start, so before `from`, are dropped.
    fn rebased_start(&self, from: DateTime<Utc>) -> Option<DateTime<rrule::Tz>> {
        let freq = self.rule.get_freq();
        let target = from
            .with_timezone(&self.zone)
            .naive_local()
            .checked_sub_days(Days::new(1))?;
        let anchor = period_anchor(freq, self.rule.get_week_start(), self.start.naive_local())?;
        let interval = i64::from(self.rule.get_interval().max(1));
        let periods = periods_between(freq, anchor, target)? / interval;
        // A period start can fall in a daylight-saving gap; then try the one before.
        (0..3)
            .map(|back| periods - back)
            .take_while(|n| *n >= 1)
            .find_map(|n| {
                let naive = advance(freq, anchor, n.checked_mul(interval)?)?;
                if naive.year() > MAX_YEAR {
                    return None;
                }
                rrule::Tz::Tz(self.zone)
                    .from_local_datetime(&naive)
                    .earliest()
            })
    }
}

/// The `DTSTART` and `RRULE` lines of a rule text.
struct RuleLines<'a> {
    dtstart: Option<&'a str>,
    rule: &'a str,
}

impl<'a> RuleLines<'a> {
    fn split(text: &'a str) -> Result<Self, WindowError> {
        if text.len() > MAX_RRULE_LEN {
            return Err(bad(format!(
                "the text is longer than {MAX_RRULE_LEN} bytes"
            )));
        }
        let mut dtstart = None;
        let mut rule = None;
        for line in text.lines().map(str::trim).filter(|line| !line.is_empty()) {
            let upper = line.to_ascii_uppercase();
            let slot = if upper.starts_with("DTSTART") {
                &mut dtstart
            } else if upper.starts_with("RRULE") || !line.contains(':') {
                &mut rule
            } else {
                return Err(bad(format!(
                    "unsupported line {line:?}: only DTSTART and RRULE are allowed"
                )));
            };
            if slot.replace(line).is_some() {
                return Err(bad(format!("more than one {} line", property_name(&upper))));
            }
        }
        let rule = rule.ok_or_else(|| bad("there is no RRULE".to_owned()))?;
        Ok(Self { dtstart, rule })
    }
}

fn property_name(upper_line: &str) -> &'static str {
    if upper_line.starts_with("DTSTART") {
        "DTSTART"
    } else {
        "RRULE"
    }
}

fn bad(message: String) -> WindowError {
    WindowError::BadRrule(message)
}

fn parse_time_zone(name: &str) -> Result<chrono_tz::Tz, WindowError> {
    chrono_tz::Tz::from_str(name.trim()).map_err(|_| WindowError::BadTimeZone)
}

fn parse_duration(minutes: u32) -> Result<TimeDelta, WindowError> {
    if !(1..=MAX_DURATION_MINUTES).contains(&minutes) {
        return Err(WindowError::BadDuration);
    }
    TimeDelta::try_minutes(i64::from(minutes)).ok_or(WindowError::BadDuration)
}

/// Parses the `RRULE` line and refuses what would make windows open too often.
fn parse_rule(line: &str) -> Result<RRule<Unvalidated>, WindowError> {
    let rule: RRule<Unvalidated> = line.parse().map_err(|e: RRuleError| bad(e.to_string()))?;
    let freq = rule.get_freq();
    if matches!(freq, Frequency::Secondly | Frequency::Minutely) {
        return Err(bad(format!(
            "FREQ={freq} is not supported: maintenance windows recur at most hourly"
        )));
    }
    if rule.get_count().is_some_and(|count| count > MAX_COUNT) {
        return Err(bad(format!(
            "COUNT above {MAX_COUNT} is not supported; use UNTIL instead"
        )));
    }
    Ok(rule)
}

/// Refuses rules that open more than once an hour or more than `MAX_OPENINGS_PER_DAY` a day.
/// Runs on the validated rule, where the by-parts the text left out are filled in.
fn check_density(rule: &RRule) -> Result<(), WindowError> {
    let per_hour = rule.get_by_minute().len() * rule.get_by_second().len();
    if rule.get_freq() == Frequency::Hourly {
        if per_hour > 1 {
            return Err(bad(
                "FREQ=HOURLY takes at most one BYMINUTE and one BYSECOND value: \
                 a window opens at most once an hour"
                    .to_owned(),
            ));
        }
        return Ok(());
    }
    if rule.get_by_hour().len() * per_hour > MAX_OPENINGS_PER_DAY {
        return Err(bad(format!(
            "the rule opens the window at more than {MAX_OPENINGS_PER_DAY} times a day \
             (BYHOUR x BYMINUTE x BYSECOND)"
        )));
    }
    Ok(())
}

fn validation_error(error: RRuleError) -> WindowError {
    match error {
        RRuleError::ValidationError(ValidationError::UntilBeforeStart { .. }) => {
            WindowError::NeverFires
        }
        other => bad(other.to_string()),
    }
}

fn check_year(year: i32) -> Result<(), WindowError> {
    if (MIN_YEAR..=MAX_YEAR).contains(&year) {
        Ok(())
    } else {
        Err(bad(format!(
            "the rule starts in year {year}, outside {MIN_YEAR}..={MAX_YEAR}"
        )))
    }
}

/// The policy's creation instant, truncated to the minute, on `zone`'s wall clock.
fn implicit_start(
    created: DateTime<Utc>,
    zone: chrono_tz::Tz,
) -> Result<DateTime<rrule::Tz>, WindowError> {
    check_year(created.year())?;
    let minute = created.timestamp().div_euclid(60) * 60;
    let truncated = DateTime::<Utc>::from_timestamp(minute, 0)
        .ok_or_else(|| bad("the policy's creation time is out of range".to_owned()))?;
    Ok(truncated.with_timezone(&rrule::Tz::Tz(zone)))
}

/// Parses `DTSTART[;TZID=...][;VALUE=...]:value` (see the module docs for its meaning).
fn parse_dtstart(line: &str, zone: chrono_tz::Tz) -> Result<DateTime<rrule::Tz>, WindowError> {
    let (head, value) = line
        .split_once(':')
        .ok_or_else(|| bad(format!("DTSTART line {line:?} has no value")))?;
    let tzid = dtstart_tzid(head)?;
    let (local, is_utc) = parse_ical_datetime(value.trim())?;
    let rrule_zone = rrule::Tz::Tz(zone);
    if is_utc {
        if tzid.is_some() {
            return Err(bad("DTSTART has both TZID and a UTC time (Z)".to_owned()));
        }
        return Ok(Utc.from_utc_datetime(&local).with_timezone(&rrule_zone));
    }
    if let Some(tzid) = tzid {
        let named = chrono_tz::Tz::from_str(tzid)
            .map_err(|_| bad(format!("DTSTART has an unknown TZID {tzid:?}")))?;
        if named != zone {
            return Err(bad(format!(
                "DTSTART's TZID {tzid} differs from the window's time_zone {}",
                zone.name()
            )));
        }
    }
    rrule_zone
        .from_local_datetime(&local)
        .earliest()
        .ok_or_else(|| {
            bad(format!(
                "DTSTART {value} does not exist in {} (daylight-saving gap)",
                zone.name()
            ))
        })
}

/// The `TZID` parameter of a `DTSTART` property head such as `DTSTART;TZID=Europe/Berlin`.
fn dtstart_tzid(head: &str) -> Result<Option<&str>, WindowError> {
    let mut tzid = None;
    for parameter in head.split(';').skip(1) {
        let (name, value) = parameter
            .split_once('=')
            .ok_or_else(|| bad(format!("DTSTART parameter {parameter:?} has no value")))?;
        match name.trim().to_ascii_uppercase().as_str() {
            "TZID" => tzid = Some(value.trim().trim_matches('"')),
            "VALUE" => {}
            _ => return Err(bad(format!("unsupported DTSTART parameter {name:?}"))),
        }
    }
    Ok(tzid)
}

/// Parses `YYYYMMDD`, `YYYYMMDDTHHMMSS` or `YYYYMMDDTHHMMSSZ`; the flag tells whether it is UTC.
fn parse_ical_datetime(value: &str) -> Result<(NaiveDateTime, bool), WindowError> {
    let invalid = || {
        bad(format!(
            "DTSTART value {value:?} is not a date or date-time"
        ))
    };
    let (body, is_utc) = match value.strip_suffix(['Z', 'z']) {
        Some(body) => (body, true),
        None => (value, false),
    };
    let parsed = match body.len() {
        8 => NaiveDate::parse_from_str(body, "%Y%m%d").map(|date| date.and_time(NaiveTime::MIN)),
        15 => NaiveDateTime::parse_from_str(body, "%Y%m%dT%H%M%S"),
        _ => return Err(invalid()),
    };
    let local = parsed.map_err(|_| invalid())?;
    if local.nanosecond() != 0 || (body.len() == 8 && is_utc) {
        return Err(invalid());
    }
    Ok((local, is_utc))
}

/// The local start of the rule period that contains `start`.
fn period_anchor(
    freq: Frequency,
    week_start: Weekday,
    start: NaiveDateTime,
) -> Option<NaiveDateTime> {
    let date = start.date();
    let day = match freq {
        Frequency::Yearly => NaiveDate::from_ymd_opt(date.year(), 1, 1)?,
        Frequency::Monthly => NaiveDate::from_ymd_opt(date.year(), date.month(), 1)?,
        Frequency::Weekly => {
            let into_week =
                (7 + date.weekday().num_days_from_monday() - week_start.num_days_from_monday()) % 7;
            date.checked_sub_days(Days::new(u64::from(into_week)))?
        }
        Frequency::Daily => date,
        Frequency::Hourly => return date.and_hms_opt(start.hour(), 0, 0),
        Frequency::Minutely | Frequency::Secondly => return None,
    };
    Some(day.and_time(NaiveTime::MIN))
}

/// Whole periods (of one unit of `freq`) from `anchor` to `target`; `None` when negative.
fn periods_between(freq: Frequency, anchor: NaiveDateTime, target: NaiveDateTime) -> Option<i64> {
    let elapsed = target.signed_duration_since(anchor);
    let months = |at: NaiveDateTime| i64::from(at.year()) * 12 + i64::from(at.month0());
    let periods = match freq {
        Frequency::Yearly => i64::from(target.year()) - i64::from(anchor.year()),
        Frequency::Monthly => months(target) - months(anchor),
        Frequency::Weekly => elapsed.num_days() / 7,
        Frequency::Daily => elapsed.num_days(),
        Frequency::Hourly => elapsed.num_hours(),
        Frequency::Minutely | Frequency::Secondly => return None,
    };
    (periods >= 0 && target >= anchor).then_some(periods)
}

/// `anchor` moved forward by `units` units of `freq`.
fn advance(freq: Frequency, anchor: NaiveDateTime, units: i64) -> Option<NaiveDateTime> {
    let units_u32 = || u32::try_from(units).ok();
    let units_u64 = || u64::try_from(units).ok();
    match freq {
        Frequency::Yearly => anchor.checked_add_months(Months::new(units_u32()?.checked_mul(12)?)),
        Frequency::Monthly => anchor.checked_add_months(Months::new(units_u32()?)),
        Frequency::Weekly => anchor.checked_add_days(Days::new(units_u64()?.checked_mul(7)?)),
        Frequency::Daily => anchor.checked_add_days(Days::new(units_u64()?)),
        Frequency::Hourly => anchor.checked_add_signed(TimeDelta::try_hours(units)?),
        Frequency::Minutely | Frequency::Secondly => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("test instant")
            .with_timezone(&Utc)
    }

    fn spec(rrule: &str, duration_minutes: u32, time_zone: &str) -> WindowSpec {
        WindowSpec {
            rrule: rrule.to_owned(),
            duration_minutes,
            time_zone: time_zone.to_owned(),
        }
    }

    fn window(rrule: &str, duration_minutes: u32, time_zone: &str, created: &str) -> Window {
        Window::parse(&spec(rrule, duration_minutes, time_zone), utc(created)).expect("window")
    }

    fn parse_err(rrule: &str, duration_minutes: u32, time_zone: &str) -> WindowError {
        Window::parse(
            &spec(rrule, duration_minutes, time_zone),
            utc("2027-01-01T00:00:00Z"),
        )
        .expect_err("refused")
    }

    /// Every occurrence in `[from, to]`, by expanding from the rule's real start.
    fn brute_force(w: &Window, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        RRuleSet::new(w.start)
            .rrule(w.rule.clone())
            .all(u16::MAX)
            .dates
            .into_iter()
            .map(|d| d.with_timezone(&Utc))
            .filter(|d| *d >= from && *d <= to)
            .collect()
    }

    #[test]
    fn weekly_saturday_utc_opens_and_shuts_at_its_edges() {
        let w = window(
            "FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0",
            240,
            "UTC",
            "2027-01-04T10:17:33Z",
        );
        // 2027-01-09 is a Saturday.
        assert!(!w.is_open(utc("2027-01-09T01:59:59Z")));
        assert!(w.is_open(utc("2027-01-09T02:00:00Z")));
        assert!(w.is_open(utc("2027-01-09T05:59:59Z")));
        assert!(!w.is_open(utc("2027-01-09T06:00:00Z")));
        assert_eq!(
            w.open_until(utc("2027-01-09T03:00:00Z")),
            Some(utc("2027-01-09T06:00:00Z"))
        );
        assert_eq!(w.open_until(utc("2027-01-09T06:00:00Z")), None);
        assert!(w.is_open(utc("2027-01-16T02:00:00Z")));
        assert!(!w.is_open(utc("2027-01-13T03:00:00Z")));
    }

    #[test]
    fn next_opening_from_a_shut_instant() {
        let w = window(
            "RRULE:FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0",
            240,
            "UTC",
            "2027-01-04T10:17:33Z",
        );
        assert_eq!(
            w.next_opening(utc("2027-01-09T06:00:00Z")),
            Some(utc("2027-01-16T02:00:00Z"))
        );
        assert_eq!(
            w.next_opening(utc("2027-01-05T00:00:00Z")),
            Some(utc("2027-01-09T02:00:00Z"))
        );
        // An opening exactly at `after` counts.
        assert_eq!(
            w.next_opening(utc("2027-01-09T02:00:00Z")),
            Some(utc("2027-01-09T02:00:00Z"))
        );
        // Nothing before the policy existed.
        assert_eq!(
            w.next_opening(utc("2026-01-01T00:00:00Z")),
            Some(utc("2027-01-09T02:00:00Z"))
        );
        assert_eq!(w.check_fires(utc("2030-06-01T00:00:00Z")), Ok(()));
    }

    #[test]
    fn berlin_daily_0230_across_spring_forward() {
        let w = window(
            "FREQ=DAILY;BYHOUR=2;BYMINUTE=30",
            60,
            "Europe/Berlin",
            "2027-03-01T12:00:00Z",
        );
        // 2027-03-27 02:30 CET.
        assert_eq!(
            w.next_opening(utc("2027-03-27T00:00:00Z")),
            Some(utc("2027-03-27T01:30:00Z"))
        );
        // 2027-03-28 02:30 does not exist; rrule opens at midnight + 2h30 elapsed = 03:30 CEST.
        assert_eq!(
            w.next_opening(utc("2027-03-27T02:00:00Z")),
            Some(utc("2027-03-28T01:30:00Z"))
        );
        // 2027-03-29 02:30 CEST.
        assert_eq!(
            w.next_opening(utc("2027-03-28T02:00:00Z")),
            Some(utc("2027-03-29T00:30:00Z"))
        );
        assert!(w.is_open(utc("2027-03-27T01:30:00Z")));
        assert!(!w.is_open(utc("2027-03-27T00:30:00Z")));
        assert!(w.is_open(utc("2027-03-29T00:30:00Z")));
        assert!(!w.is_open(utc("2027-03-29T01:30:00Z")));
    }

    #[test]
    fn berlin_daily_0230_across_fall_back() {
        let w = window(
            "FREQ=DAILY;BYHOUR=2;BYMINUTE=30",
            60,
            "Europe/Berlin",
            "2027-03-01T12:00:00Z",
        );
        // 2027-10-30 02:30 CEST.
        assert_eq!(
            w.next_opening(utc("2027-10-30T00:00:00Z")),
            Some(utc("2027-10-30T00:30:00Z"))
        );
        // 2027-10-31 02:30 happens twice; the earlier one (CEST) opens it, once.
        assert_eq!(
            w.next_opening(utc("2027-10-30T02:00:00Z")),
            Some(utc("2027-10-31T00:30:00Z"))
        );
        assert_eq!(
            w.next_opening(utc("2027-10-31T00:31:00Z")),
            Some(utc("2027-11-01T01:30:00Z"))
        );
        // One hour elapsed from 00:30Z.
        assert_eq!(
            w.open_until(utc("2027-10-31T01:00:00Z")),
            Some(utc("2027-10-31T01:30:00Z"))
        );
        assert!(!w.is_open(utc("2027-10-31T01:30:00Z")));
    }

    #[test]
    fn new_york_weekly_keeps_local_time_across_dst() {
        // Tuesdays 22:00 local; US daylight saving starts 2027-03-14 and ends 2027-11-07.
        let w = window(
            "FREQ=WEEKLY;BYDAY=TU;BYHOUR=22;BYMINUTE=0",
            120,
            "America/New_York",
            "2027-01-01T00:00:00Z",
        );
        assert_eq!(
            w.next_opening(utc("2027-03-09T00:00:00Z")),
            Some(utc("2027-03-10T03:00:00Z"))
        );
        assert_eq!(
            w.next_opening(utc("2027-03-11T00:00:00Z")),
            Some(utc("2027-03-17T02:00:00Z"))
        );
        assert_eq!(
            w.next_opening(utc("2027-11-04T00:00:00Z")),
            Some(utc("2027-11-10T03:00:00Z"))
        );
        assert!(w.is_open(utc("2027-03-17T03:59:00Z")));
        assert!(!w.is_open(utc("2027-03-17T04:00:00Z")));
        assert!(!w.is_open(utc("2027-03-17T01:59:00Z")));
    }

    #[test]
    fn explicit_dtstart_with_tzid_sets_the_rhythm() {
        // Every other Tuesday from 2027-01-05 at 22:00 Berlin, whatever `created` is.
        let w = window(
            "DTSTART;TZID=Europe/Berlin:20270105T220000\nRRULE:FREQ=WEEKLY;INTERVAL=2",
            60,
            "Europe/Berlin",
            "2027-02-20T08:09:10Z",
        );
        assert_eq!(
            w.next_opening(utc("2027-01-01T00:00:00Z")),
            Some(utc("2027-01-05T21:00:00Z"))
        );
        assert_eq!(
            w.next_opening(utc("2027-01-06T00:00:00Z")),
            Some(utc("2027-01-19T21:00:00Z"))
        );
        // Summer: 22:00 CEST, fifteen fortnights on.
        assert_eq!(
            w.next_opening(utc("2027-07-01T00:00:00Z")),
            Some(utc("2027-07-06T20:00:00Z"))
        );
        assert!(w.is_open(utc("2027-07-06T20:30:00Z")));
        assert!(!w.is_open(utc("2027-07-13T20:30:00Z")));
    }

    #[test]
    fn explicit_dtstart_floating_and_utc_forms() {
        let floating = window(
            "DTSTART:20270105T220000\nRRULE:FREQ=DAILY",
            30,
            "Europe/Berlin",
            "2027-02-20T08:09:10Z",
        );
        assert_eq!(
            floating.next_opening(utc("2027-01-01T00:00:00Z")),
            Some(utc("2027-01-05T21:00:00Z"))
        );
        // A UTC start is an instant, read on the window's wall clock: 21:00Z = 22:00 CET.
        let zulu = window(
            "DTSTART:20270105T210000Z\nRRULE:FREQ=DAILY",
            30,
            "Europe/Berlin",
            "2027-02-20T08:09:10Z",
        );
        assert_eq!(
            zulu.next_opening(utc("2027-07-01T00:00:00Z")),
            Some(utc("2027-07-01T20:00:00Z"))
        );
    }

    #[test]
    fn explicit_dtstart_refusals() {
        assert!(matches!(
            parse_err(
                "DTSTART;TZID=America/New_York:20270105T220000\nRRULE:FREQ=DAILY",
                30,
                "Europe/Berlin"
            ),
            WindowError::BadRrule(_)
        ));
        assert!(matches!(
            parse_err(
                "DTSTART;TZID=Europe/Berlin:20270328T023000\nRRULE:FREQ=DAILY",
                30,
                "Europe/Berlin"
            ),
            WindowError::BadRrule(_)
        ));
        assert!(matches!(
            parse_err(
                "DTSTART:20270105T220000\nDTSTART:20270105T220000\nRRULE:FREQ=DAILY",
                30,
                "UTC"
            ),
            WindowError::BadRrule(_)
        ));
        assert!(matches!(
            parse_err("DTSTART:20270105T220000", 30, "UTC"),
            WindowError::BadRrule(_)
        ));
        assert!(matches!(
            parse_err("RRULE:FREQ=DAILY\nEXDATE:20270106T220000Z", 30, "UTC"),
            WindowError::BadRrule(_)
        ));
    }

    #[test]
    fn implicit_start_is_creation_truncated_to_the_minute() {
        let w = window("FREQ=DAILY", 30, "Europe/Berlin", "2027-01-05T21:07:45.5Z");
        // 22:07:00 CET every day, from the creation day on.
        assert_eq!(
            w.next_opening(utc("2027-01-01T00:00:00Z")),
            Some(utc("2027-01-05T21:07:00Z"))
        );
        assert_eq!(
            w.next_opening(utc("2027-06-01T00:00:00Z")),
            Some(utc("2027-06-01T20:07:00Z"))
        );
    }

    #[test]
    fn until_in_the_past_never_fires() {
        let w = window(
            "FREQ=DAILY;BYHOUR=3;BYMINUTE=0;UNTIL=20270110T000000Z",
            60,
            "UTC",
            "2027-01-01T00:00:00Z",
        );
        assert_eq!(w.check_fires(utc("2027-01-05T00:00:00Z")), Ok(()));
        assert_eq!(
            w.check_fires(utc("2027-02-01T00:00:00Z")),
            Err(WindowError::NeverFires)
        );
        assert_eq!(w.next_opening(utc("2027-01-09T04:00:00Z")), None);
        // UNTIL before the policy even existed.
        assert_eq!(
            parse_err("FREQ=DAILY;UNTIL=20200101T000000Z", 60, "UTC"),
            WindowError::NeverFires
        );
    }

    #[test]
    fn count_already_consumed_never_fires() {
        let w = window(
            "FREQ=DAILY;COUNT=1;BYHOUR=3;BYMINUTE=0",
            60,
            "UTC",
            "2027-01-01T00:00:00Z",
        );
        assert_eq!(w.check_fires(utc("2027-01-01T03:00:00Z")), Ok(()));
        assert!(w.is_open(utc("2027-01-01T03:30:00Z")));
        assert_eq!(
            w.check_fires(utc("2027-01-01T03:00:01Z")),
            Err(WindowError::NeverFires)
        );
        assert!(!w.is_open(utc("2027-01-02T03:30:00Z")));
    }

    #[test]
    fn impossible_date_never_fires() {
        let w = window(
            "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=31;BYHOUR=1;BYMINUTE=0",
            60,
            "UTC",
            "2027-01-01T00:00:00Z",
        );
        assert_eq!(
            w.check_fires(utc("2027-01-01T00:00:00Z")),
            Err(WindowError::NeverFires)
        );
        assert!(!w.is_open(utc("2027-02-28T01:30:00Z")));
    }

    #[test]
    fn minutely_and_secondly_are_refused() {
        for rule in [
            "FREQ=MINUTELY;INTERVAL=1",
            "FREQ=SECONDLY",
            "RRULE:FREQ=MINUTELY;INTERVAL=5",
        ] {
            let err = parse_err(rule, 60, "UTC");
            assert!(
                matches!(&err, WindowError::BadRrule(m) if m.contains("at most hourly")),
                "{rule}: {err}"
            );
        }
    }

    #[test]
    fn too_dense_or_too_long_rules_are_refused() {
        for rule in [
            "FREQ=HOURLY;BYMINUTE=0,30",
            "FREQ=DAILY;BYHOUR=1,2,3,4,5,6,7,8,9,10,11,12,13;BYMINUTE=0,30",
            "FREQ=DAILY;COUNT=10001",
        ] {
            assert!(
                matches!(parse_err(rule, 60, "UTC"), WindowError::BadRrule(_)),
                "{rule}"
            );
        }
        let long = format!("FREQ=DAILY;{}", "BYHOUR=1;".repeat(120));
        assert!(matches!(
            parse_err(&long, 60, "UTC"),
            WindowError::BadRrule(m) if m.contains("longer than 1000 bytes")
        ));
    }

    #[test]
    fn unknown_time_zone_is_refused() {
        assert_eq!(
            parse_err("FREQ=DAILY", 60, "Mars/Olympus_Mons"),
            WindowError::BadTimeZone
        );
        assert_eq!(parse_err("FREQ=DAILY", 60, ""), WindowError::BadTimeZone);
    }

    #[test]
    fn duration_out_of_range_is_refused() {
        assert_eq!(parse_err("FREQ=DAILY", 0, "UTC"), WindowError::BadDuration);
        assert_eq!(
            parse_err("FREQ=DAILY", 10_081, "UTC"),
            WindowError::BadDuration
        );
        assert!(
            Window::parse(
                &spec("FREQ=DAILY", 10_080, "UTC"),
                utc("2027-01-01T00:00:00Z")
            )
            .is_ok()
        );
    }

    #[test]
    fn garbage_rrule_is_refused() {
        for rule in [
            "",
            "hello",
            "FREQ=FORTNIGHTLY",
            "FREQ=DAILY;BYHOUR=25",
            "FREQ=DAILY;BYDAY=XX",
        ] {
            assert!(
                matches!(parse_err(rule, 60, "UTC"), WindowError::BadRrule(_)),
                "{rule:?}"
            );
        }
    }

    #[test]
    fn hourly_rule_from_long_ago_is_answered_by_rebasing() {
        let w = window(
            "DTSTART:19000101T000000Z\nRRULE:FREQ=HOURLY;INTERVAL=5;BYMINUTE=15;BYSECOND=0",
            10,
            "UTC",
            "2027-01-01T00:00:00Z",
        );
        // From 1900-01-01 to 2027-01-01 is 46,386 days = 1,113,264 hours, 4 (mod 5): the
        // openings that day are at 01:15, 06:15, 11:15, ...
        assert_eq!(
            w.next_opening(utc("2027-01-01T06:00:00Z")),
            Some(utc("2027-01-01T06:15:00Z"))
        );
        assert_eq!(
            w.next_opening(utc("2027-01-01T06:16:00Z")),
            Some(utc("2027-01-01T11:15:00Z"))
        );
        assert!(w.is_open(utc("2027-01-01T06:20:00Z")));
        assert!(!w.is_open(utc("2027-01-01T06:25:00Z")));
        assert!(!w.is_open(utc("2027-01-01T05:20:00Z")));
    }

    #[test]
    fn rebasing_matches_full_expansion() {
        let cases = [
            (
                "DTSTART;TZID=Europe/Berlin:20260131T023000\nRRULE:FREQ=MONTHLY;BYMONTHDAY=-1,15",
                "Europe/Berlin",
            ),
            (
                "DTSTART;TZID=Europe/Berlin:20260107T023000\nRRULE:FREQ=WEEKLY;INTERVAL=3;BYDAY=MO,SU;WKST=SU",
                "Europe/Berlin",
            ),
            (
                "DTSTART:20260101T013000\nRRULE:FREQ=HOURLY;INTERVAL=7;BYHOUR=1,2,3,8,15,22",
                "America/New_York",
            ),
            (
                "DTSTART:20240229T120000\nRRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29",
                "UTC",
            ),
            (
                "DTSTART:20260103T000000\nRRULE:FREQ=DAILY;INTERVAL=3;BYHOUR=0,12;BYMINUTE=5",
                "Australia/Lord_Howe",
            ),
            (
                "DTSTART:20260105T090000\nRRULE:FREQ=MONTHLY;BYDAY=MO,TU;BYSETPOS=-1",
                "Asia/Kolkata",
            ),
            (
                "DTSTART:20260301T020000\nRRULE:FREQ=YEARLY;INTERVAL=2;BYWEEKNO=1,20;BYDAY=FR",
                "UTC",
            ),
        ];
        for (rule, zone) in cases {
            let w = window(rule, 90, zone, "2026-01-01T00:00:00Z");
            for from in [
                "2026-03-29T00:30:00Z",
                "2027-10-30T23:00:00Z",
                "2028-01-01T00:00:00Z",
            ] {
                let from = utc(from);
                let to = from + TimeDelta::days(60);
                let fast: Vec<_> = w.starts_between(from, to).collect();
                assert_eq!(fast, brute_force(&w, from, to), "{rule} from {from}");
            }
        }
    }

    #[test]
    fn odd_inputs_never_panic() {
        let rules = [
            "",
            " ",
            "\n\n",
            ":",
            ";",
            "=",
            "FREQ",
            "FREQ=",
            "FREQ=DAILY;",
            "FREQ=DAILY;;;",
            "freq=daily;byhour=2",
            "FREQ=DAILY;INTERVAL=0",
            "FREQ=DAILY;INTERVAL=-1",
            "FREQ=DAILY;INTERVAL=65535",
            "FREQ=YEARLY;INTERVAL=65535;BYHOUR=1;BYMINUTE=0",
            "FREQ=DAILY;INTERVAL=99999999999999999999",
            "FREQ=DAILY;COUNT=0",
            "FREQ=DAILY;COUNT=-5",
            "FREQ=DAILY;COUNT=4294967296",
            "FREQ=DAILY;UNTIL=99991231T235959Z",
            "FREQ=DAILY;UNTIL=00000101T000000Z",
            "FREQ=DAILY;UNTIL=20271301T000000Z",
            "FREQ=DAILY;UNTIL=2027",
            "FREQ=DAILY;UNTIL=20270101",
            "FREQ=WEEKLY;BYDAY=+53MO",
            "FREQ=MONTHLY;BYDAY=-5FR",
            "FREQ=MONTHLY;BYMONTHDAY=0",
            "FREQ=MONTHLY;BYMONTHDAY=-31",
            "FREQ=YEARLY;BYYEARDAY=366;BYHOUR=0;BYMINUTE=0",
            "FREQ=YEARLY;BYYEARDAY=-366",
            "FREQ=YEARLY;BYWEEKNO=53;BYDAY=TH",
            "FREQ=YEARLY;BYSETPOS=366;BYDAY=MO",
            "FREQ=HOURLY;BYHOUR=24",
            "FREQ=HOURLY;INTERVAL=24;BYHOUR=1",
            "FREQ=HOURLY;INTERVAL=2;BYHOUR=1,3",
            "FREQ=DAILY;BYSECOND=60",
            "FREQ=DAILY;WKST=XX",
            "FREQ=DAILY;X-NAME=1",
            "RRULE:",
            "RRULE:RRULE:FREQ=DAILY",
            "EXRULE:FREQ=DAILY",
            "DTSTART:\nRRULE:FREQ=DAILY",
            "DTSTART:99991231T235959Z\nRRULE:FREQ=DAILY",
            "DTSTART:00010101T000000Z\nRRULE:FREQ=HOURLY;BYMINUTE=0",
            "DTSTART:20270101\nRRULE:FREQ=DAILY",
            "DTSTART:20270101Z\nRRULE:FREQ=DAILY",
            "DTSTART;TZID=\"Europe/Berlin\":20270101T000000\nRRULE:FREQ=DAILY",
            "DTSTART;TZID:20270101T000000\nRRULE:FREQ=DAILY",
            "DTSTART;FOO=BAR:20270101T000000\nRRULE:FREQ=DAILY",
            "DTSTART:20270229T000000\nRRULE:FREQ=DAILY",
            "DTSTART:2027010100000000\nRRULE:FREQ=DAILY",
            "DTSTART:ü2027010T000000\nRRULE:FREQ=DAILY",
            "FREQ=DAILY;BYHOUR=ü",
            "\u{0}\u{1}\u{7f}",
            "FREQ=DAILY\r\n",
        ];
        let zones = ["UTC", "Europe/Berlin", "Pacific/Chatham", "Not/AZone"];
        let instants = [
            DateTime::<Utc>::MIN_UTC,
            utc("1900-01-01T00:00:00Z"),
            utc("2027-03-28T01:30:00Z"),
            utc("9999-12-31T23:00:00Z"),
            DateTime::<Utc>::MAX_UTC,
        ];
        let created = [utc("2027-01-01T00:00:00Z"), DateTime::<Utc>::MAX_UTC];
        for rule in rules {
            for zone in zones {
                for created in created {
                    let Ok(w) = Window::parse(&spec(rule, 120, zone), created) else {
                        continue;
                    };
                    for at in instants {
                        if let Some(end) = w.open_until(at) {
                            assert!(end > at, "{rule} {zone} {at}");
                            assert!(w.is_open(at));
                        }
                        if let Some(next) = w.next_opening(at) {
                            assert!(next >= at, "{rule} {zone} {at}");
                            assert_eq!(w.check_fires(at), Ok(()));
                        }
                    }
                }
            }
        }
    }
}
