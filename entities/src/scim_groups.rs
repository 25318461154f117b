//! A group an organization's identity provider provisioned through SCIM (`scg_`); its
//! `displayName` maps to a role through the SSO connection's role mappings.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "scim_groups")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub display_name: String,
    /// Lowercased: unique in the organization.
    pub display_name_key: String,
    pub external_id: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

crate::no_relations!();
