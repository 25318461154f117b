//! A host (`hst_`): identified by its `machine_id` within an organization. JSON columns hold
//! the structured facts its agent reports; `None` keeps the contract's three-valued meanings
//! (`reboot_required` null: the host cannot say; `updates_*` null: never evaluated).

use sea_orm::entity::prelude::*;

use crate::json::{JsonText, Labels, OfferedUpgrade};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "hosts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub machine_id: String,
    pub hostname: String,
    pub display_name: Option<String>,
    pub notes: Option<String>,
    pub labels: JsonText<Labels>,
    pub distro: Option<String>,
    pub distro_version: Option<String>,
    pub distro_codename: Option<String>,
    pub os_family: Option<String>,
    pub arch: Option<String>,
    pub kernel_version: Option<String>,
    pub virtualization: Option<String>,
    pub agent_version: Option<String>,
    pub agent_mode: Option<String>,
    pub agent_permissions: Option<JsonText<Vec<String>>>,
    /// `{method, channel?}`; absent for an agent too old to say.
    pub agent_install: Option<JsonText<serde_json::Value>>,
    /// `{provider, region, instance_id}`.
    pub cloud: Option<JsonText<serde_json::Value>>,
    /// `{kind, pinned, latest?, behind}`.
    pub frozen: Option<JsonText<serde_json::Value>>,
    /// `{provider?, reason}`; null for an agent too old to say.
    pub snapshots: Option<JsonText<serde_json::Value>>,
    pub reboot_required: Option<bool>,
    pub services_need_restart: JsonText<Vec<String>>,
    pub held_packages: JsonText<Vec<String>>,
    pub updates_total: Option<i32>,
    pub updates_security: Option<i32>,
    pub updates_requiring_reboot: Option<i32>,
    pub advisory_coverage: String,
    pub status: String,
    pub enrollment_token_id: Option<Uuid>,
    pub inventory_digest: Option<String>,
    pub check_in_interval_s: i32,
    pub enrolled_at: DateTimeUtc,
    pub last_seen_at: Option<DateTimeUtc>,
    pub last_inventory_at: Option<DateTimeUtc>,
    pub cert_expires_at: Option<DateTimeUtc>,
    pub decommissioned_at: Option<DateTimeUtc>,
    pub updated_at: DateTimeUtc,
    /// The release upgrade the agent last said is offered.
    pub release_upgrade: Option<JsonText<OfferedUpgrade>>,
    /// Counts the changes of the host's `host_updates` rows: the check-in that writes them adds
    /// one, so what was read of them at a count is still what they hold while it stands.
    pub updates_seq: i64,
    /// The host holds one of its organization's reboot slots until then at most (decisions §20).
    pub reboot_slot_until: Option<DateTimeUtc>,
    /// The job that took the slot; NULL once its result is in, so the next check-in frees it.
    pub reboot_slot_job: Option<Uuid>,
}

crate::no_relations!();
