//! The append-only audit log: who did what, when, from where, to which object.

use sea_orm::entity::prelude::*;

use crate::json::JsonText;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "audit_events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Option<Uuid>,
    pub actor_account_id: Option<Uuid>,
    pub actor_api_token_id: Option<Uuid>,
    pub action: String,
    pub target_kind: Option<String>,
    pub target_id: Option<String>,
    pub ip: Option<String>,
    /// An object with the change's particulars.
    pub details: Option<JsonText<serde_json::Value>>,
    pub created_at: DateTimeUtc,
}

crate::no_relations!();
