//! `notify.deliver`: one attempt at one delivery. It sends the event in the channel kind's wire
//! format through the one outbound client (or the mailer), records the attempt (time, HTTP
//! status or error, duration) and moves the delivery on: delivered on 2xx, failed on 410 or
//! after 24 hours, otherwise due again after the backoff (the scheduler queues that attempt).
//!
//! A job for an attempt already made (a duplicate, or a re-run after a killed worker that did
//! get to record it) does nothing; a re-run of an attempt that was not recorded sends again
//! with the same `webhook-id`, so delivery is at least once and receivers can deduplicate.
//! A receiver's failure is never the job's failure: only the database failing retries the job.

use domain::notifications::jobs::DeliverNotification;
use domain::notifications::jobs::SendEmail;
use entities::scope::AllOrgs;
use std::time::Instant;

use apalis::prelude::{BoxDynError, Data};
use chrono::{DateTime, Utc};
use domain::{
    DeliveryStatus,
    notifications::{
        EventKind,
        backoff::{self, Next, Outcome},
        config::{ChannelConfig, SEALED_PURPOSE},
        wire::{self, Outgoing},
    },
};
use entities::{
    notification_attempts, notification_channels, notification_deliveries, notification_events,
};
use platform::{
    ids::{DeliveryId, OrgId},
    outbound::read_limited,
};
use reqwest::Method;
use sea_orm::{ActiveModelTrait, ColumnTrait, QueryFilter, Set, sea_query::Expr};
use serde_json::Value;
use url::Url;

use crate::{Deps, mailer::DeliveryError};

/// How much of a receiver's answer is read (and then dropped): enough to reuse the connection,
/// never enough for a huge answer to matter.
const ANSWER_LIMIT: usize = 64 * 1024;

/// How one attempt went, as recorded.
struct Attempted {
    outcome: Outcome,
    status_code: Option<i32>,
    error: Option<String>,
}

pub async fn run(job: DeliverNotification, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let db = &deps.db.orm;
    let Some(delivery) = AllOrgs::row::<notification_deliveries::Entity>(job.delivery_id)
        .one(db)
        .await?
    else {
        return Ok(());
    };
    if DeliveryStatus::from(delivery.status.as_str()) != DeliveryStatus::Pending
        || delivery.attempts != job.attempt
    {
        return Ok(());
    }
    let (Some(channel), Some(event)) = (
        AllOrgs::row::<notification_channels::Entity>(delivery.channel_id)
            .one(db)
            .await?,
        AllOrgs::row::<notification_events::Entity>(delivery.event_id)
            .one(db)
            .await?,
    ) else {
        return Ok(());
    };
    // A downgrade keeps channels but stops deliveries of kinds the plan lacks.
    let plan = domain::billing::plan_of(
        db,
        OrgId::from(delivery.org_id),
        &domain::billing::default_plan(&deps.config),
    )
    .await?;
    if !domain::billing::allows_channel(&plan, &channel.kind) {
        return skip(&deps, &delivery, "plan").await;
    }
    let started = Instant::now();
    let attempted = attempt(&deps, &delivery, &channel, &event).await;
    let duration_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    record(&deps, &delivery, attempted, duration_ms).await
}

/// Makes the attempt; never fails, every problem is the attempt's error.
async fn attempt(
    deps: &Deps,
    delivery: &notification_deliveries::Model,
    channel: &notification_channels::Model,
    event: &notification_events::Model,
) -> Attempted {
    let failed = |error: String| Attempted {
        outcome: Outcome::Failed,
        status_code: None,
        error: Some(error),
    };
    let Some(key) = &deps.config.secrets_key else {
        return failed(
            "SECRETS_KEY is not configured: the channel's configuration cannot be read".into(),
        );
    };
    let config = match platform::crypto::open(key.expose(), &channel.config, SEALED_PURPOSE)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<ChannelConfig>(&bytes).ok())
    {
        Some(config) => config,
        None => {
            return failed(
                "the channel's configuration does not open with this SECRETS_KEY".into(),
            );
        }
    };
    let Ok(kind) = event.kind.parse::<EventKind>() else {
        return failed(format!("unknown event type {}", event.kind));
    };
    let mut data = match event.data.read() {
        Ok(data) => data,
        Err(err) => return failed(format!("the event's data cannot be read: {err}")),
    };
    if let (Some(url), Value::Object(fields)) = (
        link(&deps.config.base_url, &data, event.subject.as_deref()),
        &mut data,
    ) {
        fields.insert("url".into(), Value::String(url));
    }
    let now = deps.clock.now();
    let delivery_id = DeliveryId::from(delivery.id).to_string();
    let outgoing = match wire::outgoing(
        &config,
        &wire::Event {
            kind,
            subject: event.subject.as_deref(),
            data: &data,
            occurred_at: event.created_at,
        },
        &delivery_id,
        now,
        deps.config.pagerduty_events_url.as_str(),
    ) {
        Ok(outgoing) => outgoing,
        Err(err) => return failed(err.to_string()),
    };
    match outgoing {
        Outgoing::Http { url, headers, body } => {
            let Ok(url) = Url::parse(&url) else {
                return failed("the channel's URL does not parse".into());
            };
            let mut request = match deps.outbound.request(Method::POST, &url) {
                Ok(request) => request,
                Err(err) => return failed(err.to_string()),
            };
            for (name, value) in headers {
                request = request.header(name, value);
            }
            match deps.outbound.send(request.body(body)).await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    // Read a little and drop the rest: what the receiver says is not kept.
                    let _ = read_limited(response, ANSWER_LIMIT).await;
                    let outcome = backoff::outcome_of(status);
                    Attempted {
                        outcome,
                        status_code: Some(i32::from(status)),
                        error: match outcome {
                            Outcome::Delivered => None,
                            Outcome::Gone => {
                                Some("410 Gone: the receiver wants no more deliveries".into())
                            }
                            Outcome::Failed if (300..400).contains(&status) => {
                                Some(format!("{status}: a redirect elsewhere is not followed"))
                            }
                            Outcome::Failed => Some(format!("the receiver answered {status}")),
                        },
                    }
                }
                Err(err) => failed(err.to_string()),
            }
        }
        Outgoing::Email {
            to,
            subject,
            text,
            html,
        } => {
            // Only the organization's members and its verified domains, as at save: a member
            // who left, or a domain released since, is dropped (decisions §18).
            let refused =
                match domain::notifications::recipients::refused(&deps.db.orm, channel.org_id, &to)
                    .await
                {
                    Ok(refused) => refused,
                    Err(err) => {
                        return failed(format!("reading the organization's members: {err}"));
                    }
                };
            let to: Vec<String> = to.into_iter().filter(|a| !refused.contains(a)).collect();
            let Some(first) = to.first() else {
                return Attempted {
                    outcome: Outcome::Gone,
                    status_code: None,
                    error: Some(
                        "no address of the channel is a member's or at a verified domain any more"
                            .into(),
                    ),
                };
            };
            let mut email = SendEmail::new(first.clone(), subject, text, html);
            email.id = delivery.id.simple().to_string();
            match deps.mailer.deliver_to(&email, &to).await {
                Ok(()) => Attempted {
                    outcome: Outcome::Delivered,
                    status_code: None,
                    error: None,
                },
                Err(DeliveryError::Permanent(reason)) => Attempted {
                    outcome: Outcome::Gone,
                    status_code: None,
                    error: Some(format!("undeliverable: {reason}")),
                },
                Err(err) => failed(err.to_string()),
            }
        }
    }
}

/// `{base}/orgs/{slug}/proposals/{prp_…}` or `…/hosts/{hst_…}` for what the event is about.
fn link(base: &Url, data: &Value, subject: Option<&str>) -> Option<String> {
    let slug = data.pointer("/organization/slug")?.as_str()?;
    // A CVE's event links to the proposal that fixes it.
    let subject = match subject {
        Some(s) if s.starts_with("prp_") || s.starts_with("hst_") => s,
        _ => data.pointer("/proposal/id")?.as_str()?,
    };
    let collection = if subject.starts_with("prp_") {
        "proposals"
    } else if subject.starts_with("hst_") {
        "hosts"
    } else {
        return None;
    };
    let mut url = base.clone();
    url.set_path(&format!(
        "{}/orgs/{slug}/{collection}/{subject}",
        base.path().trim_end_matches('/')
    ));
    url.set_query(None);
    Some(url.to_string())
}

/// Ends a delivery without an attempt: `skipped` with `reason` (`plan`).
async fn skip(
    deps: &Deps,
    delivery: &notification_deliveries::Model,
    reason: &str,
) -> Result<(), BoxDynError> {
    let now = deps.clock.now();
    AllOrgs::update_rows::<notification_deliveries::Entity>()
        .col_expr(
            notification_deliveries::Column::Status,
            Expr::value(DeliveryStatus::Skipped),
        )
        .col_expr(
            notification_deliveries::Column::NextAttemptAt,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(
            notification_deliveries::Column::Reason,
            Expr::value(Some(reason.to_owned())),
        )
        .col_expr(notification_deliveries::Column::UpdatedAt, Expr::value(now))
        .col_expr(
            notification_deliveries::Column::FinishedAt,
            Expr::value(Some(now)),
        )
        .filter(notification_deliveries::Column::Id.eq(delivery.id))
        .filter(notification_deliveries::Column::Status.eq(DeliveryStatus::Pending))
        .filter(notification_deliveries::Column::Attempts.eq(delivery.attempts))
        .exec(&deps.db.orm)
        .await?;
    tracing::info!(delivery = %DeliveryId::from(delivery.id), reason, "notification skipped");
    Ok(())
}

/// Records the attempt and moves the delivery on, conditional on no other run having recorded
/// this attempt.
async fn record(
    deps: &Deps,
    delivery: &notification_deliveries::Model,
    attempted: Attempted,
    duration_ms: i64,
) -> Result<(), BoxDynError> {
    let now = deps.clock.now();
    let attempts = delivery.attempts.saturating_add(1);
    let next = backoff::after(attempted.outcome, delivery.created_at, attempts, now);
    let (status, next_at, finished, reason): (
        DeliveryStatus,
        Option<DateTime<Utc>>,
        _,
        Option<String>,
    ) = match next {
        Next::Delivered => (DeliveryStatus::Delivered, None, Some(now), None),
        Next::RetryAt(at) => (
            DeliveryStatus::Pending,
            Some(at),
            None,
            attempted.error.clone(),
        ),
        Next::Failed => (
            DeliveryStatus::Failed,
            None,
            Some(now),
            attempted.error.clone().map(|e| {
                if attempted.outcome == Outcome::Gone {
                    e
                } else {
                    format!("gave up after 24 hours of retries: {e}")
                }
            }),
        ),
    };
    let txn = deps.db.begin_write().await?;
    let moved = AllOrgs::update_rows::<notification_deliveries::Entity>()
        .col_expr(
            notification_deliveries::Column::Attempts,
            Expr::value(attempts),
        )
        .col_expr(
            notification_deliveries::Column::Status,
            Expr::value(&status),
        )
        .col_expr(
            notification_deliveries::Column::NextAttemptAt,
            Expr::value(next_at),
        )
        .col_expr(notification_deliveries::Column::Reason, Expr::value(reason))
        .col_expr(notification_deliveries::Column::UpdatedAt, Expr::value(now))
        .col_expr(
            notification_deliveries::Column::FinishedAt,
            Expr::value(finished),
        )
        .filter(notification_deliveries::Column::Id.eq(delivery.id))
        .filter(notification_deliveries::Column::Status.eq(DeliveryStatus::Pending))
        .filter(notification_deliveries::Column::Attempts.eq(delivery.attempts))
        .exec(&txn)
        .await?
        .rows_affected
        == 1;
    if moved {
        notification_attempts::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            delivery_id: Set(delivery.id),
            number: Set(attempts),
            at: Set(now),
            status_code: Set(attempted.status_code),
            error: Set(attempted.error.map(|e| e.chars().take(1000).collect())),
            duration_ms: Set(duration_ms),
        }
        .insert(&txn)
        .await?;
    }
    txn.commit().await?;
    if moved {
        platform::metrics::metrics().delivery(match next {
            Next::Delivered => "delivered",
            Next::RetryAt(_) => "retry",
            Next::Failed => "failed",
        });
        tracing::info!(
            delivery = %DeliveryId::from(delivery.id),
            attempt = attempts,
            status = %status,
            "notification attempt recorded"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn links_name_the_subject_under_its_organization() {
        let base = Url::parse("https://fleet.example/app/").expect("url");
        let data = json!({"organization": {"slug": "acme"}});
        assert_eq!(
            link(&base, &data, Some("prp_abc")).as_deref(),
            Some("https://fleet.example/app/orgs/acme/proposals/prp_abc")
        );
        assert_eq!(
            link(&base, &data, Some("hst_abc")).as_deref(),
            Some("https://fleet.example/app/orgs/acme/hosts/hst_abc")
        );
        assert_eq!(link(&base, &data, Some("nch_abc")), None);
        let kev = json!({"organization": {"slug": "acme"}, "proposal": {"id": "prp_x"}});
        assert_eq!(
            link(&base, &kev, Some("CVE-2026-1000")).as_deref(),
            Some("https://fleet.example/app/orgs/acme/proposals/prp_x")
        );
        assert_eq!(link(&base, &json!({}), Some("prp_abc")), None);
    }
}
