//! What a package proposal's changes would do to its hosts, summed up when its hosts are
//! written (decisions §21): counts of hosts rebooting and unknown, the units restarting and the
//! packages installed and removed with their host counts, and the warnings.

use sea_orm::entity::prelude::*;

use crate::json::{ImpactSummary, JsonText};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "proposal_impacts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub proposal_id: Uuid,
    pub summary: JsonText<ImpactSummary>,
}

crate::no_relations!();
