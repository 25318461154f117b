//! An update proposal (`prp_`). The rules it was opened under (required approvals, apply, window, reboot, auto-merge, rollout, policy version) are copied onto it, so a later policy change does not move an open proposal.

use sea_orm::entity::prelude::*;

use crate::json::{JsonText, ProposalWindow, ReleaseUpgrade, RolloutSpec};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "proposals")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub number: i64,
    pub policy_id: Option<Uuid>,
    pub policy_name: Option<String>,
    pub policy_version: Option<i32>,
    /// For a release upgrade: `distro/from_version/to_version`, what makes it the same upgrade.
    pub release_key: Option<String>,
    pub kind: String,
    pub status: String,
    pub title: String,
    pub required: i32,
    pub approvals: i32,
    pub apply: String,
    /// The policy's window, with the policy's creation time.
    pub window: Option<JsonText<ProposalWindow>>,
    pub reboot: String,
    pub auto_merge: bool,
    pub known_exploited: bool,
    pub max_severity: Option<String>,
    pub hosts: i64,
    pub packages: i64,
    pub release_upgrade: Option<JsonText<ReleaseUpgrade>>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub closed_at: Option<DateTimeUtc>,
    pub scheduled_for: Option<DateTimeUtc>,
    pub snoozed_until: Option<DateTimeUtc>,
    pub superseded_by: Option<Uuid>,
    /// The policy's rollout as it was when the proposal opened; NULL: one wave of every host.
    pub rollout: Option<JsonText<RolloutSpec>>,
}

crate::no_relations!();
