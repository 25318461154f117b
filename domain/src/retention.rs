//! Retention (decisions §23): records that only grow are deleted once older than the days the
//! deployment keeps them (`RETENTION_*_DAYS`), by the hourly housekeeping.
//!
//! Pruning never holds a write lock for long: each pass reads the ids of at most [`BATCH`] old
//! rows (a read, no lock), then deletes exactly those by primary key in a statement of its own
//! on the process's writing connection ([`Database::writer`]: on SQLite it takes its turn with
//! the other writes). A run deletes at most [`MAX_BATCHES`] batches per kind; what is left goes
//! at the next hour.
//!
//! What is still needed is never deleted, however old:
//! - the `advisory.known_exploited` event of an organization and CVE: it is the record that the
//!   CVE was announced there, and its absence would announce it again
//!   (`policy::evaluate::announce_known_exploited`);
//! - a notification event not yet dispatched, or that still has a delivery (a pending one is
//!   retrying; deliveries are pruned on their own age first);
//! - a delivery that is still `pending` (retrying), and so its attempts;
//! - a host job its agent has not reported on (`pending`, `dispatched`);
//! - billing (`host_days`, `usage_days`): not pruned at all, so a day not yet reported to the
//!   payment processor stays until it is.

use chrono::{DateTime, Duration, Utc};
use entities::scope::{AllOrgs, Tenant, Untenanted};
use entities::{
    audit_events, host_events, host_jobs, notification_attempts, notification_deliveries,
    notification_events,
};
use platform::{config::Retention, db::Database};
use sea_orm::{
    ColumnTrait, Condition, DbErr, QueryFilter, QueryOrder, QuerySelect,
    sea_query::{Expr, ExprTrait},
};
use uuid::Uuid;

use crate::{
    notifications::EventKind,
    status::{DeliveryStatus, HostJobStatus},
};

/// Rows deleted per statement.
pub const BATCH: u64 = 500;
/// Batches per kind and run.
pub const MAX_BATCHES: u32 = 200;

/// How many rows of each kind a run deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub notification_deliveries: u64,
    pub notification_events: u64,
    pub host_events: u64,
    pub audit_events: u64,
    pub host_jobs: u64,
}

/// The instant before which a record kept `days` is pruned at `now`.
fn cutoff(now: DateTime<Utc>, days: u32) -> DateTime<Utc> {
    now - Duration::days(i64::from(days))
}

/// Deletes what `retention` no longer keeps at `now`.
pub async fn prune(
    db: &Database,
    retention: Retention,
    now: DateTime<Utc>,
) -> Result<Pruned, DbErr> {
    let notifications = cutoff(now, retention.notifications_days);
    Ok(Pruned {
        notification_deliveries: prune_deliveries(db, notifications).await?,
        notification_events: prune_events(db, notifications).await?,
        host_events: prune_host_events(db, cutoff(now, retention.host_events_days)).await?,
        audit_events: prune_audit_events(db, cutoff(now, retention.audit_events_days)).await?,
        host_jobs: prune_host_jobs(db, cutoff(now, retention.host_jobs_days)).await?,
    })
}

/// Runs `batch` (one read of ids, one delete of them) until it deletes less than [`BATCH`] or
/// [`MAX_BATCHES`] ran; the total deleted.
async fn in_batches<F, Fut>(mut batch: F) -> Result<u64, DbErr>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64, DbErr>>,
{
    let mut total = 0;
    for _ in 0..MAX_BATCHES {
        let deleted = batch().await?;
        total += deleted;
        if deleted < BATCH {
            break;
        }
        // Let whatever waits for the writing connection go between batches.
        tokio::task::yield_now().await;
    }
    Ok(total)
}

/// Finished deliveries (delivered, failed, skipped) made before `before`, with their attempts.
async fn prune_deliveries(db: &Database, before: DateTime<Utc>) -> Result<u64, DbErr> {
    in_batches(|| async move {
        let ids: Vec<Uuid> = AllOrgs::rows::<notification_deliveries::Entity>()
            .select_only()
            .column(notification_deliveries::Column::Id)
            .filter(notification_deliveries::Column::CreatedAt.lt(before))
            .filter(notification_deliveries::Column::Status.ne(DeliveryStatus::Pending))
            .order_by_asc(notification_deliveries::Column::CreatedAt)
            .limit(BATCH)
            .into_tuple()
            .all(&db.orm)
            .await?;
        if ids.is_empty() {
            return Ok(0);
        }
        notification_attempts::Entity::delete_rows()
            .filter(notification_attempts::Column::DeliveryId.is_in(ids.clone()))
            .exec(db.writer())
            .await?;
        let deleted = AllOrgs::delete_rows::<notification_deliveries::Entity>()
            .filter(notification_deliveries::Column::Id.is_in(ids))
            // Not one that went back to pending in between.
            .filter(notification_deliveries::Column::Status.ne(DeliveryStatus::Pending))
            .exec(db.writer())
            .await?
            .rows_affected;
        Ok(deleted)
    })
    .await
}

/// What makes an event prunable, besides its age: dispatched, no delivery left, and not the
/// record of a known-exploited CVE's announcement.
fn event_prunable() -> Condition {
    Condition::all()
        .add(notification_events::Column::DispatchedAt.is_not_null())
        .add(notification_events::Column::Kind.ne(EventKind::AdvisoryKnownExploited.as_str()))
        .add(
            Expr::exists(
                AllOrgs::select::<notification_deliveries::Entity>()
                    .expr(Expr::val(1))
                    .and_where(
                        Expr::col((
                            notification_deliveries::Entity,
                            notification_deliveries::Column::EventId,
                        ))
                        .equals((notification_events::Entity, notification_events::Column::Id)),
                    )
                    .to_owned(),
            )
            .not(),
        )
}

/// One kind's rows older than `before` by its `time` column and `prunable` besides, oldest
/// first, batch by batch. `prunable` is checked again as a batch is deleted: a row that stopped
/// being prunable since the read (a delivery made for an event, a job handed out again) stays.
async fn prune_older<E: Tenant>(
    db: &Database,
    (id, time): (E::Column, E::Column),
    before: DateTime<Utc>,
    prunable: impl Fn() -> Condition + Copy,
) -> Result<u64, DbErr> {
    in_batches(|| async move {
        let ids: Vec<Uuid> = AllOrgs::rows::<E>()
            .select_only()
            .column(id)
            .filter(time.lt(before))
            .filter(prunable())
            .order_by_asc(time)
            .limit(BATCH)
            .into_tuple()
            .all(&db.orm)
            .await?;
        if ids.is_empty() {
            return Ok(0);
        }
        Ok(AllOrgs::delete_rows::<E>()
            .filter(id.is_in(ids))
            .filter(prunable())
            .exec(db.writer())
            .await?
            .rows_affected)
    })
    .await
}

async fn prune_events(db: &Database, before: DateTime<Utc>) -> Result<u64, DbErr> {
    use notification_events::{Column, Entity};
    prune_older::<Entity>(db, (Column::Id, Column::CreatedAt), before, event_prunable).await
}

async fn prune_host_events(db: &Database, before: DateTime<Utc>) -> Result<u64, DbErr> {
    use host_events::{Column, Entity};
    prune_older::<Entity>(db, (Column::Id, Column::CreatedAt), before, Condition::all).await
}

async fn prune_audit_events(db: &Database, before: DateTime<Utc>) -> Result<u64, DbErr> {
    use audit_events::{Column, Entity};
    prune_older::<Entity>(db, (Column::Id, Column::CreatedAt), before, Condition::all).await
}

/// Host jobs their agent reported on (`succeeded`, `failed`) that finished before `before`.
async fn prune_host_jobs(db: &Database, before: DateTime<Utc>) -> Result<u64, DbErr> {
    use host_jobs::{Column, Entity};
    let finished = || {
        Condition::all()
            .add(Column::Status.is_not_in(HostJobStatus::UNFINISHED.iter().map(|s| s.as_str())))
    };
    prune_older::<Entity>(db, (Column::Id, Column::FinishedAt), before, finished).await
}
