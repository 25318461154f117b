//! One try at a delivery: when, the receiver's HTTP status or the error, and how long it took.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "notification_attempts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub delivery_id: Uuid,
    /// 1 for the first attempt.
    pub number: i32,
    pub at: DateTimeUtc,
    pub status_code: Option<i32>,
    pub error: Option<String>,
    pub duration_ms: i64,
}

crate::no_relations!();
