//! `notify.dispatch`: the notification outbox becomes deliveries. Waiting events are claimed
//! a batch at a time in a write transaction (on Postgres, rows another dispatcher holds are
//! skipped, so concurrent dispatchers make each event's deliveries once; a unique index on
//! event × channel backs that), routed to its organization's channels whose
//! `events` filter matches (a `test` event to its one channel), and its deliveries are written
//! in the claim's transaction. Then every delivery due for an attempt without a job gets one,
//! keyed by delivery and attempt, so a repeat queues nothing twice.

use domain::notifications::jobs::DeliverNotification;
use domain::notifications::jobs::NotifyDispatch;
use entities::scope::{AllOrgs, OrgScope};
use std::collections::{HashMap, hash_map::Entry};

use apalis::prelude::{BoxDynError, Data};
use chrono::{DateTime, Utc};
use domain::{
    DeliveryStatus,
    notifications::{EventKind, due, routing},
};
use entities::{notification_channels, notification_deliveries, notification_events};
use platform::{ids::DeliveryId, jobs::Queue};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseBackend, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
    sea_query::{Expr, LockBehavior, LockType},
};
use uuid::Uuid;

use crate::Deps;

/// Events claimed per query; the job loops until none waits.
const EVENTS_BATCH: u64 = 100;
/// Deliveries written per statement (both databases' parameter limits allow it).
const INSERT_CHUNK: usize = 500;
/// Delivery jobs queued per run; the scheduler queues another run while more are due.
const DUE_BATCH: u64 = 5000;

pub async fn run(_job: NotifyDispatch, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let now = deps.clock.now();
    while dispatch_batch(&deps, now).await? == EVENTS_BATCH {}
    queue_due(&deps, now).await?;
    Ok(())
}

/// Claims up to [`EVENTS_BATCH`] waiting events and writes one delivery per channel that
/// wants each, in one write transaction; answers how many it claimed.
///
/// On Postgres the batch is read `FOR UPDATE SKIP LOCKED`, so concurrent dispatchers take
/// disjoint batches: each used to read the same first hundred events and claim them one by
/// one, waiting on the row each time another dispatcher held it, then finding it claimed
/// (after 10,000 enrolments, 33,855 claims for 1,079 events; BENCHMARKS.md, "Changed
/// check-ins at 200/s"). A row another dispatcher claimed and committed meanwhile no longer
/// matches `dispatched_at IS NULL` when it is locked, so it is not returned. SQLite's write
/// transactions are serial, and the read inside one sees every earlier claim.
async fn dispatch_batch(deps: &Deps, now: DateTime<Utc>) -> Result<u64, BoxDynError> {
    let txn = deps.db.begin_write().await?;
    let mut waiting = AllOrgs::rows::<notification_events::Entity>()
        .filter(notification_events::Column::DispatchedAt.is_null())
        .order_by_asc(notification_events::Column::Id)
        .limit(EVENTS_BATCH);
    if txn.get_database_backend() == DatabaseBackend::Postgres {
        waiting = waiting.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
    }
    let waiting = waiting.all(&txn).await?;
    if waiting.is_empty() {
        return Ok(0);
    }
    let claimed = waiting.len() as u64;
    AllOrgs::update_rows::<notification_events::Entity>()
        .col_expr(notification_events::Column::DispatchedAt, Expr::value(now))
        .filter(notification_events::Column::Id.is_in(waiting.iter().map(|e| e.id)))
        .exec(&txn)
        .await?;
    // Each organization's channels, read once per batch.
    let mut channels: HashMap<Uuid, Vec<notification_channels::Model>> = HashMap::new();
    let mut rows: Vec<notification_deliveries::ActiveModel> = Vec::new();
    for event in waiting {
        let Ok(kind) = event.kind.parse::<EventKind>() else {
            tracing::warn!(kind = %event.kind, "an event type this build does not know: not sent");
            continue;
        };
        let org_channels = match channels.entry(event.org_id) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(slot) => slot.insert(
                OrgScope::of(event.org_id)
                    .rows::<notification_channels::Entity>()
                    .all(&txn)
                    .await?,
            ),
        };
        let targets = org_channels.iter().filter(|c| match event.channel_id {
            // A `test` event goes to its one channel, whatever its filter.
            Some(only) => c.id == only,
            None => routing::wants(c.events.as_ref(), kind),
        });
        rows.extend(targets.map(|channel| notification_deliveries::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            org_id: Set(event.org_id),
            channel_id: Set(channel.id),
            event_id: Set(event.id),
            event_kind: Set(event.kind.clone()),
            status: Set(DeliveryStatus::Pending.into()),
            attempts: Set(0),
            next_attempt_at: Set(Some(now)),
            queued_attempt: Set(None),
            reason: Set(None),
            created_at: Set(now),
            updated_at: Set(now),
            finished_at: Set(None),
        }));
    }
    for chunk in rows.chunks(INSERT_CHUNK) {
        notification_deliveries::Entity::insert_many(chunk.to_vec())
            .exec_without_returning(&txn)
            .await?;
    }
    txn.commit().await?;
    Ok(claimed)
}

/// After a job's change that may have written an event: queues a dispatch when one waits.
/// A failure is logged; the scheduler dispatches waiting events anyway.
pub async fn kick(deps: &Deps) {
    let waiting = AllOrgs::rows::<notification_events::Entity>()
        .filter(notification_events::Column::DispatchedAt.is_null())
        .one(&deps.db.orm)
        .await;
    match waiting {
        Ok(Some(_)) => domain::notifications::jobs::dispatch_soon(&Queue::new(&deps.db)).await,
        Ok(None) => {}
        Err(err) => tracing::warn!(error = %err, "could not look for waiting notifications"),
    }
}

/// Queues a `notify.deliver` job for every pending delivery whose attempt is due and has no
/// job yet, then notes the attempt each job is for.
pub async fn queue_due(deps: &Deps, now: DateTime<Utc>) -> Result<usize, BoxDynError> {
    let due: Vec<(Uuid, i32, Option<i32>)> = AllOrgs::rows::<notification_deliveries::Entity>()
        .select_only()
        .column(notification_deliveries::Column::Id)
        .column(notification_deliveries::Column::Attempts)
        .column(notification_deliveries::Column::QueuedAttempt)
        .filter(due::condition(now))
        .order_by_asc(notification_deliveries::Column::Id)
        .limit(DUE_BATCH)
        .into_tuple()
        .all(&deps.db.orm)
        .await?;
    let mut by_attempt: std::collections::BTreeMap<i32, Vec<Uuid>> = Default::default();
    let jobs: Vec<(String, DeliverNotification)> = due
        .iter()
        .map(|(delivery_id, attempt, queued)| {
            by_attempt.entry(*attempt).or_default().push(*delivery_id);
            let job = DeliverNotification {
                delivery_id: *delivery_id,
                attempt: *attempt,
            };
            // A job that ended without recording its attempt keeps its key taken: the
            // attempt's next job is keyed by the window it is queued in.
            let key = if due::is_stranded(*queued, *attempt) {
                tracing::warn!(
                    delivery = %DeliveryId::from(*delivery_id),
                    attempt,
                    "a delivery's job ended without recording its attempt; queueing it again"
                );
                job.key_again(due::window(now))
            } else {
                job.key()
            };
            (key, job)
        })
        .collect();
    let queue = Queue::new(&deps.db);
    for chunk in jobs.chunks(INSERT_CHUNK) {
        queue.push_unique_many(chunk.to_vec()).await?;
    }
    // Conditional on the attempt count, so a delivery whose attempt already ran keeps asking
    // for its next one.
    for (attempt, ids) in by_attempt {
        for chunk in ids.chunks(INSERT_CHUNK) {
            AllOrgs::update_rows::<notification_deliveries::Entity>()
                .col_expr(
                    notification_deliveries::Column::QueuedAttempt,
                    Expr::value(attempt),
                )
                .filter(notification_deliveries::Column::Id.is_in(chunk.to_vec()))
                .filter(notification_deliveries::Column::Attempts.eq(attempt))
                .exec(&deps.db.orm)
                .await?;
        }
    }
    Ok(due.len())
}
