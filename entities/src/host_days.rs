//! A host checked in on this UTC day: the billable fact, recorded once per host and day.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "host_days")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub host_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub day: Date,
    pub org_id: Uuid,
}

crate::no_relations!();
