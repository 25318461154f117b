//! The job queue's tables: apalis' own migrations, then the indexes its acknowledgements need
//! (run at every start, after the service's migrations).

// The job queue's own schema (apalis's tables, not entities), checked by hand-written SQL.
#![allow(clippy::disallowed_methods)]

use anyhow::Context;
use apalis_postgres::PostgresStorage;
use apalis_sqlite::SqliteStorage;
use sqlx::{PgPool, SqlitePool};

pub async fn setup_postgres(pool: &PgPool) -> anyhow::Result<()> {
    PostgresStorage::setup(pool)
        .await
        .context("creating the job queue tables")?;
    sqlx::raw_sql(POSTGRES_JOB_INDEXES)
        .execute(pool)
        .await
        .context("indexing the job queue's locks")?;
    Ok(())
}

/// apalis-postgres' acknowledgement (`queries/task/handle_result.sql`: the batch's jobs joined
/// with `apalis.jobs … WHERE jobs.lock_by = $2 … FOR UPDATE`) was planned on its `(lock_by)`
/// index: a bitmap scan of every row the worker has ever locked, finished ones included (kept a
/// week), to find the few it is acknowledging. In the changed check-in benchmark it took 20 ms
/// a call and more as the table grew, the largest item of Postgres's time (BENCHMARKS.md,
/// "Changed check-ins at 200/s"); SQLite had the same trouble ([`SQLITE_LOCK_INDEX`]). Without a
/// `(lock_by)` index the batch's rows are found by primary key.
///
/// What looks for a worker's jobs in flight (orphan and shutdown recovery, by `status =
/// 'Running' OR status = 'Queued'`) has a partial index of just those rows. What looks for a
/// worker's finished rows (the housekeeping's hourly cleanup of workers gone for a day, and the
/// foreign key's check when it deletes one) reads the table instead, once an hour.
///
/// The migrations also leave `unique_job_id`, a second unique index on `(id)` beside the
/// primary key: a job's row is inserted and updated three times (queued, running, done), each
/// update changing an indexed column and so writing every index, and the copy answers nothing
/// the primary key does not. Run at every start, after apalis' own migrations.
const POSTGRES_JOB_INDEXES: &str = "DROP INDEX IF EXISTS apalis.lidx; \
     DROP INDEX IF EXISTS apalis.idx_apalis_jobs_lock_by; \
     DROP INDEX IF EXISTS apalis.unique_job_id; \
     CREATE INDEX IF NOT EXISTS jobs_in_flight_lock_by ON apalis.jobs (lock_by) \
     WHERE status = 'Running' OR status = 'Queued';";

pub async fn setup_sqlite(pool: &SqlitePool) -> anyhow::Result<()> {
    SqliteStorage::setup(pool)
        .await
        .context("creating the job queue tables")?;
    sqlx::raw_sql(SQLITE_LOCK_INDEX)
        .execute(pool)
        .await
        .context("indexing the job queue's locks")?;
    Ok(())
}

/// apalis-sqlite's acknowledgement (`UPDATE Jobs … FROM json_each(?1) … WHERE Jobs.id =
/// j.task_id AND Jobs.lock_by = ?2`) is planned on its `LIdx (lock_by)` index while that index
/// exists: every batch then visits every row the worker has ever locked, finished ones
/// included, and parses the batch's JSON again for each. A worker that had finished 10,000 jobs
/// drained 265 jobs a second instead of 9,647 and held the write lock for seconds per
/// acknowledgement (BENCHMARKS.md, "Queue drain" and "Incremental evaluation").
/// Without `LIdx` the acknowledgement finds its rows by primary key. What looks for a worker's
/// rows by status (orphan recovery, the housekeeping's worker cleanup) has `(status, lock_by)`.
/// Run at every start, after apalis' own migrations: a migration of theirs that created
/// `LIdx` again would be undone here.
const SQLITE_LOCK_INDEX: &str = "DROP INDEX IF EXISTS LIdx; \
     CREATE INDEX IF NOT EXISTS jobs_status_lock_by ON Jobs (status, lock_by);";

#[cfg(test)]
mod tests {
    use sqlx::{Row, SqlitePool, sqlite::SqlitePoolOptions};

    use super::*;

    /// apalis-sqlite 1.0.0's `queries/task/ack.sql`, verbatim.
    const ACK: &str = "WITH j AS (
        SELECT value ->> 'task_id' AS task_id, value ->> 'attempt' AS attempt,
            value ->> 'result' AS result, value ->> 'status' AS status
        FROM json_each(?1)
    )
    UPDATE Jobs SET status = j.status, attempts = j.attempt, last_result = j.result,
        done_at = strftime('%s', 'now')
    FROM j
    WHERE Jobs.id = j.task_id AND Jobs.lock_by = ?2";

    /// apalis-sqlite 1.0.0's `queries/backend/reenqueue_orphaned.sql`, verbatim.
    const REENQUEUE_ORPHANED: &str = r#"UPDATE Jobs SET status = "Pending", done_at = NULL,
        lock_by = NULL, lock_at = NULL, attempts = attempts + 1,
        last_result = '{"Err": "Re-enqueued due to worker heartbeat timeout."}'
    WHERE id IN (
        SELECT Jobs.id FROM Jobs INNER JOIN Workers ON lock_by = Workers.id
        WHERE (status = "Running" OR status = "Queued")
            AND strftime('%s', 'now') - Workers.last_seen >= ?1
            AND Workers.worker_type = ?2
            AND (?3 IS NULL OR Workers.id != ?3)
            AND (?4 IS NULL OR Workers.id = ?4)
    )"#;

    async fn plan(pool: &SqlitePool, statement: &str, binds: usize) -> Vec<String> {
        // `statement` is one of the constants above.
        let explain = sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {statement}"));
        let mut query = sqlx::query(explain);
        for _ in 0..binds {
            query = query.bind(Option::<String>::None);
        }
        query
            .fetch_all(pool)
            .await
            .expect("explain")
            .iter()
            .map(|row| row.get::<String, _>("detail"))
            .collect()
    }

    #[tokio::test]
    async fn a_sqlite_acknowledgement_finds_its_rows_by_id_not_by_the_workers_history() {
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .expect("an in-memory database");
        setup_sqlite(&pool).await.expect("the queue's tables");
        // Twice, as every start does.
        setup_sqlite(&pool).await.expect("the queue's tables again");

        let ack = plan(&pool, ACK, 2).await;
        assert!(
            ack.iter()
                .any(|step| step
                    .starts_with("SEARCH Jobs USING INDEX sqlite_autoindex_Jobs_1 (id=?)")),
            "{ack:?}"
        );
        assert!(!ack.iter().any(|step| step.contains("lock_by")), "{ack:?}");

        let orphans = plan(&pool, REENQUEUE_ORPHANED, 4).await;
        assert!(
            !orphans.iter().any(|step| step.starts_with("SCAN Jobs")),
            "orphan recovery reads no whole table: {orphans:?}"
        );
    }
}
