//! Update intelligence: the shared changelog cache (one row per distribution, source package
//! and version, no tenant data), the distribution a proposal's change was reported on (so its
//! changelog can be found), and the agent release channels read from the manifest.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Changelogs {
    Table,
    Distro,
    Source,
    Version,
    Status,
    Url,
    Entries,
    Attempts,
    FirstAttemptAt,
    FetchedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum ProposalChanges {
    Table,
    Distro,
}

#[derive(DeriveIden)]
enum AgentReleases {
    Table,
    Channel,
    Version,
    ReleasedAt,
    SeenAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(Changelogs::Table)
                .col(string(Changelogs::Distro))
                .col(string(Changelogs::Source))
                .col(string(Changelogs::Version))
                .col(string(Changelogs::Status))
                .col(text_null(Changelogs::Url))
                .col(text(Changelogs::Entries))
                .col(integer(Changelogs::Attempts))
                .col(timestamp_with_time_zone_null(Changelogs::FirstAttemptAt))
                .col(timestamp_with_time_zone_null(Changelogs::FetchedAt))
                .col(timestamp_with_time_zone(Changelogs::UpdatedAt))
                .primary_key(
                    Index::create()
                        .col(Changelogs::Distro)
                        .col(Changelogs::Source)
                        .col(Changelogs::Version),
                )
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(ProposalChanges::Table)
                .add_column(string_null(ProposalChanges::Distro))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(AgentReleases::Table)
                .col(string(AgentReleases::Channel).primary_key())
                .col(string(AgentReleases::Version))
                .col(timestamp_with_time_zone_null(AgentReleases::ReleasedAt))
                .col(timestamp_with_time_zone(AgentReleases::SeenAt))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(AgentReleases::Table).to_owned())
            .await?;
        m.alter_table(
            Table::alter()
                .table(ProposalChanges::Table)
                .drop_column(ProposalChanges::Distro)
                .to_owned(),
        )
        .await?;
        m.drop_table(Table::drop().table(Changelogs::Table).to_owned())
            .await
    }
}
