//! A person who can sign in (`usr_`).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "accounts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// Lowercased; unique.
    pub email: String,
    pub name: Option<String>,
    /// IANA time zone name.
    pub time_zone: String,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

crate::no_relations!();
