//! `billing.rollup`, once a UTC day is over: that day's billable host-days become active
//! hosts per organization. Idempotent: running it again rewrites the same numbers.

use apalis::prelude::{BoxDynError, Data};
use domain::billing::jobs::RollupUsage;
use entities::scope::{AllOrgs, OrgScope};
use entities::{host_days, usage_days};
use sea_orm::{
    ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QuerySelect, Set, sea_query::OnConflict,
};
use uuid::Uuid;

use crate::Deps;

pub async fn run(job: RollupUsage, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let db = &deps.db.orm;
    let orgs: Vec<Uuid> = AllOrgs::rows::<host_days::Entity>()
        .select_only()
        .column(host_days::Column::OrgId)
        .filter(host_days::Column::Day.eq(job.day))
        .distinct()
        .into_tuple()
        .all(db)
        .await?;
    for org_id in orgs {
        let active = OrgScope::of(org_id)
            .rows::<host_days::Entity>()
            .filter(host_days::Column::Day.eq(job.day))
            .count(db)
            .await?;
        usage_days::Entity::insert(usage_days::ActiveModel {
            org_id: Set(org_id),
            day: Set(job.day),
            active_hosts: Set(i32::try_from(active).unwrap_or(i32::MAX)),
            reported: Set(false),
        })
        .on_conflict(
            OnConflict::columns([usage_days::Column::OrgId, usage_days::Column::Day])
                .update_column(usage_days::Column::ActiveHosts)
                .to_owned(),
        )
        .exec(db)
        .await?;
    }
    tracing::info!(day = %job.day, "usage rolled up");
    Ok(())
}
