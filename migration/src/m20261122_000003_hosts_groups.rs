//! Hosts (identified by `machine_id` within an organization), their events, and groups with
//! static and label-selected members.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Hosts {
    Table,
    Id,
    OrgId,
    MachineId,
    Hostname,
    DisplayName,
    Notes,
    Labels,
    Distro,
    DistroVersion,
    DistroCodename,
    OsFamily,
    Arch,
    KernelVersion,
    Virtualization,
    AgentVersion,
    AgentMode,
    AgentPermissions,
    AgentInstall,
    Cloud,
    Frozen,
    Snapshots,
    RebootRequired,
    ServicesNeedRestart,
    HeldPackages,
    UpdatesTotal,
    UpdatesSecurity,
    UpdatesRequiringReboot,
    AdvisoryCoverage,
    Status,
    EnrollmentTokenId,
    InventoryDigest,
    CheckInIntervalS,
    EnrolledAt,
    LastSeenAt,
    LastInventoryAt,
    CertExpiresAt,
    DecommissionedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum HostLabels {
    Table,
    OrgId,
    HostId,
    Key,
    Value,
}

#[derive(DeriveIden)]
enum HostEvents {
    Table,
    Id,
    OrgId,
    HostId,
    Kind,
    Details,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Groups {
    Table,
    Id,
    OrgId,
    Name,
    Selector,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum GroupHosts {
    Table,
    GroupId,
    HostId,
    /// `static` (set by PUT …/hosts) or `label` (kept by host evaluation).
    Source,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(Hosts::Table)
                .col(uuid(Hosts::Id).primary_key())
                .col(uuid(Hosts::OrgId))
                .col(string(Hosts::MachineId))
                .col(string(Hosts::Hostname))
                .col(string_null(Hosts::DisplayName))
                .col(text_null(Hosts::Notes))
                .col(text(Hosts::Labels))
                .col(string_null(Hosts::Distro))
                .col(string_null(Hosts::DistroVersion))
                .col(string_null(Hosts::DistroCodename))
                .col(string_null(Hosts::OsFamily))
                .col(string_null(Hosts::Arch))
                .col(string_null(Hosts::KernelVersion))
                .col(string_null(Hosts::Virtualization))
                .col(string_null(Hosts::AgentVersion))
                .col(string_null(Hosts::AgentMode))
                .col(text_null(Hosts::AgentPermissions))
                .col(text_null(Hosts::AgentInstall))
                .col(text_null(Hosts::Cloud))
                .col(text_null(Hosts::Frozen))
                .col(text_null(Hosts::Snapshots))
                .col(boolean_null(Hosts::RebootRequired))
                .col(text(Hosts::ServicesNeedRestart))
                .col(text(Hosts::HeldPackages))
                .col(integer_null(Hosts::UpdatesTotal))
                .col(integer_null(Hosts::UpdatesSecurity))
                .col(integer_null(Hosts::UpdatesRequiringReboot))
                .col(string(Hosts::AdvisoryCoverage).default("unknown_release"))
                .col(string(Hosts::Status).default("pending"))
                .col(uuid_null(Hosts::EnrollmentTokenId))
                .col(string_null(Hosts::InventoryDigest))
                .col(integer(Hosts::CheckInIntervalS).default(300))
                .col(timestamp_with_time_zone(Hosts::EnrolledAt))
                .col(timestamp_with_time_zone_null(Hosts::LastSeenAt))
                .col(timestamp_with_time_zone_null(Hosts::LastInventoryAt))
                .col(timestamp_with_time_zone_null(Hosts::CertExpiresAt))
                .col(timestamp_with_time_zone_null(Hosts::DecommissionedAt))
                .col(timestamp_with_time_zone(Hosts::UpdatedAt))
                .foreign_key(
                    ForeignKey::create()
                        .from(Hosts::Table, Hosts::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("hosts_org_machine")
                .table(Hosts::Table)
                .col(Hosts::OrgId)
                .col(Hosts::MachineId)
                .unique()
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("hosts_org_id")
                .table(Hosts::Table)
                .col(Hosts::OrgId)
                .col(Hosts::Id)
                .to_owned(),
        )
        .await?;

        // Labels again, one row each, so that selectors filter through an index.
        m.create_table(
            Table::create()
                .table(HostLabels::Table)
                .col(uuid(HostLabels::OrgId))
                .col(uuid(HostLabels::HostId))
                .col(string(HostLabels::Key))
                .col(string(HostLabels::Value))
                .primary_key(Index::create().col(HostLabels::HostId).col(HostLabels::Key))
                .foreign_key(
                    ForeignKey::create()
                        .from(HostLabels::Table, HostLabels::HostId)
                        .to(Hosts::Table, Hosts::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("host_labels_org_key_value")
                .table(HostLabels::Table)
                .col(HostLabels::OrgId)
                .col(HostLabels::Key)
                .col(HostLabels::Value)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(HostEvents::Table)
                .col(uuid(HostEvents::Id).primary_key())
                .col(uuid(HostEvents::OrgId))
                .col(uuid(HostEvents::HostId))
                .col(string(HostEvents::Kind))
                .col(text_null(HostEvents::Details))
                .col(timestamp_with_time_zone(HostEvents::CreatedAt))
                .foreign_key(
                    ForeignKey::create()
                        .from(HostEvents::Table, HostEvents::HostId)
                        .to(Hosts::Table, Hosts::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("host_events_host")
                .table(HostEvents::Table)
                .col(HostEvents::HostId)
                .col(HostEvents::Id)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Groups::Table)
                .col(uuid(Groups::Id).primary_key())
                .col(uuid(Groups::OrgId))
                .col(string(Groups::Name))
                .col(text_null(Groups::Selector))
                .col(timestamp_with_time_zone(Groups::CreatedAt))
                .col(timestamp_with_time_zone(Groups::UpdatedAt))
                .foreign_key(
                    ForeignKey::create()
                        .from(Groups::Table, Groups::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("groups_org_name")
                .table(Groups::Table)
                .col(Groups::OrgId)
                .col(Groups::Name)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(GroupHosts::Table)
                .col(uuid(GroupHosts::GroupId))
                .col(uuid(GroupHosts::HostId))
                .col(string(GroupHosts::Source))
                .primary_key(
                    Index::create()
                        .col(GroupHosts::GroupId)
                        .col(GroupHosts::Source)
                        .col(GroupHosts::HostId),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(GroupHosts::Table, GroupHosts::GroupId)
                        .to(Groups::Table, Groups::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(GroupHosts::Table, GroupHosts::HostId)
                        .to(Hosts::Table, Hosts::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("group_hosts_host")
                .table(GroupHosts::Table)
                .col(GroupHosts::HostId)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            GroupHosts::Table.into_iden(),
            Groups::Table.into_iden(),
            HostEvents::Table.into_iden(),
            HostLabels::Table.into_iden(),
            Hosts::Table.into_iden(),
        ] {
            m.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}
