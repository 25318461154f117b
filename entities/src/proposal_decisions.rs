//! Who decided what about a proposal, when and why.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "proposal_decisions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub proposal_id: Uuid,
    pub account_id: Uuid,
    /// approved, rejected or snoozed.
    pub decision: String,
    pub reason: Option<String>,
    /// The approver on an approval (unique per proposal), null on other decisions.
    pub approval_of: Option<Uuid>,
    pub at: DateTimeUtc,
}

crate::no_relations!();
