//! An update policy (`pol_`): which hosts and updates it covers, how many approvals it needs, and when approved changes may go out. Every change bumps `version`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "policies")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    pub version: i32,
    /// JSON array of group ids (UUIDs); empty: every host of the organization.
    pub scope_groups: String,
    /// Label selector the hosts must also match.
    pub selector: Option<String>,
    pub required_approvals: i32,
    /// asap or asap_in_window.
    pub apply: String,
    /// JSON `{rrule, duration_minutes, time_zone}`.
    pub window: Option<String>,
    /// never, immediate or in_window.
    pub reboot: String,
    pub auto_merge: bool,
    /// all or security.
    pub updates: String,
    pub min_severity: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
