//! An agent release channel (stable, beta) as the manifest last said; the same for every
//! organization.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "agent_releases")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub channel: String,
    pub version: String,
    pub released_at: Option<DateTimeUtc>,
    pub seen_at: DateTimeUtc,
}

crate::no_relations!();
