//! A job (`job_`) for one host's agent: the changes of an approved proposal to apply, or the
//! reboot the organization's reboot budget held back.

use sea_orm::entity::prelude::*;

use crate::json::{JobPayload, JsonText};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "host_jobs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub host_id: Uuid,
    pub proposal_id: Option<Uuid>,
    /// apply_updates, dist_upgrade or reboot.
    pub kind: String,
    /// What the agent is asked to do.
    pub payload: JsonText<JobPayload>,
    /// pending, dispatched, succeeded, failed or cancelled.
    pub status: String,
    pub log: Option<String>,
    pub rebooted: Option<bool>,
    pub created_at: DateTimeUtc,
    pub dispatched_at: Option<DateTimeUtc>,
    pub finished_at: Option<DateTimeUtc>,
    /// The rollout wave of its proposal it belongs to.
    pub wave: Option<i32>,
}

crate::no_relations!();
