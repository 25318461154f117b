//! The scheduler: one tick a second, from one leader at a time.
//!
//! On Postgres a replica leads while it holds a session advisory lock on a connection of its
//! own; the others wait and take over when the leader's connection drops. Every tick turns
//! time into jobs with idempotency keys that name their period (`housekeeping:{hour}`), so
//! even two leaders in a split second, or a restart, never queue the same period twice.

pub mod cli;

use domain::billing::jobs::BillingReport;
use domain::billing::jobs::RollupUsage;
use domain::fleet::jobs::FleetUpkeep;
use domain::intel::jobs::ReadAgentManifest;
use domain::intel::jobs::RefreshKev;
use domain::notifications::jobs::NotifyDispatch;
use domain::notifications::jobs::SendDigest;
use domain::proposals::jobs::ProposalTimers;
use entities::scope::{AllOrgs, Untenanted};
use std::{sync::Arc, time::Duration};

use anyhow::Context;
use chrono::{DateTime, Duration as Span, Timelike, Utc};
use platform::{
    clock::SharedClock,
    db::{Database, Pool},
    jobs::{Housekeeping, Queue},
};
use sqlx::{Connection, PgConnection};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// Advisory lock key of the scheduler's leadership ("fleetsch" as ASCII).
pub const LEADER_LOCK: i64 = 0x666c_6565_7473_6368;
const TICK: Duration = Duration::from_secs(1);
const FOLLOWER_RETRY: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub struct Scheduler {
    pub db: Database,
    pub queue: Queue,
    pub clock: SharedClock,
    /// The periods already queued by this process, so that a tick only touches the queue when
    /// a period begins (the idempotency keys make a repeat harmless, this makes it rare).
    queued: Arc<Mutex<std::collections::HashMap<&'static str, String>>>,
}

impl Scheduler {
    pub fn new(db: Database, clock: SharedClock) -> Scheduler {
        Scheduler {
            queue: Queue::new(&db),
            db,
            clock,
            queued: Arc::default(),
        }
    }

    /// Queues whatever is due at `now`. Safe to call any number of times for the same instant.
    pub async fn tick(&self, now: DateTime<Utc>) -> anyhow::Result<()> {
        let minute = now
            .with_second(0)
            .and_then(|t| t.with_nanosecond(0))
            .unwrap_or(now);
        let hour = minute.with_minute(0).unwrap_or(minute).to_rfc3339();
        let minute = minute.to_rfc3339();
        let yesterday = (now - Span::days(1)).date_naive();

        if self.begins("housekeeping", &hour).await {
            self.queue
                .push_unique(
                    &format!("housekeeping:{hour}"),
                    Housekeeping { hour: hour.clone() },
                )
                .await?;
            self.queued("housekeeping", &hour).await;
        }
        // The agent release manifest, at start and hourly (decisions §16).
        if self.begins("manifest", &hour).await {
            self.queue
                .push_unique(
                    &format!("manifest:{hour}"),
                    ReadAgentManifest { hour: hour.clone() },
                )
                .await?;
            self.queued("manifest", &hour).await;
        }
        // The known-exploited catalogue: the shipped snapshot at first start, then daily.
        let today = now.date_naive().to_string();
        if self.begins("kev", &today).await {
            self.queue
                .push_unique(&format!("kev:{today}"), RefreshKev { day: today.clone() })
                .await?;
            self.queued("kev", &today).await;
        }
        if self.begins("upkeep", &minute).await {
            self.queue
                .push_unique(
                    &format!("upkeep:{minute}"),
                    FleetUpkeep {
                        minute: minute.clone(),
                    },
                )
                .await?;
            self.queued("upkeep", &minute).await;
        }
        // Yesterday's usage, once its UTC day is over.
        let day = yesterday.to_string();
        if self.begins("rollup", &day).await {
            self.queue
                .push_unique(&format!("rollup:{day}"), RollupUsage { day: yesterday })
                .await?;
            self.queued("rollup", &day).await;
        }
        // Yesterday's usage to the payment processor, after 00:10 UTC (decisions §17).
        if (now.hour(), now.minute()) >= (0, 10) && self.begins("report", &day).await {
            self.queue
                .push_unique(
                    &format!("report:{day}"),
                    BillingReport {
                        day: yesterday,
                        org_id: None,
                    },
                )
                .await?;
            self.queued("report", &day).await;
        }
        // Proposals whose window opened or whose snooze ran out, rollouts whose soak ended or
        // whose window opened: cheap indexed queries a second, and a job (keyed by the second)
        // only when something is due.
        let second = now.with_nanosecond(0).unwrap_or(now).to_rfc3339();
        if self.begins("timers", &second).await && self.timers_due(now).await? {
            self.queue
                .push_unique(
                    &format!("timers:{second}"),
                    ProposalTimers { at: second.clone() },
                )
                .await?;
            self.queued("timers", &second).await;
        }
        // Notifications: a dispatch whenever an event waits or a delivery's attempt (a retry,
        // or one whose job was never queued) is due, keyed by the second.
        if self.begins("notify", &second).await && self.notifications_due(now).await? {
            self.queue
                .push_unique(
                    &format!("notify:{second}"),
                    NotifyDispatch {
                        at: Some(second.clone()),
                    },
                )
                .await?;
            self.queued("notify", &second).await;
        }
        // Digests: once a minute, one keyed job per member whose local 08:00 has come.
        if self.begins("digest", &minute).await {
            self.queue_digests(now).await?;
            self.queued("digest", &minute).await;
        }
        Ok(())
    }

    /// Whether a notification event waits for dispatch or a delivery's attempt is due
    /// without a job.
    async fn notifications_due(&self, now: DateTime<Utc>) -> anyhow::Result<bool> {
        use entities::{notification_deliveries as deliveries, notification_events as events};
        use sea_orm::{ColumnTrait, PaginatorTrait, QueryFilter, QuerySelect};
        let waiting = AllOrgs::rows::<events::Entity>()
            .filter(events::Column::DispatchedAt.is_null())
            .limit(1)
            .count(&self.db.orm)
            .await?;
        if waiting > 0 {
            return Ok(true);
        }
        let due = AllOrgs::rows::<deliveries::Entity>()
            .filter(domain::notifications::due::condition(now))
            .limit(1)
            .count(&self.db.orm)
            .await?;
        Ok(due > 0)
    }

    /// Queues the digest of every member whose local clock has reached 08:00 (Monday, for a
    /// weekly one) and who has not had this period's, keyed `digest:{org}:{account}:{period}`.
    pub async fn queue_digests(&self, now: DateTime<Utc>) -> anyhow::Result<usize> {
        use domain::notifications::digest::{Frequency, due, zone};
        use entities::{accounts, digest_settings};
        use sea_orm::{ColumnTrait, QueryFilter, QuerySelect};
        let settings = AllOrgs::rows::<digest_settings::Entity>()
            .filter(digest_settings::Column::Frequency.ne(Frequency::Off.as_str()))
            .all(&self.db.orm)
            .await?;
        let ids: Vec<uuid::Uuid> = settings.iter().map(|s| s.account_id).collect();
        let mut zones = std::collections::HashMap::new();
        for chunk in ids.chunks(500) {
            let rows: Vec<(uuid::Uuid, String)> = accounts::Entity::rows()
                .select_only()
                .column(accounts::Column::Id)
                .column(accounts::Column::TimeZone)
                .filter(accounts::Column::Id.is_in(chunk.to_vec()))
                .into_tuple()
                .all(&self.db.orm)
                .await?;
            zones.extend(rows);
        }
        let mut queued = 0;
        for setting in settings {
            let Some(frequency) = Frequency::parse(&setting.frequency) else {
                continue;
            };
            let Some(tz) = zones.get(&setting.account_id) else {
                continue;
            };
            let Some(key) = due(frequency, zone(tz), now) else {
                continue;
            };
            if setting.last_sent_key.as_deref() == Some(key.as_str()) {
                continue;
            }
            self.queue
                .push_unique(
                    &format!("digest:{}:{}:{key}", setting.org_id, setting.account_id),
                    SendDigest {
                        org_id: setting.org_id,
                        account_id: setting.account_id,
                        key,
                    },
                )
                .await?;
            queued += 1;
        }
        Ok(queued)
    }

    /// Whether a scheduled proposal's window has opened, a snooze has run out, or a rollout's
    /// soak has ended or its window opened by `now`.
    async fn timers_due(&self, now: DateTime<Utc>) -> anyhow::Result<bool> {
        if !domain::proposals::rollout::store::due(&self.db.orm, now, 1)
            .await?
            .is_empty()
        {
            return Ok(true);
        }
        use domain::ProposalStatus;
        use entities::proposals::{Column, Entity};
        use sea_orm::{ColumnTrait, Condition, PaginatorTrait, QueryFilter};
        let due = AllOrgs::rows::<Entity>()
            .filter(
                Condition::any()
                    .add(
                        Condition::all()
                            .add(Column::Status.eq(ProposalStatus::Scheduled))
                            .add(Column::ScheduledFor.lte(now)),
                    )
                    .add(
                        Condition::all()
                            .add(Column::Status.eq(ProposalStatus::Snoozed))
                            .add(Column::SnoozedUntil.lte(now)),
                    ),
            )
            .count(&self.db.orm)
            .await?;
        Ok(due > 0)
    }

    /// Whether `period` of `task` has not been queued by this process yet.
    async fn begins(&self, task: &'static str, period: &str) -> bool {
        self.queued.lock().await.get(task).map(String::as_str) != Some(period)
    }

    /// Notes that `period` of `task` is queued.
    async fn queued(&self, task: &'static str, period: &str) {
        self.queued.lock().await.insert(task, period.to_owned());
    }

    /// Ticks until `shutdown`, leading only while holding the leader lock (Postgres).
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        match self.db.pool.clone() {
            Pool::Sqlite(_) => {
                // One process owns a SQLite database: it always leads.
                tracing::info!("scheduler leading (SQLite)");
                self.lead(None, &shutdown).await;
            }
            Pool::Postgres(pool) => {
                let options = pool.connect_options().as_ref().clone();
                while !shutdown.is_cancelled() {
                    match try_lead(&options).await {
                        Ok(Some(conn)) => {
                            tracing::info!("scheduler leading");
                            self.lead(Some(conn), &shutdown).await;
                        }
                        Ok(None) => tracing::debug!("another scheduler leads; standing by"),
                        Err(err) => {
                            tracing::warn!(error = %err, "scheduler cannot reach the database")
                        }
                    }
                    tokio::select! {
                        _ = shutdown.cancelled() => {}
                        _ = tokio::time::sleep(FOLLOWER_RETRY) => {}
                    }
                }
            }
        }
        tracing::info!("scheduler stopped");
        Ok(())
    }

    /// Ticks while leading; returns when shut down or when the lock connection fails.
    async fn lead(&self, mut lock: Option<PgConnection>, shutdown: &CancellationToken) {
        let mut interval = tokio::time::interval(TICK);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = interval.tick() => {}
            }
            if let Some(conn) = lock.as_mut()
                && conn.ping().await.is_err()
            {
                tracing::warn!("lost the scheduler lock connection; standing down");
                return;
            }
            if let Err(err) = self.tick(self.clock.now()).await {
                tracing::warn!(error = %err, "scheduler tick failed");
            }
        }
        if let Some(conn) = lock {
            let _ = conn.close().await;
        }
    }
}

/// Opens a connection and tries to take the leader lock on it; `None` when another holds it.
// A lock, not a row: the one hand-written statement of the scheduler.
#[allow(clippy::disallowed_methods)]
async fn try_lead(
    options: &sqlx::postgres::PgConnectOptions,
) -> anyhow::Result<Option<PgConnection>> {
    let mut conn = PgConnection::connect_with(options)
        .await
        .context("connecting for the scheduler lock")?;
    let (locked,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1)")
        .bind(LEADER_LOCK)
        .fetch_one(&mut conn)
        .await?;
    if locked {
        Ok(Some(conn))
    } else {
        let _ = conn.close().await;
        Ok(None)
    }
}

/// The `scheduler` binary: connect, migrate, tick until SIGTERM/SIGINT.
pub async fn run_process(config: platform::config::Config) -> anyhow::Result<()> {
    let db = Database::connect(&config, 4).await?;
    db.migrate().await?;
    let scheduler = Scheduler::new(db.clone(), Arc::new(platform::clock::SystemClock));
    let shutdown = platform::runtime::shutdown_on_signal();
    let metrics =
        platform::metrics::start(config.metrics_bind, &db, &domain::QUEUE_NAMES, &shutdown).await?;
    scheduler.run(shutdown).await?;
    if let Some(metrics) = metrics {
        let _ = metrics.await;
    }
    db.close().await;
    Ok(())
}
