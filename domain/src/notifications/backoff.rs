//! The retry schedule of a delivery (decisions §14): exponential from 10 s, capped at one hour,
//! for 24 hours after the delivery was made; then it has failed.

use chrono::{DateTime, Duration, Utc};

pub const FIRST: Duration = Duration::seconds(10);
pub const CAP: Duration = Duration::hours(1);
pub const GIVE_UP_AFTER: Duration = Duration::hours(24);

/// The wait after the `attempts`-th failed attempt (1 for the first): 10 s, 20 s, 40 s, …,
/// never more than an hour.
pub fn delay(attempts: i32) -> Duration {
    let doublings = attempts.saturating_sub(1).clamp(0, 20) as u32;
    let seconds = FIRST.num_seconds().saturating_mul(1_i64 << doublings);
    Duration::seconds(seconds).min(CAP)
}

/// When to try again after the `attempts`-th failed attempt at `now`, or `None` when that
/// would be past 24 hours since the delivery was made at `created_at` (it has failed).
pub fn next_attempt(
    created_at: DateTime<Utc>,
    attempts: i32,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let at = now + delay(attempts);
    (at <= created_at + GIVE_UP_AFTER).then_some(at)
}

/// How one attempt went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx (or the mail server took it).
    Delivered,
    /// 410 Gone: the receiver wants no more.
    Gone,
    /// Anything else: another status, a timeout, a refused destination, a redirect.
    Failed,
}

/// What becomes of a delivery after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Delivered,
    RetryAt(DateTime<Utc>),
    /// No more attempts: a 410, or 24 hours of retries are over.
    Failed,
}

/// After the `attempts`-th attempt (1 for the first), made at `now`, of a delivery made at
/// `created_at`, which went as `outcome`.
pub fn after(
    outcome: Outcome,
    created_at: DateTime<Utc>,
    attempts: i32,
    now: DateTime<Utc>,
) -> Next {
    match outcome {
        Outcome::Delivered => Next::Delivered,
        Outcome::Gone => Next::Failed,
        Outcome::Failed => match next_attempt(created_at, attempts, now) {
            Some(at) => Next::RetryAt(at),
            None => Next::Failed,
        },
    }
}

/// How an HTTP status counts: 2xx delivered, 410 gone, anything else failed (a 3xx is a
/// redirect the client would not follow, to another host).
pub fn outcome_of(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Delivered,
        410 => Outcome::Gone,
        _ => Outcome::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_delivers_ends_or_retries() {
        let created = DateTime::<Utc>::UNIX_EPOCH;
        assert_eq!(after(outcome_of(204), created, 1, created), Next::Delivered);
        assert_eq!(after(outcome_of(410), created, 1, created), Next::Failed);
        assert_eq!(
            after(outcome_of(500), created, 1, created),
            Next::RetryAt(created + Duration::seconds(10))
        );
        assert_eq!(outcome_of(302), Outcome::Failed);
        let late = created + Duration::hours(23) + Duration::minutes(30);
        assert_eq!(after(Outcome::Failed, created, 30, late), Next::Failed);
    }

    #[test]
    fn the_delay_doubles_from_ten_seconds_and_stops_at_an_hour() {
        let seconds: Vec<i64> = (1..=12).map(|n| delay(n).num_seconds()).collect();
        assert_eq!(
            seconds,
            [10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600, 3600]
        );
        assert_eq!(delay(0), FIRST);
        assert_eq!(delay(i32::MAX), CAP);
    }

    #[test]
    fn retries_stop_twenty_four_hours_after_the_delivery_was_made() {
        let created = DateTime::<Utc>::UNIX_EPOCH;
        let mut now = created;
        let mut attempts = 0;
        while let Some(next) = next_attempt(created, attempts + 1, now) {
            attempts += 1;
            now = next;
        }
        assert!(now <= created + GIVE_UP_AFTER);
        assert!(now + CAP > created + GIVE_UP_AFTER, "no hour left unused");
        // 10 s … 2,560 s is about 85 minutes in 9 retries; then hourly for the rest of the day.
        assert!((30..=35).contains(&attempts), "{attempts} retries");
    }
}
