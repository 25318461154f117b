//! What the agent protocol keeps: the deployment's secrets (the agent CA), the keys the service
//! certified for each host, nonces already seen (replay protection across api replicas), the
//! installed packages and available updates each host reported, and billable host-days with
//! their daily per-organization rollup.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum DeploymentSecrets {
    Table,
    Name,
    Value,
    CreatedAt,
}

#[derive(DeriveIden)]
enum HostKeys {
    Table,
    KeyId,
    HostId,
    OrgId,
    PublicKey,
    Certificate,
    NotAfter,
    RevokedAt,
    CreatedAt,
}

#[derive(DeriveIden)]
enum AgentNonces {
    Table,
    KeyId,
    Nonce,
    SeenAt,
}

#[derive(DeriveIden)]
enum HostPackages {
    Table,
    HostId,
    Name,
    Arch,
    Version,
    SourceName,
    SourceVersion,
}

#[derive(DeriveIden)]
enum HostUpdates {
    Table,
    HostId,
    Name,
    Arch,
    FromVersion,
    ToVersion,
    Ecosystem,
    SourceName,
    Security,
    RequiresReboot,
    Advisories,
}

#[derive(DeriveIden)]
enum HostDays {
    Table,
    HostId,
    Day,
    OrgId,
}

#[derive(DeriveIden)]
enum UsageDays {
    Table,
    OrgId,
    Day,
    ActiveHosts,
    Reported,
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    Id,
}

fn host_fk(from: (impl IntoIden, impl IntoIden)) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .from(from.0, from.1)
        .to(Hosts::Table, Hosts::Id)
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(DeploymentSecrets::Table)
                .col(string(DeploymentSecrets::Name).primary_key())
                .col(text(DeploymentSecrets::Value))
                .col(timestamp_with_time_zone(DeploymentSecrets::CreatedAt))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(HostKeys::Table)
                .col(string(HostKeys::KeyId).primary_key())
                .col(uuid(HostKeys::HostId))
                .col(uuid(HostKeys::OrgId))
                .col(blob(HostKeys::PublicKey))
                .col(text(HostKeys::Certificate))
                .col(timestamp_with_time_zone(HostKeys::NotAfter))
                .col(timestamp_with_time_zone_null(HostKeys::RevokedAt))
                .col(timestamp_with_time_zone(HostKeys::CreatedAt))
                .foreign_key(&mut host_fk((HostKeys::Table, HostKeys::HostId)))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("host_keys_host")
                .table(HostKeys::Table)
                .col(HostKeys::HostId)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(AgentNonces::Table)
                .col(string(AgentNonces::KeyId))
                .col(string(AgentNonces::Nonce))
                .col(timestamp_with_time_zone(AgentNonces::SeenAt))
                .primary_key(
                    Index::create()
                        .col(AgentNonces::KeyId)
                        .col(AgentNonces::Nonce),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("agent_nonces_seen")
                .table(AgentNonces::Table)
                .col(AgentNonces::SeenAt)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(HostPackages::Table)
                .col(uuid(HostPackages::HostId))
                .col(string(HostPackages::Name))
                .col(string(HostPackages::Arch))
                .col(string(HostPackages::Version))
                .col(string_null(HostPackages::SourceName))
                .col(string_null(HostPackages::SourceVersion))
                .primary_key(
                    Index::create()
                        .col(HostPackages::HostId)
                        .col(HostPackages::Name)
                        .col(HostPackages::Arch),
                )
                .foreign_key(&mut host_fk((HostPackages::Table, HostPackages::HostId)))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(HostUpdates::Table)
                .col(uuid(HostUpdates::HostId))
                .col(string(HostUpdates::Name))
                .col(string(HostUpdates::Arch))
                .col(string(HostUpdates::FromVersion))
                .col(string(HostUpdates::ToVersion))
                .col(string(HostUpdates::Ecosystem))
                .col(string_null(HostUpdates::SourceName))
                .col(boolean(HostUpdates::Security))
                .col(boolean(HostUpdates::RequiresReboot))
                .col(text(HostUpdates::Advisories))
                .primary_key(
                    Index::create()
                        .col(HostUpdates::HostId)
                        .col(HostUpdates::Name)
                        .col(HostUpdates::Arch),
                )
                .foreign_key(&mut host_fk((HostUpdates::Table, HostUpdates::HostId)))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("host_updates_package")
                .table(HostUpdates::Table)
                .col(HostUpdates::Name)
                .col(HostUpdates::FromVersion)
                .col(HostUpdates::ToVersion)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(HostDays::Table)
                .col(uuid(HostDays::HostId))
                .col(date(HostDays::Day))
                .col(uuid(HostDays::OrgId))
                .primary_key(Index::create().col(HostDays::HostId).col(HostDays::Day))
                .foreign_key(&mut host_fk((HostDays::Table, HostDays::HostId)))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("host_days_org_day")
                .table(HostDays::Table)
                .col(HostDays::OrgId)
                .col(HostDays::Day)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(UsageDays::Table)
                .col(uuid(UsageDays::OrgId))
                .col(date(UsageDays::Day))
                .col(integer(UsageDays::ActiveHosts))
                .col(boolean(UsageDays::Reported).default(false))
                .primary_key(Index::create().col(UsageDays::OrgId).col(UsageDays::Day))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            UsageDays::Table.into_iden(),
            HostDays::Table.into_iden(),
            HostUpdates::Table.into_iden(),
            HostPackages::Table.into_iden(),
            AgentNonces::Table.into_iden(),
            HostKeys::Table.into_iden(),
            DeploymentSecrets::Table.into_iden(),
        ] {
            m.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}
