//! The one plan lookup: an organization's subscription row, else the deployment's default.

use chrono::{DateTime, Utc};
use entities::scope::{AllOrgs, OrgScope};
use entities::subscriptions;
use platform::{config::Config, ids::OrgId};
use sea_orm::{ActiveValue::Set, ConnectionTrait, DbErr, EntityTrait, sea_query::OnConflict};

use super::Plan;

/// The plan names configuration accepts (`DEFAULT_PLAN`): the plans of [`Plan::KNOWN`].
pub use platform::config::PLAN_NAMES;

/// The plan of an organization without one of its own (`DEFAULT_PLAN`, decisions §17).
pub fn default_plan(config: &Config) -> Plan {
    Plan::from(config.default_plan.as_str())
}

/// The organization's subscription row, if it has one.
pub async fn subscription_of<C: ConnectionTrait>(
    db: &C,
    org_id: OrgId,
) -> Result<Option<subscriptions::Model>, DbErr> {
    OrgScope::of(org_id.uuid())
        .rows::<subscriptions::Entity>()
        .one(db)
        .await
}

/// The plan of `org_id` now: the one its subscription (or an operator) gave it, else
/// `default_plan`. One primary-key read, made by every gate on every request it guards.
pub async fn plan_of<C: ConnectionTrait>(
    db: &C,
    org_id: OrgId,
    default_plan: &Plan,
) -> Result<Plan, DbErr> {
    Ok(effective(
        subscription_of(db, org_id).await?.as_ref(),
        default_plan,
    ))
}

/// The plans of several organizations at once (a member's list of organizations).
pub async fn plans_of<C: ConnectionTrait>(
    db: &C,
    org_ids: impl IntoIterator<Item = uuid::Uuid>,
    default_plan: &Plan,
) -> Result<PlansOf, DbErr> {
    use sea_orm::{ColumnTrait, QueryFilter};
    let rows = AllOrgs::rows::<subscriptions::Entity>()
        .filter(subscriptions::Column::OrgId.is_in(org_ids))
        .all(db)
        .await?;
    Ok(PlansOf {
        plans: rows
            .iter()
            .map(|row| (row.org_id, effective(Some(row), default_plan)))
            .collect(),
        default_plan: default_plan.clone(),
    })
}

/// The answer of [`plans_of`].
#[derive(Clone, Debug)]
pub struct PlansOf {
    plans: std::collections::HashMap<uuid::Uuid, Plan>,
    default_plan: Plan,
}

impl PlansOf {
    pub fn get(&self, org_id: uuid::Uuid) -> Plan {
        self.plans
            .get(&org_id)
            .cloned()
            .unwrap_or_else(|| self.default_plan.clone())
    }
}

/// The plan a subscription row gives, else the default. A subscription grants its plan only
/// while its `status` is `active`, `trialing` or `past_due` (decisions §18); any other status
/// (`incomplete`, `unpaid`, `canceled`, `paused`, one this build does not know) is the free
/// plan. A plan set by hand (`api plan set`) has no status and applies as it is.
pub fn effective(row: Option<&subscriptions::Model>, default_plan: &Plan) -> Plan {
    let Some(row) = row else {
        return default_plan.clone();
    };
    match (row.plan.as_deref(), row.status.as_deref()) {
        (None, _) => default_plan.clone(),
        (Some(plan), None) => Plan::from(plan),
        (Some(plan), status) if super::is_live(status) => Plan::from(plan),
        (Some(_), Some(_)) => Plan::Free,
    }
}

/// A subscription row of `org_id` that nothing has filled in yet: no plan set by hand, nothing
/// linked by the processor.
pub(super) fn unlinked(org_id: uuid::Uuid, now: DateTime<Utc>) -> subscriptions::ActiveModel {
    subscriptions::ActiveModel {
        org_id: Set(org_id),
        plan: Set(None),
        customer_id: Set(None),
        subscription_id: Set(None),
        status: Set(None),
        current_period_end: Set(None),
        billable_from: Set(None),
        event_created: Set(None),
        updated_at: Set(now),
    }
}

/// Sets the organization's plan by hand (`api plan set`), keeping whatever the processor
/// linked (customer, subscription) but not its status: the operator's plan applies as set,
/// until the processor's next subscription event sets plan and status again.
pub async fn set_plan<C: ConnectionTrait>(
    db: &C,
    org_id: OrgId,
    plan: &Plan,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    subscriptions::Entity::insert(subscriptions::ActiveModel {
        plan: Set(Some(plan.to_string())),
        ..unlinked(org_id.uuid(), now)
    })
    .on_conflict(
        OnConflict::column(subscriptions::Column::OrgId)
            .update_columns([
                subscriptions::Column::Plan,
                subscriptions::Column::Status,
                subscriptions::Column::UpdatedAt,
            ])
            .to_owned(),
    )
    .exec_without_returning(db)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configured_plan_names_are_the_known_plans() {
        let known: Vec<&str> = Plan::KNOWN.iter().map(Plan::as_str).collect();
        assert_eq!(known, PLAN_NAMES);
    }

    #[test]
    fn a_row_without_a_plan_has_the_default() {
        let now = chrono::DateTime::<Utc>::UNIX_EPOCH;
        let mut row = subscriptions::Model {
            org_id: uuid::Uuid::nil(),
            plan: None,
            customer_id: Some("cus_1".into()),
            subscription_id: None,
            status: None,
            current_period_end: None,
            billable_from: None,
            event_created: None,
            updated_at: now,
        };
        assert_eq!(effective(None, &Plan::Enterprise), Plan::Enterprise);
        assert_eq!(effective(Some(&row), &Plan::Free), Plan::Free);
        row.plan = Some("business".into());
        assert_eq!(effective(Some(&row), &Plan::Free), Plan::Business);
    }
}
