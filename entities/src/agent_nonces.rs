//! A signature nonce an agent used, remembered while its signature could still be fresh.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "agent_nonces")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub key_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub nonce: String,
    pub seen_at: DateTimeUtc,
}

crate::no_relations!();
