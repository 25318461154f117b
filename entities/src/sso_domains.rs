//! A domain an organization claims for single sign-on (decisions §15): verified once the TXT
//! record `_service-challenge.<domain>` holds `txt_value`. Deleting the claim releases it.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "sso_domains")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub org_id: Uuid,
    /// Lowercase, without a trailing dot.
    #[sea_orm(primary_key, auto_increment = false)]
    pub domain: String,
    /// `service-domain-verification=<32 base32>`.
    pub txt_value: String,
    pub verified_at: Option<DateTimeUtc>,
    /// The domain once verified, else null: unique, so one organization at most has a domain
    /// verified.
    pub verified_domain: Option<String>,
    pub created_at: DateTimeUtc,
}

crate::no_relations!();
