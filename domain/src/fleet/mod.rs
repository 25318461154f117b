//! The fleet's rules: enrolment ([`enrolment`]), check-ins ([`check_in`]), host events
//! ([`events`]), label selectors ([`selector`]), and what outlives a request:
//!
//! A host still `pending` a day after it enrolled never checked in: its agent is gone, or the
//! enrollment token leaked and somebody enrolled what never runs. It is removed (decisions
//! §18), which frees its place under its token's `max_uses` and under a plan's host cap, and
//! the audit log records it as `host.pending_expired`.

pub mod check_in;
pub mod enrolment;
pub mod events;
pub mod jobs;
pub mod selector;

/// The most labels a host, an enrollment token or a request may carry.
pub const MAX_LABELS: usize = 64;

use chrono::{DateTime, Duration, Utc};
use entities::scope::{AllOrgs, OrgScope};
use entities::{audit_events, hosts, json::JsonText};
use platform::ids::HostId;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseTransaction, DbErr, QueryFilter, QuerySelect, Set,
};
use uuid::Uuid;

/// How long a host may stay `pending` after enrolling.
pub const PENDING_FOR_AT_MOST: Duration = Duration::hours(24);
/// Hosts removed per call (the upkeep runs every minute).
const BATCH: u64 = 500;

/// The ids of hosts pending for longer than [`PENDING_FOR_AT_MOST`] at `now`, at most a batch.
pub async fn expired_pending<C: sea_orm::ConnectionTrait>(
    db: &C,
    now: DateTime<Utc>,
) -> Result<Vec<(Uuid, Uuid)>, DbErr> {
    AllOrgs::rows::<hosts::Entity>()
        .select_only()
        .column(hosts::Column::Id)
        .column(hosts::Column::OrgId)
        .filter(hosts::Column::Status.eq(crate::HostStatus::Pending))
        .filter(hosts::Column::LastSeenAt.is_null())
        .filter(hosts::Column::DecommissionedAt.is_null())
        .filter(hosts::Column::EnrolledAt.lt(now - PENDING_FOR_AT_MOST))
        .limit(BATCH)
        .into_tuple()
        .all(db)
        .await
}

/// Removes host `id` of organization `org_id` if it is still pending past its day (a check-in
/// or a re-enrolment in between keeps it), with its audit entry; whether it was removed.
pub async fn expire_pending(
    txn: &DatabaseTransaction,
    org_id: Uuid,
    id: Uuid,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let Some(host) = OrgScope::of(org_id)
        .row_by_key::<hosts::Entity>(id)
        .filter(hosts::Column::Status.eq(crate::HostStatus::Pending))
        .filter(hosts::Column::LastSeenAt.is_null())
        .filter(hosts::Column::DecommissionedAt.is_null())
        .filter(hosts::Column::EnrolledAt.lt(now - PENDING_FOR_AT_MOST))
        .one(txn)
        .await?
    else {
        return Ok(false);
    };
    let removed = AllOrgs::delete_rows::<hosts::Entity>()
        .filter(hosts::Column::Id.eq(host.id))
        .filter(hosts::Column::LastSeenAt.is_null())
        .exec(txn)
        .await?;
    if removed.rows_affected != 1 {
        return Ok(false);
    }
    audit_events::ActiveModel {
        id: Set(platform::ids::new_uuid()),
        org_id: Set(Some(org_id)),
        actor_account_id: Set(None),
        actor_api_token_id: Set(None),
        action: Set("host.pending_expired".to_owned()),
        target_kind: Set(Some("host".into())),
        target_id: Set(Some(HostId::from(host.id).to_string())),
        ip: Set(None),
        details: Set(Some(JsonText::new(&serde_json::json!({
            "hostname": host.hostname,
            "machine_id": host.machine_id,
            "enrolled_at": host.enrolled_at,
            "enrollment_token": host.enrollment_token_id
                .map(|id| platform::ids::EnrollmentTokenId::from(id).to_string()),
            "reason": "never checked in within a day of enrolling",
        }))?)),
        created_at: Set(now),
    }
    .insert(txn)
    .await?;
    Ok(true)
}
