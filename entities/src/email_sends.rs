//! One emailed sign-in or sign-up link: `key` is `<kind>:<hash of the address>`, so the limits
//! of decisions §18 (1 a minute, 5 an hour per address and kind) are counted exactly. Rows older
//! than an hour are deleted by the housekeeping.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "email_sends")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub key: String,
    pub sent_at: DateTimeUtc,
}

crate::no_relations!();
