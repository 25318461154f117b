//! The shared changelog cache: one row per distribution × source package × version, the same
//! for every organization (no tenant data). `entries` holds the newest entries up to and
//! including `version`, newest first, at most 15.

use sea_orm::entity::prelude::*;

use crate::json::{ChangelogEntry, JsonText};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "changelogs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub distro: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub source: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub version: String,
    /// pending, found or missing (interface.md's names).
    pub status: String,
    pub url: Option<String>,
    pub entries: JsonText<Vec<ChangelogEntry>>,
    /// Fetch attempts that ended in a failure worth retrying (5xx, timeout).
    pub attempts: i32,
    pub first_attempt_at: Option<DateTimeUtc>,
    pub fetched_at: Option<DateTimeUtc>,
    pub updated_at: DateTimeUtc,
}

crate::no_relations!();
