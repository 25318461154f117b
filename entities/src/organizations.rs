//! A tenant, addressed by its slug.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "organizations")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub slug: String,
    pub name: String,
    /// free, team, business or enterprise.
    pub plan: String,
    /// Members must sign in through single sign-on.
    pub sso_enforced: bool,
    pub created_at: DateTimeUtc,
    /// The last proposal number handed out (numbers are per organization and gap-free).
    pub proposal_seq: i64,
    /// At most this many hosts reboot at once (decisions §20); NULL: no limit.
    pub max_concurrent_reboots: Option<i32>,
}

crate::no_relations!();
