//! One change of a proposal: a package from one version to another, on `hosts` of its hosts. `position` is stable while the proposal lives, so per-host change sets can refer to it.

use sea_orm::entity::prelude::*;

use crate::json::{Advisory, JsonText};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "proposal_changes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub proposal_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub position: i32,
    pub package: String,
    pub ecosystem: String,
    pub from_version: String,
    pub to_version: String,
    pub source_name: Option<String>,
    /// The distribution (`ubuntu`, `debian`, …) of the first host reported with it: where its
    /// changelog is looked up.
    pub distro: Option<String>,
    pub hosts: i64,
    pub advisories: JsonText<Vec<Advisory>>,
}

crate::no_relations!();
