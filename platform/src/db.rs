//! The database: one sqlx pool, shared by sea-orm (the service's tables) and apalis (the job
//! queue), on SQLite (embedded) or Postgres (scaled out).
//!
//! Every binary migrates at start. On Postgres the migration runs under a session advisory
//! lock held on a dedicated connection, so several binaries starting at once take turns: the
//! first applies the migrations, the others find nothing pending.

use std::{path::Path, str::FromStr, time::Duration};

use anyhow::Context;
use sea_orm::{ConnectionTrait, DatabaseConnection, SqlxPostgresConnector, SqlxSqliteConnector};
use sea_orm_migration::MigratorTrait;
use sqlx::{
    PgPool, SqlitePool,
    postgres::{PgConnectOptions, PgPoolOptions},
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

use crate::{
    config::{Config, DatabaseKind},
    identity_changes::IdentityChanges,
};

/// Advisory lock key under which migrations run ("fleetmig" as ASCII).
const MIGRATION_LOCK: i64 = 0x666c_6565_746d_6967;

/// The raw pool, for the queue and for statements sea-orm cannot express.
#[derive(Clone, Debug)]
pub enum Pool {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

/// The service's database handle.
#[derive(Clone, Debug)]
pub struct Database {
    pub orm: DatabaseConnection,
    pub pool: Pool,
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
        if url.starts_with("sqlite:") {
            let options = sqlite_options(url)?;
            let pool = SqlitePoolOptions::new()
                .max_connections(max_connections.max(1))
                .acquire_timeout(Duration::from_secs(30))
                .connect_with(options)
                .await
                .context("opening the SQLite database")?;
            Ok(Database {
                orm: SqlxSqliteConnector::from_sqlx_sqlite_pool(pool.clone()),
                identity: IdentityChanges::stored(pool.clone()),
                pool: Pool::Sqlite(pool),
            })
        } else {
            let options = PgConnectOptions::from_str(url).context("reading DATABASE_URL")?;
            let pool = PgPoolOptions::new()
                .max_connections(max_connections.max(1))
                .acquire_timeout(Duration::from_secs(30))
                .connect_with(options)
                .await
                .context("connecting to Postgres")?;
            Ok(Database {
                orm: SqlxPostgresConnector::from_sqlx_postgres_pool(pool.clone()),
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
                crate::jobs::setup_sqlite(pool).await
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
                    crate::jobs::setup_postgres(&single).await
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

    /// Begins a transaction that will write. On SQLite it takes the write lock at once
    /// (`BEGIN IMMEDIATE`), so concurrent writers wait for each other (up to the busy timeout)
    /// instead of failing when a read lock cannot be upgraded; Postgres needs nothing special.
    pub async fn begin_write(&self) -> Result<sea_orm::DatabaseTransaction, sea_orm::DbErr> {
        use sea_orm::{SqliteTransactionMode, TransactionOptions, TransactionTrait};
        self.orm
            .begin_with_options(TransactionOptions {
                sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                ..Default::default()
            })
            .await
    }

    pub async fn close(&self) {
        match &self.pool {
            Pool::Postgres(pool) => pool.close().await,
            Pool::Sqlite(pool) => pool.close().await,
        }
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
        .busy_timeout(Duration::from_secs(10))
        // Prepared statements kept per connection. A multi-row insert of a few hundred
        // packages is one statement of thousands of parameters, and each chunk size is a
        // statement of its own: at sqlx's default of 100 per connection they held most of the
        // embedded default's memory (BENCHMARKS.md, "Memory of the embedded default").
        .statement_cache_capacity(SQLITE_STATEMENTS))
}

/// Prepared statements kept per SQLite connection: the hot paths' statements, not every
/// insert of every chunk size.
const SQLITE_STATEMENTS: usize = 32;

/// Pool size of an api process on `DATABASE_URL`: its own 16 connections, plus, on Postgres,
/// one LISTEN connection per queue of an embedded worker (SQLite's queues are polled).
pub fn api_connections(url: &str, listeners: u32) -> u32 {
    if url.starts_with("sqlite:") {
        16
    } else {
        16 + listeners
    }
}
