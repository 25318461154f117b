//! A check-in's rules (decisions §6): how often agents check in, when a check-in writes the
//! host's row, the billable day, and a host coming back after a silence.

use chrono::{DateTime, Duration, Utc};
use entities::{host_days, hosts, scope::OrgScope};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, Iterable, ModelTrait,
    QueryFilter, Set,
};

/// How often agents are asked to check in.
pub const CHECK_IN_INTERVAL_S: i32 = 300;
/// A check-in writes `last_seen_at` at most this often (and whenever the UTC day changes or
/// the host is not `online`), so the stored value is at most this far behind the host's last
/// check-in: far below the three intervals after which a host counts as offline.
pub const TOUCH_EVERY: Duration = Duration::seconds(60);

/// Whether a check-in at `now` must write `last_seen_at` (and `status` = `online`).
pub fn touch_due(host: &hosts::Model, now: DateTime<Utc>) -> bool {
    crate::HostStatus::from(host.status.as_str()) != crate::HostStatus::Online
        || host
            .last_seen_at
            .is_none_or(|seen| now - seen >= TOUCH_EVERY || seen.date_naive() != now.date_naive())
}

/// Writes the columns of `next` that differ from `host` (the row as read), in one statement;
/// nothing when none does. Columns nobody here changed (another writer's, such as the
/// evaluation's counts) are left alone.
pub async fn write_host<C: ConnectionTrait>(
    db: &C,
    scope: OrgScope,
    host: &hosts::Model,
    next: &hosts::Model,
) -> Result<(), DbErr> {
    let mut changes: hosts::ActiveModel = host.clone().into();
    let mut any = false;
    for column in hosts::Column::iter() {
        let value = next.get(column);
        if value != host.get(column) {
            changes.try_set(column, value)?;
            any = true;
        }
    }
    if any {
        scope
            .update_rows::<hosts::Entity>()
            .set(changes)
            .filter(hosts::Column::Id.eq(host.id))
            .exec(db)
            .await?;
    }
    Ok(())
}

/// Whether the host had been silent for longer than three intervals before `now`.
pub fn after_gap(host: &hosts::Model, now: DateTime<Utc>) -> bool {
    host.last_seen_at
        .is_some_and(|seen| now - seen > Duration::seconds(3 * i64::from(host.check_in_interval_s)))
}

/// Records the host's UTC day once (an upsert on the primary key, not a row per check-in).
pub async fn record_day<C: ConnectionTrait>(
    db: &C,
    host: &hosts::Model,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    host_days::Entity::insert(host_days::ActiveModel {
        host_id: Set(host.id),
        day: Set(now.date_naive()),
        org_id: Set(host.org_id),
    })
    .on_conflict_do_nothing()
    .exec(db)
    .await?;
    Ok(())
}
