//! Job payloads and the queue the api pushes them into (apalis, in the service's own database).
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

/// Every queue's name, for what reports on all of them (the metrics' queue depths).
pub const QUEUE_NAMES: [&str; 16] = [
    SendEmail::QUEUE,
    SendLink::QUEUE,
    Housekeeping::QUEUE,
    EvaluateHost::QUEUE,
    EvaluateGroup::QUEUE,
    EvaluatePolicy::QUEUE,
    ProposalTimers::QUEUE,
    FleetUpkeep::QUEUE,
    RollupUsage::QUEUE,
    BillingReport::QUEUE,
    NotifyDispatch::QUEUE,
    DeliverNotification::QUEUE,
    SendDigest::QUEUE,
    FetchChangelog::QUEUE,
    RefreshKev::QUEUE,
    ReadAgentManifest::QUEUE,
];

/// A job payload with a stable queue name.
pub trait Job: Serialize + DeserializeOwned + Clone + Send + Sync + Unpin + 'static {
    /// The queue's name; never change it once deployed.
    const QUEUE: &'static str;
    /// In-process retries with exponential backoff after the first attempt.
    const RETRIES: usize = 5;
}

/// Deliver one email.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SendEmail {
    /// Unique per message; becomes its Message-ID (and the outbox file name).
    pub id: String,
    pub to: String,
    pub subject: String,
    pub text: String,
    pub html: String,
    /// The sign-in (or other) link the message carries; logged when there is no SMTP server.
    #[serde(default)]
    pub link: Option<String>,
}

impl Job for SendEmail {
    const QUEUE: &'static str = "email.send";
}

impl SendEmail {
    pub fn new(
        to: impl Into<String>,
        subject: impl Into<String>,
        text: String,
        html: String,
    ) -> Self {
        SendEmail {
            id: uuid::Uuid::now_v7().simple().to_string(),
            to: to.into(),
            subject: subject.into(),
            text,
            html,
            link: None,
        }
    }
}

/// Email a link that carries a one-time credential (sign-in, sign-up, invitation).
///
/// The payload names what to send, never the credential: the worker mints the token when it
/// sends the message and keeps only its hash, so the queue (whose finished rows are kept for
/// days) never holds a secret. Queued the same way whether or not the address has an account,
/// so the api's answer takes the same time for both.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SendLink {
    /// A sign-in link, sent only if an account has this address.
    SignIn { email: String },
    /// A sign-up confirmation for a new organization.
    SignUp {
        email: String,
        name: String,
        organization_name: String,
        organization_slug: String,
    },
    /// The link of a pending invitation (nothing is sent once it is accepted or revoked).
    Invitation { invitation_id: uuid::Uuid },
}

impl Job for SendLink {
    const QUEUE: &'static str = "email.link";
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

impl Job for Housekeeping {
    const QUEUE: &'static str = "queue.housekeeping";
    const RETRIES: usize = 2;
}

/// Re-evaluate one host: label-group membership now; updates and proposals as they come.
/// Idempotent: evaluating the same state twice changes nothing.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EvaluateHost {
    pub host_id: uuid::Uuid,
}

impl Job for EvaluateHost {
    const QUEUE: &'static str = "host.evaluate";
    const RETRIES: usize = 3;
}

/// Recompute which hosts a group's selector picks, after the selector changed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EvaluateGroup {
    pub group_id: uuid::Uuid,
}

impl Job for EvaluateGroup {
    const QUEUE: &'static str = "group.evaluate";
    const RETRIES: usize = 3;
}

/// Fleet upkeep, queued every minute by the scheduler: hosts silent for three check-in
/// intervals go offline (with a `went_offline` event), stale nonces are forgotten.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FleetUpkeep {
    /// The minute this run belongs to (RFC 3339); also its idempotency key.
    pub minute: String,
}

/// How long an agent request's nonce is remembered: the signature's own window (5 minutes)
/// plus the allowed clock skew. The fleet upkeep forgets older ones.
pub const NONCE_TTL_S: i64 = 600;

impl Job for FleetUpkeep {
    const QUEUE: &'static str = "fleet.upkeep";
    const RETRIES: usize = 2;
}

/// Roll up one UTC day's billable host-days into active hosts per organization. Idempotent:
/// running it again rewrites the same numbers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RollupUsage {
    /// `YYYY-MM-DD`.
    pub day: chrono::NaiveDate,
}

impl Job for RollupUsage {
    const QUEUE: &'static str = "billing.rollup";
    const RETRIES: usize = 5;
}

/// Report usage to the payment processor (decisions §17). Without `org_id`: the daily run the
/// scheduler queues after 00:10 UTC for yesterday, which queues one job per organization with a
/// live subscription (and again for any of its days of the last 30 not reported yet). With
/// `org_id`: that organization's day, sent once (identifier and `Idempotency-Key`
/// `<org>:<day>`) and marked `reported` only after the processor accepted it; a failure
/// retries with backoff.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BillingReport {
    pub day: chrono::NaiveDate,
    #[serde(default)]
    pub org_id: Option<uuid::Uuid>,
}

impl Job for BillingReport {
    const QUEUE: &'static str = "billing.report";
    /// With backoff from 1 s to 60 s: about eight minutes of retries before the job fails;
    /// the next daily run queues the day again.
    const RETRIES: usize = 12;
}

/// Recompute the proposals of one policy from its hosts' available updates. Coalesced: a
/// policy is marked dirty (one row however many hosts changed) and the job claims the mark
/// before reading, so a change during a run queues exactly one more run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EvaluatePolicy {
    pub policy_id: uuid::Uuid,
}

impl Job for EvaluatePolicy {
    const QUEUE: &'static str = "policy.evaluate";
    const RETRIES: usize = 5;
}

/// Move proposals whose time has come: `scheduled` ones whose window opened go ahead, and
/// `snoozed` ones whose snooze ran out reopen. Queued by the scheduler when one is due.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProposalTimers {
    /// The second this run belongs to (RFC 3339); also its idempotency key.
    pub at: String,
}

impl Job for ProposalTimers {
    const QUEUE: &'static str = "proposal.timers";
    const RETRIES: usize = 5;
}

/// Dispatch the notification outbox: every event not yet dispatched becomes one delivery per
/// matching channel, then every delivery due for an attempt gets its `notify.deliver` job.
/// Queued after a change that may have written an event, and by the scheduler whenever an
/// event or a delivery is waiting (so nothing waits for ever if that push was lost).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NotifyDispatch {
    /// The second the scheduler queued it for; absent when queued after a change.
    #[serde(default)]
    pub at: Option<String>,
}

impl Job for NotifyDispatch {
    const QUEUE: &'static str = "notify.dispatch";
    const RETRIES: usize = 5;
}

/// One attempt at one notification delivery. `attempt` is the number of attempts made before
/// it (0 for the first), so a duplicate job for an attempt already made does nothing; its
/// idempotency key is `deliver:{delivery}:{attempt}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeliverNotification {
    pub delivery_id: uuid::Uuid,
    pub attempt: i32,
}

impl Job for DeliverNotification {
    const QUEUE: &'static str = "notify.deliver";
    /// Only for the database failing: a receiver's failure is recorded as an attempt and
    /// retried on the delivery's own schedule, not by the queue.
    const RETRIES: usize = 3;
}

impl DeliverNotification {
    /// The idempotency key of this attempt's job.
    pub fn key(&self) -> String {
        format!("deliver:{}:{}", self.delivery_id, self.attempt)
    }

    /// The key of this attempt's job queued again in `window` after an earlier job ended
    /// without recording it (`domain::notifications::due`).
    pub fn key_again(&self, window: i64) -> String {
        format!("{}:again:{window}", self.key())
    }
}

/// One member's digest for one period (`key`: `daily:2026-11-03`, `weekly:2026-11-02`).
/// Queued by the scheduler with the idempotency key `digest:{org}:{account}:{key}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SendDigest {
    pub org_id: uuid::Uuid,
    pub account_id: uuid::Uuid,
    pub key: String,
}

impl Job for SendDigest {
    const QUEUE: &'static str = "digest.send";
    const RETRIES: usize = 5;
}

/// Fetch one changelog into the shared cache (decisions §16): one per distribution × source
/// package × target version, for every organization. `attempt` counts the retries before it
/// (5xx, timeout), each queued with backoff under the key
/// `changelog:{distro}:{source}:{version}:{attempt}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FetchChangelog {
    pub distro: String,
    pub source: String,
    pub version: String,
    #[serde(default)]
    pub attempt: i32,
}

impl Job for FetchChangelog {
    const QUEUE: &'static str = "changelog.fetch";
    /// Only for the database failing: the archive's failures are retried by the job itself
    /// over six hours.
    const RETRIES: usize = 3;
}

/// Load the shipped known-exploited catalogue if none is loaded, then read `KEV_URL` when
/// set. Queued by the scheduler daily with the key `kev:{day}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RefreshKev {
    /// `YYYY-MM-DD`.
    pub day: String,
}

impl Job for RefreshKev {
    const QUEUE: &'static str = "kev.refresh";
    const RETRIES: usize = 3;
}

/// Read the agent release manifest at `AGENT_MANIFEST_URL`. Queued by the scheduler hourly
/// (and so at start) with the key `manifest:{hour}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReadAgentManifest {
    /// The hour this run belongs to (RFC 3339).
    pub hour: String,
}

impl Job for ReadAgentManifest {
    const QUEUE: &'static str = "agent.manifest";
    const RETRIES: usize = 3;
}

impl Queue {
    /// Queues a dispatch of the notification outbox, after a change that may have written an
    /// event. A failure is logged, not returned: the change is committed, and the scheduler
    /// dispatches waiting events within seconds anyway.
    pub async fn dispatch_notifications(&self) {
        if let Err(err) = self.push(NotifyDispatch::default()).await {
            tracing::warn!(error = %err, "could not queue a notification dispatch; the scheduler will");
        }
    }
}
