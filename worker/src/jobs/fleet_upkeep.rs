//! `fleet.upkeep`, every minute: hosts silent for three check-in intervals go offline (with a
//! `went_offline` event), hosts still pending a day after enrolling are removed
//! (`domain::fleet`), stale agent nonces are forgotten, and policies whose evaluation was never
//! queued are queued again.

use apalis::prelude::{BoxDynError, Data};
use chrono::Duration;
use domain::HostStatus;
use domain::fleet::jobs::FleetUpkeep;
use entities::scope::{AllOrgs, Untenanted};
use entities::{host_events, hosts, json::JsonText};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect, Set, sea_query::Expr};
use uuid::Uuid;

use crate::Deps;

/// Hosts are offline after this many missed check-in intervals.
const MISSED_INTERVALS: i64 = 3;

pub async fn run(job: FleetUpkeep, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let now = deps.clock.now();
    let db = &deps.db.orm;
    requeue_stale_policies(&deps, now).await?;
    entities::agent_nonces::Entity::delete_rows()
        .filter(
            entities::agent_nonces::Column::SeenAt
                .lt(now - chrono::Duration::seconds(domain::fleet::jobs::NONCE_TTL_S)),
        )
        .exec(db)
        .await?;
    // Every host that is online but silent beyond three of its intervals. Intervals are per
    // host; the default one bounds the query and each row is checked exactly.
    let candidates: Vec<(Uuid, Uuid, Option<chrono::DateTime<chrono::Utc>>, i32)> =
        AllOrgs::rows::<hosts::Entity>()
            .select_only()
            .column(hosts::Column::Id)
            .column(hosts::Column::OrgId)
            .column(hosts::Column::LastSeenAt)
            .column(hosts::Column::CheckInIntervalS)
            .filter(hosts::Column::Status.eq(HostStatus::Online))
            .filter(hosts::Column::LastSeenAt.lt(now - Duration::seconds(MISSED_INTERVALS * 60)))
            .into_tuple()
            .all(db)
            .await?;
    let mut offline = 0;
    for (id, org_id, last_seen, interval) in candidates {
        let Some(last_seen) = last_seen else { continue };
        if now - last_seen <= Duration::seconds(MISSED_INTERVALS * i64::from(interval)) {
            continue;
        }
        let txn = deps.db.begin_write().await?;
        let changed = AllOrgs::update_rows::<hosts::Entity>()
            .col_expr(hosts::Column::Status, Expr::value(HostStatus::Offline))
            .filter(hosts::Column::Id.eq(id))
            .filter(hosts::Column::Status.eq(HostStatus::Online))
            .filter(hosts::Column::LastSeenAt.eq(last_seen))
            .exec(&txn)
            .await?;
        if changed.rows_affected == 1 {
            host_events::Entity::insert(host_events::ActiveModel {
                id: Set(platform::ids::new_uuid()),
                org_id: Set(org_id),
                host_id: Set(id),
                kind: Set(domain::HostEventKind::WentOffline.into()),
                details: Set(Some(JsonText::new(
                    &serde_json::json!({"last_seen_at": last_seen}),
                )?)),
                created_at: Set(now),
            })
            .exec(&txn)
            .await?;
            if let Some(host) = AllOrgs::row::<hosts::Entity>(id).one(&txn).await? {
                domain::notifications::outbox::host(
                    &txn,
                    &host,
                    domain::notifications::EventKind::HostOffline,
                    now,
                )
                .await?;
            }
            offline += 1;
        }
        txn.commit().await?;
    }
    if offline > 0 {
        tracing::info!(minute = %job.minute, offline, "hosts went offline");
        crate::jobs::notify_dispatch::kick(&deps).await;
    }
    let mut expired = 0;
    for (org_id, id) in domain::fleet::expired_pending(db, now)
        .await?
        .into_iter()
        .map(|(id, org_id)| (org_id, id))
    {
        let txn = deps.db.begin_write().await?;
        if domain::fleet::expire_pending(&txn, org_id, id, now).await? {
            expired += 1;
        }
        txn.commit().await?;
    }
    if expired > 0 {
        tracing::info!(
            minute = %job.minute,
            expired,
            "hosts still pending a day after enrolling were removed"
        );
    }
    Ok(())
}

/// A policy marked dirty whose evaluation was never queued (the push failed after the mark
/// was written) would wait for ever: after a minute, queue it again.
async fn requeue_stale_policies(
    deps: &Deps,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), BoxDynError> {
    let stale: Vec<Uuid> = entities::policy_dirty::Entity::rows()
        .select_only()
        .column(entities::policy_dirty::Column::PolicyId)
        .filter(entities::policy_dirty::Column::Since.lt(now - chrono::Duration::minutes(1)))
        .into_tuple()
        .all(&deps.db.orm)
        .await?;
    let queue = platform::jobs::Queue::new(&deps.db);
    for policy_id in stale {
        queue
            .push(domain::policy::jobs::EvaluatePolicy { policy_id })
            .await?;
    }
    Ok(())
}
