//! A comment (`cmt_`) on a proposal, with the members it mentions as resolved when written.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "comments")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub proposal_id: Uuid,
    pub author_id: Uuid,
    pub body: String,
    /// JSON array of `{id, email, name}`.
    pub mentions: String,
    pub written_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
