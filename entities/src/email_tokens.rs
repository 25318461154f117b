//! A one-time token sent by email (sign-in or sign-up); only its hash is kept.

use sea_orm::entity::prelude::*;

use crate::json::{JsonText, SignUpPayload};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "email_tokens")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub token_hash: Vec<u8>,
    /// sign_in or sign_up.
    pub purpose: String,
    pub email: String,
    /// What sign-up asked for (name, organization).
    pub payload: Option<JsonText<SignUpPayload>>,
    pub created_at: DateTimeUtc,
    pub expires_at: DateTimeUtc,
    pub used_at: Option<DateTimeUtc>,
}

crate::no_relations!();
