//! The check-in's hot path (issue 15).
//!
//! - `host_inventories`: what a host's stored inventory holds, in one row per host: a
//!   fingerprint of each stored package and update, so that a changed check-in finds the rows
//!   to write without reading back every row of `host_packages` and `host_updates`. NULL: not
//!   known yet (the rows are read once and the fingerprints written).
//! - On Postgres, `agent_nonces_seen` becomes a BRIN index: nonces arrive in `seen_at` order,
//!   so a block-range summary serves the minutely delete of old nonces as well as a B-tree
//!   did, and a nonce's insert no longer adds a B-tree entry besides its primary key's.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum HostInventories {
    Table,
    HostId,
    Packages,
    Updates,
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    Id,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(HostInventories::Table)
                .col(uuid(HostInventories::HostId).primary_key())
                .col(text_null(HostInventories::Packages))
                .col(text_null(HostInventories::Updates))
                .foreign_key(
                    ForeignKey::create()
                        .from(HostInventories::Table, HostInventories::HostId)
                        .to(Hosts::Table, Hosts::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        if m.get_database_backend() == sea_orm_migration::sea_orm::DatabaseBackend::Postgres {
            let db = m.get_connection();
            db.execute_unprepared("DROP INDEX IF EXISTS agent_nonces_seen")
                .await?;
            db.execute_unprepared(
                "CREATE INDEX agent_nonces_seen ON agent_nonces USING brin (seen_at)",
            )
            .await?;
        }
        Ok(())
    }
}
