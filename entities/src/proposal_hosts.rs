//! A host of a proposal, with the positions of the changes it makes (positions, ascending) and
//! what they would do to it.

use sea_orm::entity::prelude::*;

use crate::json::{HostImpact, JsonText};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "proposal_hosts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub proposal_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub host_id: Uuid,
    pub changes: JsonText<Vec<i32>>,
    /// What the changes would do to the host, as its agent said (decisions §21); `None` for a
    /// release upgrade and for rows written before impacts were kept: unknown.
    pub impact: Option<JsonText<HostImpact>>,
    /// The rollout wave it is in (0-based), once the proposal has gone ahead.
    pub wave: Option<i32>,
}

crate::no_relations!();
