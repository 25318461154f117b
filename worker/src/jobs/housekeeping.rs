//! `queue.housekeeping`: trims the job queue's tables and the rate limiter's. Finished rows are
//! kept a week so an operator can still read recent failures; idempotency keys name their
//! period, so deleting old rows never lets a period fire twice. Limiter rows idle for over an
//! hour are deleted: a bucket whose theoretical arrival time has passed is full, exactly as a
//! missing row is (api `rate_limit`), so this forgets nothing, and the table holds only the
//! last hour's callers however many addresses come and go. Payment events received over 30
//! days ago are forgotten: the processor redelivers for days, not weeks, and a signature over
//! 300 s old is refused anyway, so no event can come back once its record is gone. A `pending`
//! changelog with no fetch coming is queued again (`domain::intel::cache::requeue_stranded`).
//! Emailed-link sends older than an hour are forgotten (`domain::email_limits`: the longest
//! window they are counted in). Notification events and deliveries, host events, audit events
//! and finished host jobs older than their retention (decisions §23, `RETENTION_*_DAYS`) are
//! deleted in small batches, never a record still needed (`domain::retention`).

use apalis::prelude::{BoxDynError, Data};
use chrono::Duration;
use platform::{db::Pool, jobs::Housekeeping};

use crate::Deps;

const KEEP_FINISHED: Duration = Duration::days(7);
const FORGET_WORKERS: Duration = Duration::days(1);
const FORGET_IDLE_BUCKETS: Duration = Duration::hours(1);
const FORGET_PAYMENT_EVENTS: Duration = Duration::days(30);

pub async fn run(job: Housekeeping, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let now = deps.clock.now();
    let finished_before = now - KEEP_FINISHED;
    let seen_before = now - FORGET_WORKERS;
    let idle_before_ms = (now - FORGET_IDLE_BUCKETS).timestamp_millis();
    // The job queue's tables and the rate limiter's own: infrastructure, no tenant rows, and
    // not entities (the queue's schema is apalis's), so trimmed by hand-written SQL.
    #[allow(clippy::disallowed_methods)]
    let (jobs, workers, buckets) = match deps.db.queue_pool() {
        Pool::Postgres(pool) => {
            let jobs = sqlx::query(
                "DELETE FROM apalis.jobs WHERE (status IN ('Done', 'Killed') \
                 OR (status = 'Failed' AND attempts >= max_attempts)) AND done_at < $1",
            )
            .bind(finished_before)
            .execute(pool)
            .await?
            .rows_affected();
            let workers = sqlx::query(
                "DELETE FROM apalis.workers w WHERE last_seen < $1 \
                 AND NOT EXISTS (SELECT 1 FROM apalis.jobs j WHERE j.lock_by = w.id)",
            )
            .bind(seen_before)
            .execute(pool)
            .await?
            .rows_affected();
            let buckets = sqlx::query("DELETE FROM rate_limits WHERE tat_ms < $1")
                .bind(idle_before_ms)
                .execute(pool)
                .await?
                .rows_affected();
            (jobs, workers, buckets)
        }
        Pool::Sqlite(pool) => {
            let jobs = sqlx::query(
                "DELETE FROM Jobs WHERE (status IN ('Done', 'Killed') \
                 OR (status = 'Failed' AND attempts >= max_attempts)) AND done_at < ?",
            )
            .bind(finished_before.timestamp())
            .execute(pool)
            .await?
            .rows_affected();
            let workers = sqlx::query(
                "DELETE FROM Workers WHERE last_seen < ? \
                 AND NOT EXISTS (SELECT 1 FROM Jobs j WHERE j.lock_by = Workers.id)",
            )
            .bind(seen_before.timestamp())
            .execute(pool)
            .await?
            .rows_affected();
            let buckets = sqlx::query("DELETE FROM rate_limits WHERE tat_ms < ?")
                .bind(idle_before_ms)
                .execute(pool)
                .await?
                .rows_affected();
            (jobs, workers, buckets)
        }
    };
    let payment_events = {
        use entities::payment_events::{Column, Entity};
        use entities::scope::Untenanted;
        use sea_orm::{ColumnTrait, QueryFilter};
        Entity::delete_rows()
            .filter(Column::ReceivedAt.lt(now - FORGET_PAYMENT_EVENTS))
            .exec(&deps.db.orm)
            .await?
            .rows_affected
    };
    let changelogs = domain::intel::cache::requeue_stranded(&deps.db, now).await?;
    let email_sends = domain::email_limits::forget_before(&deps.db.orm, now).await?;
    let pruned = domain::retention::prune(&deps.db, deps.config.retention, now).await?;
    tracing::info!(
        hour = %job.hour,
        jobs,
        workers,
        buckets,
        payment_events,
        changelogs,
        email_sends,
        notification_deliveries = pruned.notification_deliveries,
        notification_events = pruned.notification_events,
        host_events = pruned.host_events,
        audit_events = pruned.audit_events,
        host_jobs = pruned.host_jobs,
        "housekeeping done"
    );
    Ok(())
}
