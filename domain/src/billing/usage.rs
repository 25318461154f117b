//! Usage by host-day (interface.md, Billing usage; Limits: billing period): the month asked
//! about and what it would cost at the plan's list price.

use chrono::{Datelike, NaiveDate};

use super::{Plan, is_live};

/// One UTC calendar month, as `YYYY-MM`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Month {
    pub first: NaiveDate,
}

impl Month {
    /// Parses exactly `YYYY-MM` (four digits, a hyphen, two digits, month 01–12).
    pub fn parse(text: &str) -> Option<Month> {
        let bytes = text.as_bytes();
        let digits = |range: std::ops::Range<usize>| bytes[range].iter().all(u8::is_ascii_digit);
        if bytes.len() != 7 || bytes[4] != b'-' || !digits(0..4) || !digits(5..7) {
            return None;
        }
        let year: i32 = text[0..4].parse().ok()?;
        let month: u32 = text[5..7].parse().ok()?;
        NaiveDate::from_ymd_opt(year, month, 1).map(|first| Month { first })
    }

    /// The month `day` is in.
    pub fn of(day: NaiveDate) -> Month {
        Month {
            first: day.with_day(1).unwrap_or(day),
        }
    }

    /// The month's last day.
    pub fn last(&self) -> NaiveDate {
        self.first
            .checked_add_months(chrono::Months::new(1))
            .and_then(|next| next.pred_opt())
            .unwrap_or(self.first)
    }

    pub fn contains(&self, day: NaiveDate) -> bool {
        (self.first..=self.last()).contains(&day)
    }
}

/// What `host_days` would cost on `plan` at its list price, for an organization whose
/// subscription is live (`status`); none otherwise, or for a plan without a known price.
pub fn estimate_pence(host_days: i64, plan: &Plan, status: Option<&str>) -> Option<i64> {
    if !is_live(status) {
        return None;
    }
    plan.list_price_pence()
        .and_then(|price| price.checked_mul(host_days))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(text: &str) -> NaiveDate {
        text.parse().expect("a date")
    }

    #[test]
    fn months_are_exactly_yyyy_mm() {
        let march = Month::parse("2026-03").expect("valid");
        assert_eq!(march.first, day("2026-03-01"));
        assert_eq!(march.last(), day("2026-03-31"));
        assert_eq!(
            Month::parse("2024-02").map(|m| m.last()),
            Some(day("2024-02-29"))
        );
        assert_eq!(
            Month::parse("2026-12").map(|m| m.last()),
            Some(day("2026-12-31"))
        );
        for wrong in [
            "2026-13",
            "2026-00",
            "2026-3",
            "26-03",
            "2026/03",
            "2026-03-01",
            "",
            "２０２６-03",
            "+026-03",
            "2026-0a",
        ] {
            assert_eq!(Month::parse(wrong), None, "{wrong}");
        }
        assert_eq!(Month::of(day("2026-11-17")).first, day("2026-11-01"));
        assert!(march.contains(day("2026-03-31")));
        assert!(!march.contains(day("2026-04-01")));
    }

    #[test]
    fn an_estimate_needs_a_live_subscription_and_a_known_price() {
        assert_eq!(
            estimate_pence(100, &Plan::Business, Some("active")),
            Some(2_000)
        );
        assert_eq!(
            estimate_pence(100, &Plan::Team, Some("past_due")),
            Some(1_000)
        );
        assert_eq!(estimate_pence(100, &Plan::Team, Some("canceled")), None);
        assert_eq!(estimate_pence(100, &Plan::Team, None), None);
        assert_eq!(
            estimate_pence(100, &Plan::from("gold"), Some("active")),
            None
        );
    }
}
