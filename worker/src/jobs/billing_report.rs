//! `billing.report`: yesterday's usage to the payment processor (decisions §17), each
//! organization's day once.
//!
//! The daily run (no organization) queues one job per organization with a live subscription
//! and a linked customer, for the day and for any of its last 30 days still unreported (a day
//! whose retries ran out is tried again by the next daily run). An organization's day counts
//! its host-days, keeps the count in `usage_days`, sends it as one meter event with identifier
//! and `Idempotency-Key` `<org>:<day>` (so a repeat, even after a crash between the answer and
//! the mark, is the same event to the processor), and marks the day `reported` only after a
//! 2xx. 5xx, 429 and no answer retry; any other refusal aborts (it would fail again) and is
//! logged.

use apalis::prelude::{AbortError, BoxDynError, Data};
use chrono::{Duration, NaiveDate};
use domain::billing::jobs::BillingReport;
use domain::billing::{Plan, is_live};
use entities::scope::{AllOrgs, OrgScope};
use entities::{host_days, subscriptions, usage_days};
use platform::{
    ids::OrgId,
    jobs::Queue,
    payments_api::{MeterEvent, PaymentsApi, PaymentsError},
};
use sea_orm::{
    ColumnTrait, DatabaseConnection, EntityTrait, PaginatorTrait, QueryFilter, Set,
    sea_query::{Expr, OnConflict},
};
use uuid::Uuid;

use crate::Deps;

/// How far back the daily run looks for days not reported yet.
const CATCH_UP_DAYS: i64 = 30;

pub async fn run(job: BillingReport, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let Some(api) = PaymentsApi::from_config(&deps.config, &deps.outbound) else {
        tracing::debug!(day = %job.day, "no PAYMENTS_API_URL: usage is not reported");
        return Ok(());
    };
    match job.org_id {
        None => queue_organizations(&deps, job.day).await,
        Some(org_id) => match report_day(&deps.db.orm, &api, org_id, job.day).await {
            Ok(outcome) => {
                tracing::info!(org = %OrgId::from(org_id), day = %job.day, ?outcome, "usage report");
                Ok(())
            }
            Err(Failure::Processor(err)) if !err.retryable() => {
                tracing::error!(org = %OrgId::from(org_id), day = %job.day, error = %err, "the processor refused the usage report");
                Err(AbortError::new(err).into())
            }
            Err(err) => {
                tracing::warn!(org = %OrgId::from(org_id), day = %job.day, error = %err, "usage report failed; retrying");
                Err(err.into())
            }
        },
    }
}

/// Queues `day` (and any unreported day of the last 30) of each organization with a live
/// subscription and a linked customer.
async fn queue_organizations(deps: &Deps, day: NaiveDate) -> Result<(), BoxDynError> {
    let db = &deps.db.orm;
    let queue = Queue::new(&deps.db);
    let paying = AllOrgs::rows::<subscriptions::Entity>()
        .filter(subscriptions::Column::CustomerId.is_not_null())
        .all(db)
        .await?;
    let mut queued = 0usize;
    for row in paying.into_iter().filter(|r| is_live(r.status.as_deref())) {
        let since = (day - Duration::days(CATCH_UP_DAYS)).max(row.billable_from.unwrap_or(day));
        let unreported: Vec<NaiveDate> = OrgScope::of(row.org_id)
            .rows::<usage_days::Entity>()
            .filter(usage_days::Column::Reported.eq(false))
            .filter(usage_days::Column::Day.gte(since))
            .filter(usage_days::Column::Day.lt(day))
            .all(db)
            .await?
            .into_iter()
            .map(|u| u.day)
            .collect();
        for each in unreported.into_iter().chain(std::iter::once(day)) {
            queue
                .push_unique(
                    &format!("report:{}:{each}:{day}", row.org_id),
                    BillingReport {
                        day: each,
                        org_id: Some(row.org_id),
                    },
                )
                .await?;
            queued += 1;
        }
    }
    tracing::info!(%day, queued, "usage reports queued");
    Ok(())
}

/// Why an organization's day was not reported.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error(transparent)]
    Database(#[from] sea_orm::DbErr),
    #[error(transparent)]
    Processor(#[from] PaymentsError),
}

/// What became of an organization's day.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted by the processor now (value sent).
    Reported(i64),
    /// Reported before: nothing sent.
    AlreadyReported,
    /// Nothing to report: no live subscription, no customer, before `billable_from`, or no
    /// host checked in that day.
    Nothing,
}

/// Reports organization `org_id`'s `day` once (see the module's description).
pub async fn report_day(
    db: &DatabaseConnection,
    api: &PaymentsApi,
    org_id: Uuid,
    day: NaiveDate,
) -> Result<Outcome, Failure> {
    let Some(row) = OrgScope::of(org_id)
        .rows::<subscriptions::Entity>()
        .one(db)
        .await?
    else {
        return Ok(Outcome::Nothing);
    };
    let (Some(customer), true) = (row.customer_id.as_deref(), is_live(row.status.as_deref()))
    else {
        return Ok(Outcome::Nothing);
    };
    if row.billable_from.is_some_and(|from| day < from)
        || row.plan.as_deref().map(Plan::from) == Some(Plan::Free)
    {
        return Ok(Outcome::Nothing);
    }
    let existing = OrgScope::of(org_id)
        .row_by_key::<usage_days::Entity>((org_id, day))
        .one(db)
        .await?;
    if existing.as_ref().is_some_and(|u| u.reported) {
        return Ok(Outcome::AlreadyReported);
    }
    let active = OrgScope::of(org_id)
        .rows::<host_days::Entity>()
        .filter(host_days::Column::Day.eq(day))
        .count(db)
        .await?;
    if active == 0 {
        return Ok(Outcome::Nothing);
    }
    let active_hosts = i32::try_from(active).unwrap_or(i32::MAX);
    usage_days::Entity::insert(usage_days::ActiveModel {
        org_id: Set(org_id),
        day: Set(day),
        active_hosts: Set(active_hosts),
        reported: Set(false),
    })
    .on_conflict(
        OnConflict::columns([usage_days::Column::OrgId, usage_days::Column::Day])
            .update_column(usage_days::Column::ActiveHosts)
            .to_owned(),
    )
    .exec_without_returning(db)
    .await?;
    let identifier = format!("{}:{day}", OrgId::from(org_id));
    let noon = day
        .and_hms_opt(12, 0, 0)
        .map(|t| t.and_utc().timestamp())
        .unwrap_or_default();
    api.meter_event(&MeterEvent {
        customer,
        value: i64::from(active_hosts),
        identifier: &identifier,
        timestamp: noon,
    })
    .await?;
    OrgScope::of(org_id)
        .update_rows::<usage_days::Entity>()
        .col_expr(usage_days::Column::Reported, Expr::value(true))
        .filter(usage_days::Column::Day.eq(day))
        .exec(db)
        .await?;
    Ok(Outcome::Reported(i64::from(active_hosts)))
}
