//! `host.evaluate` and `group.evaluate`: keep label-selected group membership current. Both are
//! idempotent (they compute the membership from scratch and apply only the difference), so a
//! repeated or concurrent run changes nothing.

use std::collections::{BTreeMap, BTreeSet};

use apalis::prelude::{BoxDynError, Data};
use entities::{group_hosts, groups, hosts};
use platform::{
    jobs::{EvaluateGroup, EvaluateHost},
    selector::Selector,
};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect};
use uuid::Uuid;

use crate::Deps;

const LABEL: &str = "label";

fn labels_of(host: &hosts::Model) -> BTreeMap<String, String> {
    serde_json::from_str(&host.labels).unwrap_or_default()
}

pub async fn host(job: EvaluateHost, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let db = &deps.db.orm;
    let Some(host) = hosts::Entity::find_by_id(job.host_id).one(db).await? else {
        return Ok(()); // Gone: nothing to evaluate.
    };
    let labels = labels_of(&host);
    let live = host.decommissioned_at.is_none();
    let txn = deps.db.begin_write().await?;
    let org_groups = groups::Entity::find()
        .filter(groups::Column::OrgId.eq(host.org_id))
        .filter(groups::Column::Selector.is_not_null())
        .all(&txn)
        .await?;
    let current: BTreeSet<Uuid> = group_hosts::Entity::find()
        .filter(group_hosts::Column::HostId.eq(host.id))
        .filter(group_hosts::Column::Source.eq(LABEL))
        .all(&txn)
        .await?
        .into_iter()
        .map(|m| m.group_id)
        .collect();
    let wanted: BTreeSet<Uuid> = org_groups
        .iter()
        .filter(|g| {
            live && g
                .selector
                .as_deref()
                .and_then(|s| Selector::parse(s).ok())
                .is_some_and(|s| s.matches(&labels))
        })
        .map(|g| g.id)
        .collect();
    apply(&txn, host.id, &current, &wanted).await?;
    txn.commit().await?;
    Ok(())
}

async fn apply(
    txn: &sea_orm::DatabaseTransaction,
    host_id: Uuid,
    current: &BTreeSet<Uuid>,
    wanted: &BTreeSet<Uuid>,
) -> Result<(), sea_orm::DbErr> {
    let gone: Vec<Uuid> = current.difference(wanted).copied().collect();
    if !gone.is_empty() {
        group_hosts::Entity::delete_many()
            .filter(group_hosts::Column::HostId.eq(host_id))
            .filter(group_hosts::Column::Source.eq(LABEL))
            .filter(group_hosts::Column::GroupId.is_in(gone))
            .exec(txn)
            .await?;
    }
    let added: Vec<group_hosts::ActiveModel> = wanted
        .difference(current)
        .map(|group_id| group_hosts::ActiveModel {
            group_id: sea_orm::Set(*group_id),
            source: sea_orm::Set(LABEL.to_owned()),
            host_id: sea_orm::Set(host_id),
        })
        .collect();
    if !added.is_empty() {
        group_hosts::Entity::insert_many(added)
            .on_conflict_do_nothing()
            .exec(txn)
            .await?;
    }
    Ok(())
}

pub async fn group(job: EvaluateGroup, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let db = &deps.db.orm;
    let Some(group) = groups::Entity::find_by_id(job.group_id).one(db).await? else {
        return Ok(());
    };
    let selector = group
        .selector
        .as_deref()
        .and_then(|s| Selector::parse(s).ok());
    let txn = deps.db.begin_write().await?;
    let current: BTreeSet<Uuid> = group_hosts::Entity::find()
        .filter(group_hosts::Column::GroupId.eq(group.id))
        .filter(group_hosts::Column::Source.eq(LABEL))
        .all(&txn)
        .await?
        .into_iter()
        .map(|m| m.host_id)
        .collect();
    let mut wanted = BTreeSet::new();
    if let Some(selector) = selector {
        let candidates: Vec<(Uuid, String)> = hosts::Entity::find()
            .select_only()
            .column(hosts::Column::Id)
            .column(hosts::Column::Labels)
            .filter(hosts::Column::OrgId.eq(group.org_id))
            .filter(hosts::Column::DecommissionedAt.is_null())
            .into_tuple()
            .all(&txn)
            .await?;
        for (id, labels) in candidates {
            let labels: BTreeMap<String, String> =
                serde_json::from_str(&labels).unwrap_or_default();
            if selector.matches(&labels) {
                wanted.insert(id);
            }
        }
    }
    let gone: Vec<Uuid> = current.difference(&wanted).copied().collect();
    for chunk in gone.chunks(500) {
        group_hosts::Entity::delete_many()
            .filter(group_hosts::Column::GroupId.eq(group.id))
            .filter(group_hosts::Column::Source.eq(LABEL))
            .filter(group_hosts::Column::HostId.is_in(chunk.to_vec()))
            .exec(&txn)
            .await?;
    }
    let added: Vec<Uuid> = wanted.difference(&current).copied().collect();
    for chunk in added.chunks(500) {
        group_hosts::Entity::insert_many(chunk.iter().map(|host_id| group_hosts::ActiveModel {
            group_id: sea_orm::Set(group.id),
            source: sea_orm::Set(LABEL.to_owned()),
            host_id: sea_orm::Set(*host_id),
        }))
        .on_conflict_do_nothing()
        .exec(&txn)
        .await?;
    }
    txn.commit().await?;
    Ok(())
}
