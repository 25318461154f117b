//! A fingerprint of each package and update stored for a host (`host_packages`,
//! `host_updates`), kept in step with those rows by the check-in that writes them, so that a
//! changed inventory is compared without reading them back. `None`: not known (read the rows).

use sea_orm::entity::prelude::*;

use crate::json::JsonText;

/// `(name, arch, fingerprint of the rest of the row)`, sorted by name and arch.
pub type Fingerprints = Vec<(String, String, String)>;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "host_inventories")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub host_id: Uuid,
    pub packages: Option<JsonText<Fingerprints>>,
    pub updates: Option<JsonText<Fingerprints>>,
}

crate::no_relations!();
