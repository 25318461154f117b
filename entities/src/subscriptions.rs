//! An organization's plan and its subscription at the payment processor (decisions §17): set
//! by the processor's signed events, or by an operator (`api plan set`). No row, or no plan in
//! it: the deployment's `DEFAULT_PLAN`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "subscriptions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub org_id: Uuid,
    /// free, team, business or enterprise (unknown values pass through); none: the default.
    pub plan: Option<String>,
    /// The processor's customer (`cus_…`), linked by a completed checkout. Unique.
    pub customer_id: Option<String>,
    /// The processor's subscription (`sub_…`) the plan comes from.
    pub subscription_id: Option<String>,
    /// active, trialing, past_due, canceled, incomplete, … as the processor says.
    pub status: Option<String>,
    pub current_period_end: Option<DateTimeUtc>,
    /// The subscription's start day: the first day usage is billed.
    pub billable_from: Option<Date>,
    /// `created` (Unix seconds) of the newest processor event applied, so an older event
    /// arriving late never overwrites a newer one.
    pub event_created: Option<i64>,
    pub updated_at: DateTimeUtc,
}

crate::no_relations!();
