//! Coalesced evaluation: a change that may move a policy's proposals marks the policy dirty
//! (one row however many hosts changed) and queues one evaluation for a clean policy; the
//! evaluation claims the mark before it reads, so a change during a run queues one more.

use crate::policy::jobs::EvaluatePolicy;
use chrono::{DateTime, Utc};
use entities::{policies, policy_dirty};
use sea_orm::{EntityTrait, Set};
use uuid::Uuid;

/// How long a freshly marked policy waits before its evaluation runs: a burst of host
/// changes shares one evaluation.
const COALESCE_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// Marks every policy of the organization dirty (one statement: the policies that were clean
/// come back) and queues an evaluation for each that was clean.
pub async fn mark_dirty(
    db: &platform::db::Database,
    org_id: Uuid,
    now: DateTime<Utc>,
) -> anyhow::Result<()> {
    use entities::scope::OrgScope;
    use sea_orm::{
        ConnectionTrait,
        sea_query::{Expr, OnConflict, Query},
    };
    let insert = Query::insert()
        .into_table(policy_dirty::Entity)
        .columns([policy_dirty::Column::PolicyId, policy_dirty::Column::Since])
        .select_from(
            OrgScope::of(org_id)
                .select::<policies::Entity>()
                .column(policies::Column::Id)
                .expr(Expr::value(now))
                .to_owned(),
        )?
        .on_conflict(
            OnConflict::column(policy_dirty::Column::PolicyId)
                .do_nothing()
                .to_owned(),
        )
        .returning_col(policy_dirty::Column::PolicyId)
        .to_owned();
    // An INSERT … SELECT over the organization's scoped select, built by sea-query: sea-orm has
    // no entity form of it, and one statement is what keeps the mark race-free.
    #[allow(clippy::disallowed_methods)]
    let marked = db.writer().query_all(&insert).await?;
    let queue = platform::jobs::Queue::new(db);
    for row in marked {
        let id: Uuid = row.try_get("", "policy_id")?;
        queue
            .push_after(EvaluatePolicy { policy_id: id }, COALESCE_DELAY)
            .await?;
    }
    Ok(())
}

/// Marks `policy_ids` dirty; queues an evaluation for each that was clean.
pub async fn mark_policies_dirty(
    db: &platform::db::Database,
    policy_ids: &[Uuid],
    now: DateTime<Utc>,
) -> anyhow::Result<()> {
    let queue = platform::jobs::Queue::new(db);
    for id in policy_ids {
        let inserted = policy_dirty::Entity::insert(policy_dirty::ActiveModel {
            policy_id: Set(*id),
            since: Set(now),
        })
        .on_conflict(
            sea_orm::sea_query::OnConflict::column(policy_dirty::Column::PolicyId)
                .do_nothing()
                .to_owned(),
        )
        .exec_without_returning(db.writer())
        .await?;
        if inserted == 1 {
            queue
                .push_after(EvaluatePolicy { policy_id: *id }, COALESCE_DELAY)
                .await?;
        }
    }
    Ok(())
}
