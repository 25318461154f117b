//! Something that happened to a host (`evt_`): enrolled, labels changed, went offline, …

use sea_orm::entity::prelude::*;

use crate::json::JsonText;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "host_events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub host_id: Uuid,
    pub kind: String,
    /// An object with the particulars.
    pub details: Option<JsonText<serde_json::Value>>,
    pub created_at: DateTimeUtc,
}

crate::no_relations!();
