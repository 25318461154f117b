//! An organization's OpenID Connect connection (decisions §15), one per organization. The
//! client secret is sealed (AES-256-GCM under `SECRETS_KEY`, see `platform::crypto`) and never
//! leaves the service. Whether sign-in through it is enforced is `organizations.sso_enforced`.

use sea_orm::entity::prelude::*;

use crate::json::{JsonText, RoleMapping};

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "sso_connections")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub org_id: Uuid,
    pub enabled: bool,
    /// The https issuer, equal to the one its discovery document names.
    pub issuer: String,
    pub client_id: String,
    /// The sealed client secret (`v1:…`).
    pub client_secret: String,
    /// The ID token (or userinfo) claim holding the member's groups; `groups` by default.
    pub groups_claim: String,
    /// Group (matched exactly) to role; never owner.
    pub role_mappings: JsonText<Vec<RoleMapping>>,
    /// admin, operator or viewer for somebody no mapping matches; none refuses them.
    pub default_role: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The sealed secret stays out of logs even though it is encrypted.
        f.debug_struct("sso_connections::Model")
            .field("org_id", &self.org_id)
            .field("enabled", &self.enabled)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("groups_claim", &self.groups_claim)
            .field("role_mappings", &self.role_mappings)
            .field("default_role", &self.default_role)
            .finish_non_exhaustive()
    }
}

crate::no_relations!();
