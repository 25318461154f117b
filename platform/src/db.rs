//! The database: one sqlx pool, shared by sea-orm (the service's tables) and apalis (the job
//! queue), on SQLite (embedded) or Postgres (scaled out). On SQLite the process's write
//! transactions and hot writes also have one connection of their own, which they take in turn
//! ([`Database::writer`]).
//!
//! Every binary migrates at start. On Postgres the migration runs under a session advisory
//! lock held on a dedicated connection, so several binaries starting at once take turns: the
//! first applies the migrations, the others find nothing pending.

// Database plumbing, not row queries: pragmas, advisory locks, pool health and the queue's
// tables are SQL by hand; tenant rows are never read here (`entities::scope` is for those).
#![allow(clippy::disallowed_methods)]

use std::{path::Path, str::FromStr, sync::Arc, time::Duration};

use anyhow::Context;
use sea_orm::{ConnectionTrait, DatabaseConnection, SqlxPostgresConnector, SqlxSqliteConnector};
use sea_orm_migration::MigratorTrait;
use sqlx::{
    PgPool, SqlitePool,
    postgres::{PgConnectOptions, PgPoolOptions},
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous},
};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::{
    config::{Config, DatabaseKind},
    identity_changes::IdentityChanges,
};

/// How long anything waits for a pooled connection before it gives up: the api answers 503
/// `service-unavailable` then (decisions §1), a job fails its attempt and is tried again. A
/// wait is bounded so that a connection held too long (a stuck transaction, a database that
/// stopped answering) turns into a quick, visible refusal instead of requests that hang for
/// half a minute.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// A wait for a pooled connection over this is logged (a warning naming how long it took).
const ACQUIRE_SLOW: Duration = Duration::from_secs(1);

/// The pool settings every pool of the service shares: the bounded wait, and every wait
/// reported to the metrics (sqlx's `sqlx::pool::acquire` events, read by
/// [`crate::metrics::AcquireWaits`]), a slow one as a warning.
fn pool_options<DB: sqlx::Database>(max_connections: u32) -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::<DB>::new()
        .max_connections(max_connections.max(1))
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .acquire_time_level(log::LevelFilter::Trace)
        .acquire_slow_level(log::LevelFilter::Warn)
        .acquire_slow_threshold(ACQUIRE_SLOW)
        .after_release(|conn, _| Box::pin(reusable(conn)))
}

/// Whether a connection given back to the pool may be handed out again: never one still inside
/// a transaction. On a full disk SQLite fails a transaction's COMMIT and may have rolled it back
/// already, so the ROLLBACK of the dropped transaction fails too and sqlx still counts the
/// connection as inside it; handed out again, the next transaction became a savepoint of that
/// one and the next plain statement ran inside it, all answered as done and none ever committed
/// (RELIABILITY.md, "Writes acknowledged and lost after a full disk"). Closed instead, the pool
/// opens a fresh connection when one is needed.
///
/// Only a connection that still counts as inside a transaction pays a round trip: flushing a
/// queued ROLLBACK only ever leaves a transaction, so one outside needs no look (every release
/// on the hot paths).
async fn reusable<C: sqlx::Connection>(conn: &mut C) -> Result<bool, sqlx::Error> {
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    // A dropped transaction queued its ROLLBACK: let it run before looking again.
    conn.ping().await?;
    if conn.is_in_transaction() {
        tracing::warn!(
            "a database connection was given back inside a transaction (a failed COMMIT or ROLLBACK): closed, not reused"
        );
        return Ok(false);
    }
    Ok(true)
}

/// Advisory lock key under which migrations run ("fleetmig" as ASCII).
const MIGRATION_LOCK: i64 = 0x666c_6565_746d_6967;

/// The raw pool, for the queue and for statements sea-orm cannot express.
#[derive(Clone, Debug)]
pub enum Pool {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

/// The service's database handle.
/// How Postgres plans the pool's prepared statements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Planning {
    /// Postgres's default: after five executions a statement may keep one generic plan for as
    /// long as its connection lives.
    Cached,
    /// `plan_cache_mode = force_custom_plan`: planned at every execution. apalis-postgres'
    /// acknowledgement (`UPDATE apalis.jobs … FROM jsonb_array_elements($1) … WHERE lock_by =
    /// $2`) otherwise keeps the generic plan it got while `apalis.jobs` was small (a sequential
    /// scan, or a scan of every row the worker ever locked), and each acknowledgement then
    /// read the whole table as it grew: 20 ms a call on a table of 30,000 jobs (BENCHMARKS.md,
    /// "Changed check-ins at 200/s"). Planned for the table as it is, it finds its rows by
    /// primary key. The cost is a plan per statement, a fraction of a millisecond.
    EachTime,
}

#[derive(Clone, Debug)]
pub struct Database {
    pub orm: DatabaseConnection,
    pub pool: Pool,
    /// The job queue's pool ([`Database::queue_pool`]).
    queue: Pool,
    /// Where writes go ([`Database::writer`]): on SQLite a pool of one connection, on Postgres
    /// the pool itself.
    writer: DatabaseConnection,
    /// On SQLite, stops the WAL checkpoints ([`checkpoint_in_the_background`]) when the last
    /// clone is dropped.
    _checkpoints: Option<Arc<DropGuard>>,
    /// On SQLite, this process's claim on the database file, so that `api restore` refuses to
    /// overwrite it while it is open ([`crate::backup::InUse`]).
    _in_use: Option<Arc<crate::backup::InUse>>,
    /// When what authentication reads last changed (see [`crate::identity_changes`]). On
    /// Postgres it knows nothing until [`IdentityChanges::watch_postgres`] runs (the api starts it).
    pub identity: IdentityChanges,
}

impl Database {
    pub fn kind(&self) -> DatabaseKind {
        match self.pool {
            Pool::Postgres(_) => DatabaseKind::Postgres,
            Pool::Sqlite(_) => DatabaseKind::Sqlite,
        }
    }

    /// Connects using the configured URL, with `max_connections` pooled connections.
    pub async fn connect(config: &Config, max_connections: u32) -> anyhow::Result<Database> {
        Self::connect_url(config.database_url.expose(), max_connections).await
    }

    pub async fn connect_url(url: &str, max_connections: u32) -> anyhow::Result<Database> {
        Self::connect_url_planning(url, max_connections, Planning::Cached).await
    }

    /// Connects as [`Database::connect_url`] does, for a process whose statements are mostly the
    /// job queue's: on Postgres every statement is planned for its parameters and the table as
    /// it is now ([`Planning::EachTime`]). SQLite plans every statement anyway.
    pub async fn connect_queue_worker(url: &str, max_connections: u32) -> anyhow::Result<Database> {
        Self::connect_url_planning(url, max_connections, Planning::EachTime).await
    }

    async fn connect_url_planning(
        url: &str,
        max_connections: u32,
        planning: Planning,
    ) -> anyhow::Result<Database> {
        if url.starts_with("sqlite:") {
            let options = sqlite_options(url)?;
            let in_use = if options.get_filename() == Path::new(":memory:") {
                None
            } else {
                Some(Arc::new(crate::backup::InUse::claim(
                    options.get_filename(),
                )?))
            };
            let pool = pool_options::<sqlx::Sqlite>(max_connections)
                .connect_with(options.clone())
                .await
                .context("opening the SQLite database")?;
            // SQLite has one writer at a time, and a writer that finds the lock taken waits in
            // SQLite's busy handler, which sleeps between tries (up to 100 ms) and keeps no
            // queue: under a stream of short write transactions, one that has waited long tries
            // least often and can wait for seconds while newer ones go first. So the process's
            // writes take turns on one connection of their own, handed out first come, first
            // served (sqlx pools are fair); the busy handler is left to settle with other
            // processes and the job queue's own statements.
            let writer = pool_options::<sqlx::Sqlite>(1)
                .connect_with(options)
                .await
                .context("opening the SQLite database for writing")?;
            let checkpoints = checkpoint_in_the_background(pool.clone());
            Ok(Database {
                _checkpoints: Some(Arc::new(checkpoints)),
                _in_use: in_use,
                orm: SqlxSqliteConnector::from_sqlx_sqlite_pool(pool.clone()),
                queue: Pool::Sqlite(writer.clone()),
                writer: SqlxSqliteConnector::from_sqlx_sqlite_pool(writer),
                identity: IdentityChanges::stored(pool.clone()),
                pool: Pool::Sqlite(pool),
            })
        } else {
            let mut options = PgConnectOptions::from_str(url).context("reading DATABASE_URL")?;
            if planning == Planning::EachTime {
                options = options.options([("plan_cache_mode", "force_custom_plan")]);
            }
            let pool = pool_options::<sqlx::Postgres>(max_connections)
                .connect_with(options)
                .await
                .context("connecting to Postgres")?;
            let orm = SqlxPostgresConnector::from_sqlx_postgres_pool(pool.clone());
            Ok(Database {
                _checkpoints: None,
                _in_use: None,
                writer: orm.clone(),
                orm,
                queue: Pool::Postgres(pool.clone()),
                pool: Pool::Postgres(pool),
                identity: IdentityChanges::notified(),
            })
        }
    }

    /// Applies pending migrations (the service's and the job queue's).
    pub async fn migrate(&self) -> anyhow::Result<()> {
        match &self.pool {
            Pool::Sqlite(pool) => {
                migration::Migrator::up(&self.orm, None)
                    .await
                    .context("applying migrations")?;
                crate::queue_schema::setup_sqlite(pool).await
            }
            Pool::Postgres(pool) => {
                // One connection, so that the session lock and the migration share it.
                let options = pool.connect_options().as_ref().clone();
                let single = PgPoolOptions::new()
                    .max_connections(1)
                    .connect_with(options)
                    .await
                    .context("connecting to Postgres for migrations")?;
                let orm = SqlxPostgresConnector::from_sqlx_postgres_pool(single.clone());
                sqlx::query("SELECT pg_advisory_lock($1)")
                    .bind(MIGRATION_LOCK)
                    .execute(&single)
                    .await
                    .context("waiting for the migration lock")?;
                let result = async {
                    migration::Migrator::up(&orm, None)
                        .await
                        .context("applying migrations")?;
                    crate::queue_schema::setup_postgres(&single).await
                }
                .await;
                let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
                    .bind(MIGRATION_LOCK)
                    .execute(&single)
                    .await;
                single.close().await;
                result?;
                unlocked.context("releasing the migration lock")?;
                Ok(())
            }
        }
    }

    /// Whether the database answers and every migration is applied (`/readyz`).
    pub async fn ready(&self) -> bool {
        if self.orm.execute_unprepared("SELECT 1").await.is_err() {
            return false;
        }
        matches!(
            migration::Migrator::get_pending_migrations(&self.orm).await,
            Ok(pending) if pending.is_empty()
        )
    }

    /// Each pool's name, connections open, of which idle, and its maximum (for the metrics).
    pub fn pool_use(&self) -> Vec<(&'static str, u32, usize, u32)> {
        fn sqlx_use<DB: sqlx::Database>(
            name: &'static str,
            pool: &sqlx::Pool<DB>,
        ) -> (&'static str, u32, usize, u32) {
            (
                name,
                pool.size(),
                pool.num_idle(),
                pool.options().get_max_connections(),
            )
        }
        match &self.pool {
            Pool::Postgres(pool) => vec![sqlx_use("main", pool)],
            Pool::Sqlite(pool) => {
                let mut pools = vec![sqlx_use("main", pool)];
                if let Pool::Sqlite(writer) = &self.queue {
                    pools.push(sqlx_use("writer", writer));
                }
                pools
            }
        }
    }

    /// The connection for statements that write outside a transaction, on hot paths where a
    /// wait matters (a check-in's writes, marking policies for evaluation). On SQLite it is
    /// the process's one writing connection, shared with [`Database::begin_write`]: a write
    /// waits behind those queued before it, first come, first served. On Postgres it is the
    /// pool. Never use it while a transaction of [`Database::begin_write`] is open in the same
    /// task: on SQLite that transaction holds the connection.
    pub fn writer(&self) -> &DatabaseConnection {
        &self.writer
    }

    /// The pool of the job queue's statements (apalis' fetches, acknowledgements, heartbeats
    /// and pushes). On SQLite it is the writing connection's ([`Database::writer`]): nearly
    /// every statement of the queue writes (a fetch is an `UPDATE … RETURNING`, even when it
    /// finds nothing), and on connections of their own the queues' workers met the process's
    /// writers in SQLite's busy handler, which keeps no queue: beside 10,000 host evaluations
    /// a check-in-like write waited there up to 2.6 s, and fetches up to 7 s, while the lock
    /// went from one to another (BENCHMARKS.md, "The job queue on the writing connection").
    /// On the writing connection they take their turn with the other writes, first come, first
    /// served. As for the writer: never push a job while a transaction of
    /// [`Database::begin_write`] is open in the same task. On Postgres it is the pool.
    pub fn queue_pool(&self) -> &Pool {
        &self.queue
    }

    /// Begins a transaction that will write. On SQLite it runs on the process's one writing
    /// connection ([`Database::writer`]), so the process's write transactions take turns in
    /// the order they asked, and takes the write lock at once (`BEGIN IMMEDIATE`), so that it
    /// waits for other processes' writers (up to the busy timeout) instead of failing when a
    /// read lock cannot be upgraded. Postgres needs nothing special. A transaction of this
    /// kind must not open another.
    pub async fn begin_write(&self) -> Result<sea_orm::DatabaseTransaction, sea_orm::DbErr> {
        use sea_orm::{SqliteTransactionMode, TransactionOptions, TransactionTrait};
        self.writer
            .begin_with_options(TransactionOptions {
                sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                ..Default::default()
            })
            .await
    }

    pub async fn close(&self) {
        match &self.pool {
            Pool::Postgres(pool) => pool.close().await,
            Pool::Sqlite(pool) => {
                pool.close().await;
                // The writing connection's own pool (on Postgres `writer` is `pool`).
                if let Err(err) = self.writer.close_by_ref().await {
                    tracing::warn!(error = %err, "closing SQLite's writing connection");
                }
            }
        }
    }
}

/// Why the database could not serve a statement, when that is the database's state and not the
/// statement's fault: the caller should try again later (the api answers 503
/// `service-unavailable` with `Retry-After`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// No pooled connection came free within [`ACQUIRE_TIMEOUT`].
    PoolTimedOut,
    /// The server cannot be reached, is shutting down or refuses connections.
    Unreachable,
    /// The disk is full (SQLite `SQLITE_FULL`, Postgres `53100`) or the database cannot write.
    Full,
    /// Another process holds SQLite's lock past the busy timeout.
    Busy,
}

impl Unavailable {
    pub fn describe(self) -> &'static str {
        match self {
            Unavailable::PoolTimedOut => "no database connection came free in time",
            Unavailable::Unreachable => "the database cannot be reached",
            Unavailable::Full => "the database cannot write (disk full or read-only)",
            Unavailable::Busy => "the database is locked by another process",
        }
    }
}

/// Whether `err`, or anything that caused it, is the database being unable to serve now
/// ([`Unavailable`]); `None` for every other failure (a constraint, a bad statement, a row that
/// cannot be read), which is the service's or the caller's fault.
pub fn unavailable(err: &(dyn std::error::Error + 'static)) -> Option<Unavailable> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(err) = next {
        let found = if let Some(db) = err.downcast_ref::<sea_orm::DbErr>() {
            orm_unavailable(db)
        } else if let Some(runtime) = err.downcast_ref::<sea_orm::RuntimeErr>() {
            runtime_unavailable(runtime)
        } else if let Some(sqlx) = err.downcast_ref::<sqlx::Error>() {
            sqlx_unavailable(sqlx)
        } else {
            None
        };
        if found.is_some() {
            return found;
        }
        next = err.source();
    }
    None
}

fn orm_unavailable(err: &sea_orm::DbErr) -> Option<Unavailable> {
    use sea_orm::{ConnAcquireErr, DbErr};
    match err {
        DbErr::ConnectionAcquire(ConnAcquireErr::Timeout) => Some(Unavailable::PoolTimedOut),
        DbErr::ConnectionAcquire(_) => Some(Unavailable::Unreachable),
        DbErr::Conn(runtime) | DbErr::Exec(runtime) | DbErr::Query(runtime) => {
            runtime_unavailable(runtime)
        }
        _ => None,
    }
}

fn runtime_unavailable(err: &sea_orm::RuntimeErr) -> Option<Unavailable> {
    match err {
        sea_orm::RuntimeErr::SqlxError(err) => sqlx_unavailable(err),
        _ => None,
    }
}

fn sqlx_unavailable(err: &sqlx::Error) -> Option<Unavailable> {
    match err {
        sqlx::Error::PoolTimedOut => Some(Unavailable::PoolTimedOut),
        sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => Some(Unavailable::Unreachable),
        sqlx::Error::Database(db) => {
            let code = db.code()?;
            let code = code.as_ref();
            if let Ok(sqlite) = code.parse::<i64>() {
                // SQLite's primary result code is the extended code's low byte.
                match sqlite & 0xff {
                    5 | 6 => Some(Unavailable::Busy),
                    7 | 8 | 10 | 13 | 14 => Some(Unavailable::Full),
                    _ => None,
                }
            } else if code.starts_with("08") || code.starts_with("57P") {
                Some(Unavailable::Unreachable)
            } else if code.starts_with("53") || code.starts_with("58") || code == "25006" {
                Some(Unavailable::Full)
            } else {
                None
            }
        }
        _ => None,
    }
}

fn sqlite_options(url: &str) -> anyhow::Result<SqliteConnectOptions> {
    let options = SqliteConnectOptions::from_str(url).context("reading DATABASE_URL")?;
    // Create the directory of the file (`data/` on a fresh clone).
    if let Some(parent) = Path::new(options.get_filename()).parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating the directory {}", parent.display()))?;
    }
    Ok(options
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(SQLITE_BUSY_TIMEOUT)
        // Checkpoints run beside the writers instead ([`checkpoint_in_the_background`]).
        .pragma("wal_autocheckpoint", "0")
        // A WAL that a burst of writes grew is cut back to this size when it starts over,
        // instead of keeping the burst's size on disk for good.
        .pragma("journal_size_limit", WAL_BOUND_BYTES.to_string())
        // Prepared statements kept per connection. A multi-row insert of a few hundred
        // packages is one statement of thousands of parameters, and each chunk size is a
        // statement of its own: at sqlx's default of 100 per connection they held most of the
        // embedded default's memory (BENCHMARKS.md, "Memory of the embedded default").
        .statement_cache_capacity(SQLITE_STATEMENTS))
}

/// How often a SQLite database's WAL is copied into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// The WAL's size past which the background checkpoint empties and truncates it, and the size
/// the WAL file is cut back to when it starts over (`journal_size_limit`).
pub const WAL_BOUND_BYTES: u64 = 64 * 1024 * 1024;

/// How long the truncating checkpoint waits for readers and the writer before it gives up
/// until the next tick: while it waits, new writers wait for it.
const TRUNCATE_WAITS_AT_MOST: Duration = Duration::from_millis(200);

/// Copies what SQLite's WAL holds into the database file every [`CHECKPOINT_EVERY`], on a
/// connection of the pool, until the returned guard is dropped. SQLite's own checkpoint (off
/// on this process's connections) runs inside the commit that takes the WAL past 1,000 pages,
/// and while a long read keeps the WAL from being emptied, inside every commit after it: the
/// commit waited for it (655 ms of a policy's turn in one run), and so did every write queued
/// behind it on the writing connection. A passive checkpoint waits for no reader or writer,
/// and none waits for it.
///
/// A passive checkpoint never starts the WAL over, though: a writer does, when the WAL was
/// copied in full and no reader still reads from it, which a steady stream of reads and writes
/// can keep from ever happening (a soak's enrolment of 10,000 hosts grew the WAL to 2.4 GB in
/// two minutes). So once the WAL holds more than [`WAL_BOUND_BYTES`], the checkpoint is a
/// truncating one, which waits up to [`TRUNCATE_WAITS_AT_MOST`] for the readers of the WAL
/// to finish, and tries again at the next tick if they have not.
fn checkpoint_in_the_background(pool: SqlitePool) -> DropGuard {
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        let pool = &pool;
        // Fixed when the database file was made (only a VACUUM could change it): read once.
        let page_size = &tokio::sync::OnceCell::new();
        crate::every::every(CHECKPOINT_EVERY, &stopped, move || async move {
            if pool.is_closed() {
                return false;
            }
            if let Err(err) = checkpoint(pool, page_size).await
                && !pool.is_closed()
            {
                tracing::warn!(error = %err, "checkpointing SQLite's WAL");
            }
            true
        })
        .await;
    });
    stop.drop_guard()
}

/// One tick of [`checkpoint_in_the_background`].
async fn checkpoint(
    pool: &SqlitePool,
    page_size: &tokio::sync::OnceCell<i64>,
) -> Result<(), sqlx::Error> {
    // (busy, pages in the WAL, pages copied): -1 pages when the database is not in WAL mode.
    let (_, pages, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(pool)
        .await?;
    let page_size = page_size
        .get_or_try_init(|| sqlx::query_scalar("PRAGMA page_size").fetch_one(pool))
        .await?;
    let bytes = u64::try_from(pages.saturating_mul(*page_size)).unwrap_or(0);
    if bytes <= WAL_BOUND_BYTES {
        return Ok(());
    }
    let mut conn = pool.acquire().await?;
    let waits = TRUNCATE_WAITS_AT_MOST.as_millis().to_string();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "PRAGMA busy_timeout = {waits}"
    )))
    .execute(&mut *conn)
    .await?;
    let truncated = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut *conn)
        .await;
    let restored = sqlx::query(sqlx::AssertSqlSafe(format!(
        "PRAGMA busy_timeout = {}",
        SQLITE_BUSY_TIMEOUT.as_millis()
    )))
    .execute(&mut *conn)
    .await;
    if restored.is_err() {
        // A connection left with the short timeout would give up on locks too early.
        conn.close_on_drop();
    }
    truncated.map(|_| ())
}

/// How long a SQLite statement waits for a lock another connection holds.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Prepared statements kept per SQLite connection: the hot paths' statements, not every
/// insert of every chunk size.
const SQLITE_STATEMENTS: usize = 32;

/// Pool size of an api process on `DATABASE_URL`: its own 16 connections, plus, on Postgres,
/// one LISTEN connection per queue of an embedded worker (SQLite's queues are polled).
/// Waits for the Postgres transaction-scoped advisory lock named by `key` (hashed by the
/// database), held until `txn` ends: requests about one thing take turns.
pub async fn lock_for_transaction<C: ConnectionTrait>(
    txn: &C,
    key: &str,
) -> Result<(), sea_orm::DbErr> {
    txn.execute_raw(sea_orm::Statement::from_sql_and_values(
        sea_orm::DatabaseBackend::Postgres,
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        [key.into()],
    ))
    .await?;
    Ok(())
}

/// Tries the Postgres transaction-scoped advisory lock `key`, held until `txn` ends: `false`
/// when another transaction holds it.
pub async fn try_lock_for_transaction<C: ConnectionTrait>(
    txn: &C,
    key: i64,
) -> Result<bool, sea_orm::DbErr> {
    Ok(txn
        .query_one_raw(sea_orm::Statement::from_sql_and_values(
            sea_orm::DatabaseBackend::Postgres,
            "SELECT pg_try_advisory_xact_lock($1) AS locked",
            [key.into()],
        ))
        .await?
        .map(|row| row.try_get::<bool>("", "locked"))
        .transpose()?
        .unwrap_or(false))
}

pub fn api_connections(url: &str, listeners: u32) -> u32 {
    if url.starts_with("sqlite:") {
        16
    } else {
        16 + listeners
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sea_orm::ConnectionTrait;

    use super::*;

    /// A file of its own (the test's connections must share one database), removed at the end.
    struct TempDatabase(std::path::PathBuf);

    impl Drop for TempDatabase {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A SQLite database in a directory of its own, with one table made by `table`.
    async fn temp_database(table: &str) -> (TempDatabase, Database) {
        let dir = std::env::temp_dir().join(format!("fleet-db-{}", uuid::Uuid::new_v4()));
        let cleanup = TempDatabase(dir.clone());
        let url = format!("sqlite://{}/test.db?mode=rwc", dir.display());
        let db = Database::connect_url(&url, 4).await.expect("database");
        db.orm.execute_unprepared(table).await.expect("table");
        (cleanup, db)
    }

    /// Who wrote to `turns`, in the order they wrote.
    async fn turns(db: &Database) -> Vec<String> {
        db.orm
            .query_all_raw(sea_orm::Statement::from_string(
                sea_orm::DatabaseBackend::Sqlite,
                "SELECT who FROM turns ORDER BY n",
            ))
            .await
            .expect("turns")
            .iter()
            .map(|row| row.try_get::<String>("", "who").expect("who"))
            .collect()
    }

    async fn record(db: &Database, who: &str) -> Result<(), sea_orm::DbErr> {
        let txn = db.begin_write().await?;
        txn.execute_unprepared(&format!("INSERT INTO turns (who) VALUES ('{who}')"))
            .await?;
        txn.commit().await
    }

    /// SQLite's busy handler keeps no queue: a writer that asked early sleeps longer between
    /// tries (up to 100 ms) than one that asked a moment ago, so the latecomer usually takes the
    /// lock first, and under a stream of writers the early one can wait for seconds. The
    /// process's write transactions take turns in the order they asked instead.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_write_transactions_take_turns_in_the_order_they_asked() {
        let (_cleanup, db) = temp_database(
            "CREATE TABLE turns (n INTEGER PRIMARY KEY AUTOINCREMENT, who TEXT NOT NULL)",
        )
        .await;

        let holding = db.begin_write().await.expect("the first writer");
        let early = tokio::spawn({
            let db = db.clone();
            async move { record(&db, "early").await }
        });
        // The early writer has been waiting long enough to sleep 50 to 100 ms between tries;
        // the late one asks 50 ms before the lock is free.
        tokio::time::sleep(Duration::from_millis(250)).await;
        let late = tokio::spawn({
            let db = db.clone();
            async move { record(&db, "late").await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        holding.commit().await.expect("the first writer commits");
        early.await.expect("joined").expect("the early writer");
        late.await.expect("joined").expect("the late writer");

        assert_eq!(turns(&db).await, ["early", "late"]);
        db.close().await;
    }

    /// The job queue's statements take their turn with the process's writes: a push asked
    /// while a write transaction is open goes before a write asked after it. On a connection
    /// of its own the push waited in SQLite's busy handler, and the later write went first.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_the_job_queue_takes_its_turn_with_the_writes() {
        let (_cleanup, db) = temp_database(
            "CREATE TABLE turns (n INTEGER PRIMARY KEY AUTOINCREMENT, who TEXT NOT NULL)",
        )
        .await;
        let Pool::Sqlite(pool) = &db.pool else {
            unreachable!("a SQLite database")
        };
        crate::queue_schema::setup_sqlite(pool)
            .await
            .expect("the queue's tables");

        let holding = db.begin_write().await.expect("the first writer");
        let push = tokio::spawn({
            let db = db.clone();
            async move {
                let job = crate::jobs::Housekeeping {
                    hour: "2027-01-01T00:00:00Z".into(),
                };
                crate::jobs::Queue::new(&db).push(job).await
            }
        });
        tokio::time::sleep(Duration::from_millis(250)).await;
        // Writes how many jobs are queued when its turn comes.
        let late = tokio::spawn({
            let db = db.clone();
            async move {
                let txn = db.begin_write().await?;
                txn.execute_unprepared(
                    "INSERT INTO turns (who) SELECT 'late after ' || count(*) FROM Jobs",
                )
                .await?;
                txn.commit().await
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !push.is_finished(),
            "the push waits for the open transaction"
        );
        holding.commit().await.expect("the first writer commits");
        push.await.expect("joined").expect("the push");
        late.await.expect("joined").expect("the late writer");

        assert_eq!(turns(&db).await, ["late after 1"]);
        db.close().await;
    }

    /// SQLite's WAL is copied into the database file by a checkpoint beside the writers, not
    /// inside a writer's commit: the connections do not checkpoint on their own, and what a
    /// commit left in the WAL reaches the database file within a few seconds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_checkpoints_run_beside_the_writers() {
        let (cleanup, db) = temp_database("CREATE TABLE t (b BLOB NOT NULL)").await;
        let automatic: i64 = db
            .writer()
            .query_one_raw(sea_orm::Statement::from_string(
                sea_orm::DatabaseBackend::Sqlite,
                "PRAGMA wal_autocheckpoint",
            ))
            .await
            .expect("pragma")
            .expect("a row")
            .try_get_by_index(0)
            .expect("pages");
        assert_eq!(
            automatic, 0,
            "the writing connection checkpoints in its commits"
        );

        let file = cleanup.0.join("test.db");
        let before = std::fs::metadata(&file).expect("the database file").len();
        let txn = db.begin_write().await.expect("a writer");
        for _ in 0..16 {
            txn.execute_unprepared("INSERT INTO t (b) VALUES (randomblob(512 * 1024))")
                .await
                .expect("insert");
        }
        txn.commit().await.expect("commit");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::fs::metadata(&file).expect("the database file").len() < before + 8_000_000 {
            assert!(
                std::time::Instant::now() < deadline,
                "8 MiB committed did not reach the database file in 10 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        db.close().await;
    }

    /// A burst of writes while a read holds the WAL open grows the WAL past its bound; once
    /// the read is over, the background checkpoint empties the WAL and the file is cut back,
    /// instead of keeping the burst's size on disk for good (a soak's enrolment of 10,000 hosts
    /// left a WAL of 2.4 GB behind).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_wal_is_cut_back_after_a_burst() {
        use sea_orm::TransactionTrait;

        let (cleanup, db) = temp_database("CREATE TABLE t (b BLOB NOT NULL)").await;
        let wal = cleanup.0.join("test.db-wal");
        let wal_bytes = || std::fs::metadata(&wal).map_or(0, |m| m.len());
        // A read transaction keeps what it has seen of the WAL from being overwritten.
        let reader = db.orm.begin().await.expect("a reader");
        reader
            .execute_unprepared("SELECT count(*) FROM t")
            .await
            .expect("read");
        let mib = WAL_BOUND_BYTES / (1024 * 1024);
        for _ in 0..mib + 16 {
            db.writer()
                .execute_unprepared("INSERT INTO t (b) VALUES (randomblob(1024 * 1024))")
                .await
                .expect("insert");
        }
        assert!(
            wal_bytes() > WAL_BOUND_BYTES,
            "the burst did not grow the WAL past its bound"
        );
        reader.rollback().await.expect("the read ends");
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while wal_bytes() > WAL_BOUND_BYTES {
            assert!(
                std::time::Instant::now() < deadline,
                "the WAL was still {} bytes 15 s after the burst",
                wal_bytes()
            );
            // Writes go on, as in a running service.
            db.writer()
                .execute_unprepared("INSERT INTO t (b) VALUES (x'00')")
                .await
                .expect("insert");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        db.close().await;
    }

    /// Reads do not wait for the writer: a read on the pool answers while a write transaction
    /// is open (WAL), and a write outside a transaction takes its turn behind it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_reads_go_on_while_a_write_transaction_is_open() {
        let (_cleanup, db) = temp_database("CREATE TABLE t (n INTEGER NOT NULL)").await;
        let txn = db.begin_write().await.expect("a writer");
        txn.execute_unprepared("INSERT INTO t (n) VALUES (1)")
            .await
            .expect("insert");
        let queued = tokio::spawn({
            let db = db.clone();
            async move {
                db.writer()
                    .execute_unprepared("INSERT INTO t (n) VALUES (2)")
                    .await
            }
        });
        let seen = tokio::time::timeout(
            Duration::from_secs(5),
            db.orm.query_all_raw(sea_orm::Statement::from_string(
                sea_orm::DatabaseBackend::Sqlite,
                "SELECT n FROM t",
            )),
        )
        .await
        .expect("a read does not wait for the writer")
        .expect("read");
        assert!(
            seen.is_empty(),
            "the open transaction's row is not visible yet"
        );
        assert!(!queued.is_finished(), "the queued write waits its turn");
        txn.commit().await.expect("commit");
        queued.await.expect("joined").expect("the queued write");
        let rows = db
            .orm
            .query_all_raw(sea_orm::Statement::from_string(
                sea_orm::DatabaseBackend::Sqlite,
                "SELECT n FROM t ORDER BY n",
            ))
            .await
            .expect("read");
        assert_eq!(rows.len(), 2);
        db.close().await;
    }
}
