//! sea-orm entities of the service's tables, one module per table. Rows only: request and
//! response types live with their operations in `api`. JSON columns are [`json::JsonText`] of
//! the type they hold ([`json`]). [`scope`] is the one way to query them: an organization's
//! rows through its `OrgScope`, work across organizations through `AllOrgs`.

/// The part of a table's sea-orm declaration that is the same for every table with no
/// relations: the empty `Relation` and the default `ActiveModelBehavior`. A table module
/// declares its `Model` and calls this; tables that are joined declare their relations.
macro_rules! no_relations {
    () => {
        #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
        pub enum Relation {}

        impl ActiveModelBehavior for ActiveModel {}
    };
}
pub(crate) use no_relations;

pub mod accounts;
pub mod agent_nonces;
pub mod agent_releases;
pub mod api_tokens;
pub mod audit_events;
pub mod changelogs;
pub mod comments;
pub mod deployment_secrets;
pub mod digest_settings;
pub mod email_sends;
pub mod email_tokens;
pub mod enrollment_tokens;
pub mod group_hosts;
pub mod groups;
pub mod host_days;
pub mod host_events;
pub mod host_inventories;
pub mod host_jobs;
pub mod host_keys;
pub mod host_labels;
pub mod host_packages;
pub mod host_updates;
pub mod hosts;
pub mod invitations;
pub mod json;
mod json_rollout;
pub mod known_exploited;
pub mod memberships;
pub mod notification_attempts;
pub mod notification_channels;
pub mod notification_deliveries;
pub mod notification_events;
pub mod organizations;
pub mod payment_events;
pub mod policies;
pub mod policy_dirty;
pub mod proposal_changes;
pub mod proposal_decisions;
pub mod proposal_hosts;
pub mod proposal_impacts;
pub mod proposal_rollouts;
pub mod proposals;
pub mod scim_group_members;
pub mod scim_groups;
pub mod scim_tokens;
pub mod scim_users;
pub mod scope;
pub mod sessions;
pub mod sso_connections;
pub mod sso_domains;
pub mod sso_logins;
pub mod subscriptions;
pub mod usage_days;
