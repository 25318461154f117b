//! An update available to a host, as its agent last reported.

use sea_orm::entity::prelude::*;

use crate::json::{Advisory, Impact, JsonText};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "host_updates")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub host_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub name: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub arch: String,
    pub from_version: String,
    pub to_version: String,
    pub ecosystem: String,
    pub source_name: Option<String>,
    pub security: bool,
    pub requires_reboot: bool,
    pub advisories: JsonText<Vec<Advisory>>,
    /// What the agent said applying it would do (decisions §21); `None`: it did not say.
    pub impact: Option<JsonText<Impact>>,
}

crate::no_relations!();
