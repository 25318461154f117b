//! The job queue (apalis, in the service's own database): the [`Job`] trait every payload
//! implements, and [`Queue`], where the api, the scheduler and jobs push them. The payloads live
//! beside the rules of their work (`domain::fleet::jobs`, `domain::notifications::jobs`, …);
//! only the queue's own [`Housekeeping`] is here.
//!
//! Each job type names its queue explicitly (`Job::QUEUE`), so the api and every worker agree on
//! it whatever the Rust path of the type. Payloads only ever gain optional fields: a row that a
//! worker cannot decode stops that worker (apalis 1.0), so old rows must stay readable.

use std::{
    collections::HashMap,
    sync::{Arc, LazyLock, Mutex, PoisonError},
    time::Duration,
};

use apalis::prelude::{TaskBuilder, TaskSink};
use apalis_postgres::PostgresStorage;
use apalis_sqlite::SqliteStorage;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use tokio::sync::Notify;

use crate::db::{Database, Pool};

/// How often a worker proves it is alive, and how many beats it may miss before its jobs are
/// given to another worker: a killed worker's job runs again after about 6 s.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
pub const MISSED_HEARTBEATS: u32 = 3;

/// Declares a payload's queue and, where it is not the default, its in-process retries:
/// `platform::job!(EvaluateHost, "host.evaluate", retries = 3);`.
#[macro_export]
macro_rules! job {
    ($payload:ty, $queue:literal) => {
        impl $crate::jobs::Job for $payload {
            const QUEUE: &'static str = $queue;
        }
    };
    ($payload:ty, $queue:literal, retries = $retries:literal) => {
        impl $crate::jobs::Job for $payload {
            const QUEUE: &'static str = $queue;
            const RETRIES: usize = $retries;
        }
    };
}

/// A job payload with a stable queue name.
pub trait Job: Serialize + DeserializeOwned + Clone + Send + Sync + Unpin + 'static {
    /// The queue's name; never change it once deployed.
    const QUEUE: &'static str;
    /// In-process retries with exponential backoff after the first attempt.
    const RETRIES: usize = 5;
}

pub fn postgres_config(queue: &str) -> apalis_postgres::Config {
    apalis_postgres::Config::default()
        .queue(queue)
        .heartbeat_interval(HEARTBEAT)
        .missed_heartbeats(MISSED_HEARTBEATS as usize)
        .batch_size(50)
}

pub fn sqlite_config(queue: &str) -> apalis_sqlite::Config {
    apalis_sqlite::Config::default()
        .queue(queue)
        .heartbeat_interval(HEARTBEAT)
        .missed_heartbeats(MISSED_HEARTBEATS as usize)
        .batch_size(50)
}

/// One [`Notify`] per queue, notified when this process pushes a job to it ([`pushed_to`]).
static PUSHED: LazyLock<Mutex<HashMap<&'static str, Arc<Notify>>>> =
    LazyLock::new(Default::default);

/// What this process's workers of `queue` wait on between polls: notified whenever this
/// process pushes a job to `queue` (kept until a worker polls, `notify_one`), so that a
/// worker starts on it at once without polling often. A job pushed by another process, or to
/// run later, is found at the worker's next poll.
pub fn pushed_to(queue: &'static str) -> Arc<Notify> {
    PUSHED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(queue)
        .or_default()
        .clone()
}

/// Where jobs are pushed: the apalis storage in the service's database, through
/// [`Database::queue_pool`].
#[derive(Clone, Debug)]
pub struct Queue {
    pool: Pool,
}

/// Whether a push with an idempotency key queued a job or found one queued already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    Queued,
    AlreadyQueued,
}

impl Queue {
    pub fn new(db: &Database) -> Queue {
        Queue {
            pool: db.queue_pool().clone(),
        }
    }

    /// Queues `job` to run as soon as a worker is free.
    pub async fn push<J: Job>(&self, job: J) -> anyhow::Result<()> {
        self.push_task(job, None, None).await.map(|_| ())
    }

    /// Queues `job` to run after `delay`.
    pub async fn push_after<J: Job>(&self, job: J, delay: Duration) -> anyhow::Result<()> {
        self.push_task(job, None, Some(delay)).await.map(|_| ())
    }

    /// [`Queue::push_unique`], to run after `delay`.
    pub async fn push_unique_after<J: Job>(
        &self,
        key: &str,
        job: J,
        delay: Duration,
    ) -> anyhow::Result<Pushed> {
        self.push_task(job, Some(key), Some(delay)).await
    }

    /// Queues `job` unless a job with the same `key` exists in its queue. Keys stay taken until
    /// the row is deleted, so a key must name its period (`digest:{member}:{local date}`).
    pub async fn push_unique<J: Job>(&self, key: &str, job: J) -> anyhow::Result<Pushed> {
        self.push_task(job, Some(key), None).await
    }

    /// Queues every `(key, job)` at once, skipping those whose key is taken (see
    /// [`Queue::push_unique`]). One bulk insert; on Postgres a taken key fails the whole batch,
    /// which is then pushed one job at a time.
    pub async fn push_unique_many<J: Job>(&self, jobs: Vec<(String, J)>) -> anyhow::Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        let tasks = |jobs: &[(String, J)]| {
            jobs.iter()
                .map(|(key, job)| {
                    TaskBuilder::new(job.clone())
                        .max_attempts(J::RETRIES + 1)
                        .idempotency_key(key)
                        .build()
                })
                .collect::<Vec<_>>()
        };
        let queued = match &self.pool {
            Pool::Postgres(pool) => {
                let mut storage =
                    PostgresStorage::<J>::new(pool).with_config(postgres_config(J::QUEUE));
                let batch = futures::stream::iter(tasks(&jobs));
                match storage.push_all(&mut Box::pin(batch)).await {
                    Ok(()) => Ok(()),
                    Err(err) if is_unique_violation(&err) => {
                        for (key, job) in jobs {
                            self.push_unique(&key, job).await?;
                        }
                        Ok(())
                    }
                    Err(err) => Err(anyhow::anyhow!("queueing {} jobs: {err}", J::QUEUE)),
                }
            }
            Pool::Sqlite(pool) => {
                let mut storage =
                    SqliteStorage::<J>::new(pool).with_config(sqlite_config(J::QUEUE));
                let batch = futures::stream::iter(tasks(&jobs));
                storage
                    .push_all(&mut Box::pin(batch))
                    .await
                    .map_err(|err| anyhow::anyhow!("queueing {} jobs: {err}", J::QUEUE))
            }
        };
        if queued.is_ok() {
            pushed_to(J::QUEUE).notify_one();
        }
        queued
    }

    async fn push_task<J: Job>(
        &self,
        job: J,
        key: Option<&str>,
        delay: Option<Duration>,
    ) -> anyhow::Result<Pushed> {
        let mut builder = TaskBuilder::new(job).max_attempts(J::RETRIES + 1);
        if let Some(key) = key {
            builder = builder.idempotency_key(key);
        }
        if let Some(delay) = delay {
            builder = builder.run_after(delay);
        }
        let task = builder.build();
        let queued = match &self.pool {
            Pool::Postgres(pool) => {
                let mut storage =
                    PostgresStorage::<J>::new(pool).with_config(postgres_config(J::QUEUE));
                match storage.push_task(task).await {
                    Ok(()) => Ok(Pushed::Queued),
                    // Postgres refuses a duplicate idempotency key with a unique violation.
                    Err(err) if key.is_some() && is_unique_violation(&err) => {
                        Ok(Pushed::AlreadyQueued)
                    }
                    Err(err) => Err(anyhow::anyhow!("queueing a {} job: {err}", J::QUEUE)),
                }
            }
            Pool::Sqlite(pool) => {
                let mut storage =
                    SqliteStorage::<J>::new(pool).with_config(sqlite_config(J::QUEUE));
                // SQLite silently skips a duplicate key; the caller cannot tell, so say Queued.
                storage
                    .push_task(task)
                    .await
                    .map_err(|err| anyhow::anyhow!("queueing a {} job: {err}", J::QUEUE))?;
                Ok(Pushed::Queued)
            }
        };
        // A job to run later is found by a poll once it is due.
        if matches!(queued, Ok(Pushed::Queued)) && delay.is_none() {
            pushed_to(J::QUEUE).notify_one();
        }
        queued
    }
}

fn is_unique_violation(err: &dyn std::fmt::Debug) -> bool {
    let text = format!("{err:?}");
    text.contains("23505") || text.contains("idx_jobs_idempotency_key")
}

/// Delete finished job rows older than a week and forget workers not seen for a day, so the
/// queue tables stay small. Queued hourly by the scheduler.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Housekeeping {
    /// The hour this run belongs to (RFC 3339); also its idempotency key.
    pub hour: String,
}

crate::job!(Housekeeping, "queue.housekeeping", retries = 2);
