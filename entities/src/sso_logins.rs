//! A single sign-on in flight (decisions §15): created by `GET /auth/sso/start`, consumed once
//! by the callback within ten minutes. Only the `state`'s hash is kept; the PKCE verifier is
//! sealed.

use sea_orm::entity::prelude::*;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "sso_logins")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// `platform::secrets::hash` of the `state` sent to the provider.
    pub state_hash: Vec<u8>,
    pub org_id: Uuid,
    /// The address sign-in started for (the provider's `login_hint`).
    pub email: String,
    /// The `nonce` the ID token must carry.
    pub nonce: String,
    /// The sealed PKCE code verifier.
    pub pkce_verifier: String,
    /// `platform::secrets::hash` of the `service_sso` cookie set in the browser that started
    /// the sign-in: the callback must come from that browser (decisions §18).
    pub browser_hash: Option<Vec<u8>>,
    pub created_at: DateTimeUtc,
    pub expires_at: DateTimeUtc,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("sso_logins::Model")
            .field("id", &self.id)
            .field("org_id", &self.org_id)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

crate::no_relations!();
