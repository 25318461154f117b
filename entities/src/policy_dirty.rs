//! A policy whose proposals need recomputing; one row however many hosts changed, so evaluations coalesce.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "policy_dirty")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub policy_id: Uuid,
    pub since: DateTimeUtc,
}

crate::no_relations!();
