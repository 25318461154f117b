//! A key the service certified for a host: `key_id` is the certificate's serial in lowercase
//! hex, what the agent names in its signatures' `keyid`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "host_keys")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub key_id: String,
    pub host_id: Uuid,
    pub org_id: Uuid,
    /// SubjectPublicKeyInfo, DER.
    pub public_key: Vec<u8>,
    pub certificate: String,
    pub not_after: DateTimeUtc,
    pub revoked_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
}

crate::no_relations!();
