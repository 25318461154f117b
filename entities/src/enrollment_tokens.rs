//! An enrollment token record (`etk_`); the `enr_` value itself is only kept as a hash.

use sea_orm::entity::prelude::*;

use crate::json::{JsonText, Labels};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "enrollment_tokens")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    /// Labels put on every host that enrols with it.
    pub labels: JsonText<Labels>,
    pub token_hash: Vec<u8>,
    pub max_uses: Option<i32>,
    /// Hosts that enrolled and then checked in.
    pub uses: i32,
    pub expires_at: Option<DateTimeUtc>,
    pub revoked_at: Option<DateTimeUtc>,
    pub created_by: Uuid,
    pub created_at: DateTimeUtc,
}

crate::no_relations!();
