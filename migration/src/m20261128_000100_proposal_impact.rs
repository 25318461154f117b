//! Impact before approval (decisions §21, issue 32): each host of a proposal keeps what its
//! agent said the proposal's changes would do to it (`proposal_hosts.impact`, JSON; NULL: not
//! worked out, which reads as unknown), and each package proposal keeps the summary of its
//! hosts' impacts with its warnings (`proposal_impacts`), both written when the evaluation
//! writes the proposal's hosts, so the proposal detail reads one row instead of every host's
//! updates.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum ProposalHosts {
    Table,
    Impact,
}

#[derive(DeriveIden)]
enum ProposalImpacts {
    Table,
    ProposalId,
    Summary,
}

#[derive(DeriveIden)]
enum Proposals {
    Table,
    Id,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(ProposalHosts::Table)
                .add_column(text_null(ProposalHosts::Impact))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(ProposalImpacts::Table)
                .col(uuid(ProposalImpacts::ProposalId).primary_key())
                .col(text(ProposalImpacts::Summary))
                .foreign_key(
                    ForeignKey::create()
                        .from(ProposalImpacts::Table, ProposalImpacts::ProposalId)
                        .to(Proposals::Table, Proposals::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(ProposalImpacts::Table).to_owned())
            .await?;
        m.alter_table(
            Table::alter()
                .table(ProposalHosts::Table)
                .drop_column(ProposalHosts::Impact)
                .to_owned(),
        )
        .await
    }
}
