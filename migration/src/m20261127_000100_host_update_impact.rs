//! Impact before approval (decisions §21, issue 28): each reported update keeps what its agent
//! said applying it would do, `{reboot, restarts, installs, removes}` as JSON text. NULL is an
//! agent that did not say (unknown), never "no impact".

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum HostUpdates {
    Table,
    Impact,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(HostUpdates::Table)
                .add_column(text_null(HostUpdates::Impact))
                .to_owned(),
        )
        .await
    }
}
