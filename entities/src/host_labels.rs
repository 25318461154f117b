//! One label of a host, for indexed selector filters (the host row keeps the whole set too).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "host_labels")]
pub struct Model {
    pub org_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub host_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub key: String,
    pub value: String,
}

crate::no_relations!();
