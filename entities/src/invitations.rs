//! An invitation (`inv_`) to join an organization with a role; only the token's hash is kept.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "invitations")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub email: String,
    pub role: String,
    pub token_hash: Vec<u8>,
    pub invited_by: Uuid,
    pub created_at: DateTimeUtc,
    pub expires_at: DateTimeUtc,
    pub accepted_at: Option<DateTimeUtc>,
    pub revoked_at: Option<DateTimeUtc>,
    /// Why it was revoked when nobody revoked it by hand (its inviter may no longer invite).
    pub revoked_reason: Option<String>,
    /// Sent by SCIM provisioning to an address outside the verified domains (decisions §18):
    /// accepting it gives the role the provider's groups give then.
    pub via_scim: bool,
}

crate::no_relations!();
