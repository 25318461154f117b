//! `queue.housekeeping`: trims the job queue's tables. Finished rows are kept a week so an
//! operator can still read recent failures; idempotency keys name their period, so deleting
//! old rows never lets a period fire twice.

use apalis::prelude::{BoxDynError, Data};
use chrono::Duration;
use platform::{db::Pool, jobs::Housekeeping};

use crate::Deps;

const KEEP_FINISHED: Duration = Duration::days(7);
const FORGET_WORKERS: Duration = Duration::days(1);

pub async fn run(job: Housekeeping, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let now = deps.clock.now();
    let finished_before = now - KEEP_FINISHED;
    let seen_before = now - FORGET_WORKERS;
    let (jobs, workers) = match &deps.db.pool {
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
            (jobs, workers)
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
            (jobs, workers)
        }
    };
    tracing::info!(hour = %job.hour, jobs, workers, "queue housekeeping done");
    Ok(())
}
