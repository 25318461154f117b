//! A member's digest setting in one organization, and the key of the last digest sent
//! (`daily:2026-11-03`, `weekly:2026-11-02`), which makes sending one at most once per period.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "digest_settings")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub org_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub account_id: Uuid,
    /// off, daily or weekly.
    pub frequency: String,
    pub mention_email: bool,
    pub last_sent_key: Option<String>,
    pub last_sent_at: Option<DateTimeUtc>,
    pub updated_at: DateTimeUtc,
}

crate::no_relations!();
