//! A host's membership of a group: `static` (set by `PUT …/hosts`) or `label` (kept current by
//! host evaluation from the group's selector).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "group_hosts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub group_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub source: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub host_id: Uuid,
}

crate::no_relations!();
