//! An organization's SCIM provisioning token (`scim_…`): one per organization, hash only.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "scim_tokens")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub org_id: Uuid,
    pub token_hash: Vec<u8>,
    pub issued_by: Uuid,
    pub issued_at: DateTimeUtc,
    pub last_used_at: Option<DateTimeUtc>,
    /// Set when the token stopped working without being replaced: its issuer is no longer an
    /// owner (decisions §18). A revoked token is never accepted.
    pub revoked_at: Option<DateTimeUtc>,
    pub revoked_reason: Option<String>,
}

crate::no_relations!();
