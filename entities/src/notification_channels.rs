//! A notification channel (`nch_`): where an organization's notifications go. Its
//! configuration is sealed (AES-256-GCM under `SECRETS_KEY`, fresh nonce per write) and never
//! leaves the service; `display` tells channels apart without revealing anything usable.

use sea_orm::entity::prelude::*;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "notification_channels")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    /// slack, teams, email, ntfy, pagerduty or webhook.
    pub kind: String,
    /// Unique within the organization.
    pub name: String,
    pub display: String,
    /// The sealed configuration (`v1:…`, see `platform::crypto`).
    pub config: String,
    /// JSON array of event types; null is every event.
    pub events: Option<crate::json::JsonText<Vec<String>>>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The sealed configuration stays out of logs even though it is encrypted.
        f.debug_struct("notification_channels::Model")
            .field("id", &self.id)
            .field("org_id", &self.org_id)
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("display", &self.display)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

crate::no_relations!();
