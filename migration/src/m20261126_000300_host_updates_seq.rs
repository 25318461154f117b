//! Incremental policy evaluation (issue 15): `hosts.updates_seq` counts the changes of a
//! host's stored updates (`host_updates`). The check-in that writes them adds one in the same
//! transaction, so an evaluation that remembers what it read of a host at some count reads the
//! host's updates again only once the count has moved.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Hosts {
    Table,
    UpdatesSeq,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Hosts::Table)
                .add_column(big_integer(Hosts::UpdatesSeq).default(0))
                .to_owned(),
        )
        .await
    }
}
