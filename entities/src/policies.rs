//! An update policy (`pol_`): which hosts and updates it covers, how many approvals it needs, and when approved changes may go out. Every change bumps `version`.

use crate::json::WindowSpec;
use sea_orm::entity::prelude::*;

use crate::json::{JsonText, RolloutSpec};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "policies")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    pub version: i32,
    /// Group ids; empty: every host of the organization.
    pub scope_groups: JsonText<Vec<Uuid>>,
    /// Label selector the hosts must also match.
    pub selector: Option<String>,
    pub required_approvals: i32,
    /// asap or asap_in_window.
    pub apply: String,
    pub window: Option<JsonText<WindowSpec>>,
    /// never, immediate or in_window.
    pub reboot: String,
    pub auto_merge: bool,
    /// all or security.
    pub updates: String,
    pub min_severity: Option<String>,
    /// How approved changes go out (decisions §20); NULL: one wave of every host.
    pub rollout: Option<JsonText<RolloutSpec>>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

crate::no_relations!();
