//! Notifications: the catalogue of event types and channel kinds, and the rules of delivering
//! them, as pure functions wherever they can be: which channel wants which event
//! ([`routing`]), how a channel's configuration is checked and shown ([`config`]), what goes
//! on the wire for each kind ([`wire`]), Standard Webhooks signing ([`signing`]), the retry
//! schedule ([`backoff`]) and when a member's digest is due ([`digest`]). [`outbox`] writes an
//! event in the caller's transaction.

pub mod backoff;
pub mod config;
pub mod digest;
pub mod emails;
pub mod jobs;
pub mod outbox;
pub mod recipients;
pub mod routing;
pub mod signing;
pub mod wire;

use std::{fmt, str::FromStr};

/// The event types a channel can ask for (decisions §8), plus `test`, which is sent to one
/// channel on request whatever its filter says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    ProposalOpened,
    ProposalApproved,
    ProposalScheduled,
    ProposalApplied,
    ProposalFailed,
    /// A rollout stopped handing out jobs (decisions §20).
    ProposalHalted,
    HostEnrolled,
    HostOffline,
    AdvisoryKnownExploited,
    Test,
}

impl EventKind {
    /// Every kind a channel's `events` filter may name.
    pub const FILTERABLE: [EventKind; 9] = [
        EventKind::ProposalOpened,
        EventKind::ProposalApproved,
        EventKind::ProposalScheduled,
        EventKind::ProposalApplied,
        EventKind::ProposalFailed,
        EventKind::ProposalHalted,
        EventKind::HostEnrolled,
        EventKind::HostOffline,
        EventKind::AdvisoryKnownExploited,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::ProposalOpened => "proposal.opened",
            EventKind::ProposalApproved => "proposal.approved",
            EventKind::ProposalScheduled => "proposal.scheduled",
            EventKind::ProposalApplied => "proposal.applied",
            EventKind::ProposalFailed => "proposal.failed",
            EventKind::ProposalHalted => "proposal.halted",
            EventKind::HostEnrolled => "host.enrolled",
            EventKind::HostOffline => "host.offline",
            EventKind::AdvisoryKnownExploited => "advisory.known_exploited",
            EventKind::Test => "test",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::FILTERABLE
            .into_iter()
            .chain([EventKind::Test])
            .find(|k| k.as_str() == s)
            .ok_or(())
    }
}

/// The kinds of notification channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChannelKind {
    Slack,
    Teams,
    Email,
    Ntfy,
    Pagerduty,
    Webhook,
}

impl ChannelKind {
    pub const ALL: [ChannelKind; 6] = [
        ChannelKind::Slack,
        ChannelKind::Teams,
        ChannelKind::Email,
        ChannelKind::Ntfy,
        ChannelKind::Pagerduty,
        ChannelKind::Webhook,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Slack => "slack",
            ChannelKind::Teams => "teams",
            ChannelKind::Email => "email",
            ChannelKind::Ntfy => "ntfy",
            ChannelKind::Pagerduty => "pagerduty",
            ChannelKind::Webhook => "webhook",
        }
    }
}

impl fmt::Display for ChannelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ChannelKind {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ChannelKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or(())
    }
}

/// Which pending deliveries need a `notify.deliver` job queued now.
pub mod due {
    use chrono::{DateTime, Duration, Utc};
    use entities::notification_deliveries as deliveries;
    use sea_orm::{
        ColumnTrait, Condition,
        sea_query::{Expr, ExprTrait},
    };

    use crate::status::DeliveryStatus;

    /// How long an attempt may stay overdue after its job was queued before it is queued
    /// again. A job ends without recording its attempt only when the database failed it
    /// through all of its retries; far longer than any attempt takes (outbound calls time out
    /// in seconds), so a second job finds the attempt made and does nothing.
    pub const STRANDED_AFTER: Duration = Duration::minutes(15);

    /// Pending deliveries whose attempt is due and either has no job yet, or had one that
    /// ended without recording it (still overdue [`STRANDED_AFTER`] later).
    pub fn condition(now: DateTime<Utc>) -> Condition {
        Condition::all()
            .add(deliveries::Column::Status.eq(DeliveryStatus::Pending))
            .add(deliveries::Column::NextAttemptAt.lte(now))
            .add(
                Condition::any()
                    .add(deliveries::Column::QueuedAttempt.is_null())
                    .add(
                        Expr::col(deliveries::Column::QueuedAttempt)
                            .lt(Expr::col(deliveries::Column::Attempts)),
                    )
                    .add(deliveries::Column::NextAttemptAt.lte(now - STRANDED_AFTER)),
            )
    }

    /// Whether a due delivery (by [`condition`]) already had a job for this attempt, so its
    /// new job needs a key of its own.
    pub fn is_stranded(queued_attempt: Option<i32>, attempts: i32) -> bool {
        queued_attempt.is_some_and(|queued| queued >= attempts)
    }

    /// The window a stranded attempt's new job belongs to: one more job per window at most.
    pub fn window(now: DateTime<Utc>) -> i64 {
        now.timestamp().div_euclid(STRANDED_AFTER.num_seconds())
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn an_attempt_is_stranded_only_once_its_job_was_queued() {
            assert!(!is_stranded(None, 0));
            assert!(!is_stranded(Some(0), 1));
            assert!(is_stranded(Some(1), 1));
        }

        #[test]
        fn windows_are_fifteen_minutes_wide() {
            let at = |s: &str| s.parse::<DateTime<Utc>>().expect("time");
            assert_eq!(
                window(at("2026-11-26T08:00:00Z")),
                window(at("2026-11-26T08:14:59Z"))
            );
            assert_ne!(
                window(at("2026-11-26T08:14:59Z")),
                window(at("2026-11-26T08:15:00Z"))
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_names() {
        for kind in EventKind::FILTERABLE.into_iter().chain([EventKind::Test]) {
            assert_eq!(kind.as_str().parse::<EventKind>(), Ok(kind));
        }
        for kind in ChannelKind::ALL {
            assert_eq!(kind.as_str().parse::<ChannelKind>(), Ok(kind));
        }
        assert!("proposal.rejected".parse::<EventKind>().is_err());
        assert!("discord".parse::<ChannelKind>().is_err());
    }
}
