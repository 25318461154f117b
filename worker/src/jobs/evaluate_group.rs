//! `group.evaluate`: after a group's selector changed, recompute which hosts it picks and
//! mark the organization's policies for evaluation. Idempotent: the membership is computed
//! from scratch and only the difference applied.
//!
//! Fails closed: a stored selector that does not parse picks no host, and a host whose stored
//! labels cannot be read is picked by no selector, not even a negative one (`env!=staging`);
//! each is logged.

use domain::fleet::jobs::EvaluateGroup;
use entities::scope::{AllOrgs, OrgScope, Untenanted};
use std::collections::BTreeSet;

use apalis::prelude::{BoxDynError, Data};
use domain::fleet::selector::Selector;
use entities::{
    group_hosts, groups, hosts,
    json::{JsonText, Labels},
};
use platform::ids::{GroupId, HostId};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect};
use uuid::Uuid;

use crate::Deps;

/// `group_hosts.source` of a membership the group's selector made.
pub const LABEL: &str = "label";

pub async fn run(job: EvaluateGroup, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let db = &deps.db.orm;
    let Some(group) = AllOrgs::row::<groups::Entity>(job.group_id).one(db).await? else {
        return Ok(());
    };
    let selector = group.selector.as_deref().and_then(|s| {
        Selector::parse(s)
            .inspect_err(|err| {
                tracing::error!(
                    group_id = %GroupId::from(group.id),
                    error = %err,
                    "a group's stored selector does not parse: it picks no host"
                );
            })
            .ok()
    });
    let txn = deps.db.begin_write().await?;
    let current: BTreeSet<Uuid> = group_hosts::Entity::rows()
        .filter(group_hosts::Column::GroupId.eq(group.id))
        .filter(group_hosts::Column::Source.eq(LABEL))
        .all(&txn)
        .await?
        .into_iter()
        .map(|m| m.host_id)
        .collect();
    let mut wanted = BTreeSet::new();
    if let Some(selector) = selector {
        let candidates: Vec<(Uuid, JsonText<Labels>)> = OrgScope::of(group.org_id)
            .rows::<hosts::Entity>()
            .select_only()
            .column(hosts::Column::Id)
            .column(hosts::Column::Labels)
            .filter(hosts::Column::DecommissionedAt.is_null())
            .into_tuple()
            .all(&txn)
            .await?;
        for (id, labels) in candidates {
            match labels.read() {
                Ok(labels) if selector.matches(&labels) => {
                    wanted.insert(id);
                }
                Ok(_) => {}
                Err(err) => tracing::error!(
                    host_id = %HostId::from(id),
                    error = %err,
                    "a host's stored labels cannot be read: no selector picks it"
                ),
            }
        }
    }
    let gone: Vec<Uuid> = current.difference(&wanted).copied().collect();
    for chunk in gone.chunks(500) {
        group_hosts::Entity::delete_rows()
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
    domain::policy::mark_dirty(&deps.db, group.org_id, deps.clock.now()).await?;
    Ok(())
}
