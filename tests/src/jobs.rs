//! The job queue as a test sees it: the rows it holds, and running everything that is due to
//! completion, so a test can assert what a job did (or did not do) after it provably ran,
//! instead of sleeping and hoping.

use std::time::Duration;

use platform::db::Pool;
use sqlx::Row;
use tokio_util::sync::CancellationToken;

use crate::TestApp;

/// One row of the job queue.
#[derive(Clone, Debug)]
pub struct JobRow {
    pub id: String,
    /// The queue (apalis `job_type`), e.g. `email.link`.
    pub queue: String,
    /// `Pending`, `Queued`, `Running`, `Done`, `Failed` or `Killed`.
    pub status: String,
    /// The payload as text (JSON).
    pub payload: String,
    pub attempts: i64,
}

/// Jobs that a worker would still pick up within `horizon_s` seconds from now.
const OUTSTANDING_PG: &str = "SELECT count(*) FROM apalis.jobs WHERE \
     (status IN ('Pending', 'Queued', 'Running') OR (status = 'Failed' AND attempts < max_attempts)) \
     AND run_at <= now() + make_interval(secs => $1)";
const OUTSTANDING_SQLITE: &str = "SELECT count(*) FROM Jobs WHERE \
     (status IN ('Pending', 'Queued', 'Running') OR (status = 'Failed' AND attempts < max_attempts)) \
     AND run_at <= CAST(strftime('%s', 'now') AS INTEGER) + ?1";

impl TestApp {
    /// Every job row (of `queue`, or of all queues), oldest first.
    pub async fn job_rows(&self, queue: Option<&str>) -> Vec<JobRow> {
        match &self.state.db.pool {
            Pool::Postgres(pool) => sqlx::query(
                "SELECT id, job_type, status, job, attempts::bigint AS attempts FROM apalis.jobs \
                 WHERE $1::text IS NULL OR job_type = $1 ORDER BY id",
            )
            .bind(queue)
            .fetch_all(pool)
            .await
            .expect("read the job queue")
            .into_iter()
            .map(|row| job_row(&row))
            .collect(),
            Pool::Sqlite(pool) => sqlx::query(
                "SELECT id, job_type, status, job, CAST(attempts AS INTEGER) AS attempts FROM Jobs \
                 WHERE ?1 IS NULL OR job_type = ?1 ORDER BY id",
            )
            .bind(queue)
            .fetch_all(pool)
            .await
            .expect("read the job queue")
            .into_iter()
            .map(|row| job_row(&row))
            .collect(),
        }
    }

    /// Ends every job of `queue` that has not run as a job whose retries were all spent (what a
    /// database failing it through every retry leaves behind): `Failed` with no attempt left.
    pub async fn fail_jobs_for_good(&self, queue: &str) {
        let ended = match &self.state.db.pool {
            Pool::Postgres(pool) => sqlx::query(
                "UPDATE apalis.jobs SET status = 'Failed', attempts = max_attempts, \
                 lock_by = NULL WHERE job_type = $1 AND status IN ('Pending', 'Queued')",
            )
            .bind(queue)
            .execute(pool)
            .await
            .expect("fail the jobs")
            .rows_affected(),
            Pool::Sqlite(pool) => sqlx::query(
                "UPDATE Jobs SET status = 'Failed', attempts = max_attempts, lock_by = NULL \
                 WHERE job_type = ?1 AND status IN ('Pending', 'Queued')",
            )
            .bind(queue)
            .execute(pool)
            .await
            .expect("fail the jobs")
            .rows_affected(),
        };
        assert!(ended > 0, "no {queue} job was waiting to be failed");
    }

    /// How many jobs are queued, running or due for a retry within `horizon` from now.
    pub async fn outstanding_jobs(&self, horizon: Duration) -> i64 {
        let seconds = horizon.as_secs_f64();
        match &self.state.db.pool {
            Pool::Postgres(pool) => sqlx::query_scalar(OUTSTANDING_PG)
                .bind(seconds)
                .fetch_one(pool)
                .await
                .expect("count outstanding jobs"),
            Pool::Sqlite(pool) => sqlx::query_scalar(OUTSTANDING_SQLITE)
                .bind(seconds.ceil() as i64)
                .fetch_one(pool)
                .await
                .expect("count outstanding jobs"),
        }
    }

    /// Runs every job that is due (and every job those jobs queue, when due within a couple
    /// of seconds, such as coalesced evaluations) to completion, then returns. With the app's
    /// own worker running it waits for that worker; without one it runs a worker for the
    /// duration. Fails the test when the queue does not drain within a minute.
    pub async fn run_pending_jobs(&self) {
        let temporary = (!self.worker_running).then(|| {
            let mut deps = worker::Deps::new(
                self.state.config.clone(),
                self.state.db.clone(),
                self.state.clock.clone(),
            )
            .expect("worker deps");
            deps.reports = self.reports.clone();
            let mut options = worker::WorkerOptions::new(4);
            options.shutdown_timeout = Duration::from_secs(5);
            let shutdown = CancellationToken::new();
            let task = tokio::spawn(worker::run(deps, options, shutdown.clone()));
            (shutdown, task)
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        // Idle twice in a row: a job that just finished may have queued another.
        let mut idle = 0;
        while idle < 2 {
            if self.outstanding_jobs(Duration::from_secs(2)).await == 0 {
                idle += 1;
            } else {
                idle = 0;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the job queue did not drain within a minute: {:?}",
                self.job_rows(None)
                    .await
                    .into_iter()
                    .filter(|j| !matches!(j.status.as_str(), "Done" | "Killed"))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        if let Some((shutdown, task)) = temporary {
            shutdown.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

fn job_row<R: Row>(row: &R) -> JobRow
where
    for<'r> &'r str: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Vec<u8>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let payload: Vec<u8> = row.try_get("job").expect("job payload");
    JobRow {
        id: row.try_get("id").expect("job id"),
        queue: row.try_get("job_type").expect("job type"),
        status: row.try_get("status").expect("job status"),
        payload: String::from_utf8_lossy(&payload).into_owned(),
        attempts: row.try_get("attempts").expect("attempts"),
    }
}
