//! The daily rollup of active hosts per organization, which billing reports.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "usage_days")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub org_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub day: Date,
    pub active_hosts: i32,
    /// Sent to the payment processor.
    pub reported: bool,
}

crate::no_relations!();
