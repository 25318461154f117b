//! A comment (`cmt_`) on a proposal, with the members it mentions as resolved when written.

use sea_orm::entity::prelude::*;

use crate::json::{JsonText, Mention};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "comments")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub proposal_id: Uuid,
    pub author_id: Uuid,
    pub body: String,
    pub mentions: JsonText<Vec<Mention>>,
    pub written_at: DateTimeUtc,
}

crate::no_relations!();
