//! Update proposals: policies, the proposals they open with their changes and per-host change
//! sets, decisions, comments, the jobs that carry approved changes to agents, and the
//! known-exploited catalogue that proposals are marked against.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Hosts {
    Table,
    Id,
    ReleaseUpgrade,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    ProposalSeq,
}

#[derive(DeriveIden)]
enum Policies {
    Table,
    Id,
    OrgId,
    Name,
    Version,
    ScopeGroups,
    Selector,
    RequiredApprovals,
    Apply,
    Window,
    Reboot,
    AutoMerge,
    Updates,
    MinSeverity,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum PolicyDirty {
    Table,
    PolicyId,
    Since,
}

#[derive(DeriveIden)]
enum Proposals {
    Table,
    Id,
    OrgId,
    Number,
    PolicyId,
    PolicyName,
    PolicyVersion,
    ReleaseKey,
    Kind,
    Status,
    Title,
    Required,
    Approvals,
    Apply,
    Window,
    Reboot,
    AutoMerge,
    KnownExploited,
    MaxSeverity,
    Hosts,
    Packages,
    ReleaseUpgrade,
    CreatedAt,
    UpdatedAt,
    ClosedAt,
    ScheduledFor,
    SnoozedUntil,
    SupersededBy,
}

#[derive(DeriveIden)]
enum ProposalChanges {
    Table,
    ProposalId,
    Position,
    Package,
    Ecosystem,
    FromVersion,
    ToVersion,
    SourceName,
    Hosts,
    Advisories,
}

#[derive(DeriveIden)]
enum ProposalHosts {
    Table,
    ProposalId,
    HostId,
    Changes,
}

#[derive(DeriveIden)]
enum ProposalDecisions {
    Table,
    Id,
    ProposalId,
    AccountId,
    Decision,
    Reason,
    ApprovalOf,
    At,
}

#[derive(DeriveIden)]
enum Comments {
    Table,
    Id,
    OrgId,
    ProposalId,
    AuthorId,
    Body,
    Mentions,
    WrittenAt,
}

#[derive(DeriveIden)]
enum HostJobs {
    Table,
    Id,
    OrgId,
    HostId,
    ProposalId,
    Kind,
    Payload,
    Status,
    Log,
    Rebooted,
    CreatedAt,
    DispatchedAt,
    FinishedAt,
}

#[derive(DeriveIden)]
enum KnownExploited {
    Table,
    Cve,
    AddedAt,
}

fn index(name: &str, table: impl IntoIden) -> IndexCreateStatement {
    Index::create().name(name).table(table).to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // The release upgrade a host is offered, as JSON `{to: {codename, version}}`.
        m.alter_table(
            Table::alter()
                .table(Hosts::Table)
                .add_column(text_null(Hosts::ReleaseUpgrade))
                .to_owned(),
        )
        .await?;
        // The last proposal number handed out in the organization (numbers are gap-free).
        m.alter_table(
            Table::alter()
                .table(Organizations::Table)
                .add_column(big_integer(Organizations::ProposalSeq).default(0))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Policies::Table)
                .col(uuid(Policies::Id).primary_key())
                .col(uuid(Policies::OrgId))
                .col(string(Policies::Name))
                .col(integer(Policies::Version))
                .col(text(Policies::ScopeGroups))
                .col(string_null(Policies::Selector))
                .col(integer(Policies::RequiredApprovals))
                .col(string(Policies::Apply))
                .col(text_null(Policies::Window))
                .col(string(Policies::Reboot))
                .col(boolean(Policies::AutoMerge))
                .col(string(Policies::Updates))
                .col(string_null(Policies::MinSeverity))
                .col(timestamp_with_time_zone(Policies::CreatedAt))
                .col(timestamp_with_time_zone(Policies::UpdatedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("policies_org_name", Policies::Table)
                .col(Policies::OrgId)
                .col(Policies::Name)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(PolicyDirty::Table)
                .col(uuid(PolicyDirty::PolicyId).primary_key())
                .col(timestamp_with_time_zone(PolicyDirty::Since))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Proposals::Table)
                .col(uuid(Proposals::Id).primary_key())
                .col(uuid(Proposals::OrgId))
                .col(big_integer(Proposals::Number))
                .col(uuid_null(Proposals::PolicyId))
                .col(string_null(Proposals::PolicyName))
                .col(integer_null(Proposals::PolicyVersion))
                .col(string_null(Proposals::ReleaseKey))
                .col(string(Proposals::Kind))
                .col(string(Proposals::Status))
                .col(string(Proposals::Title))
                .col(integer(Proposals::Required))
                .col(integer(Proposals::Approvals))
                .col(string(Proposals::Apply))
                .col(text_null(Proposals::Window))
                .col(string(Proposals::Reboot))
                .col(boolean(Proposals::AutoMerge))
                .col(boolean(Proposals::KnownExploited))
                .col(string_null(Proposals::MaxSeverity))
                .col(big_integer(Proposals::Hosts))
                .col(big_integer(Proposals::Packages))
                .col(text_null(Proposals::ReleaseUpgrade))
                .col(timestamp_with_time_zone(Proposals::CreatedAt))
                .col(timestamp_with_time_zone(Proposals::UpdatedAt))
                .col(timestamp_with_time_zone_null(Proposals::ClosedAt))
                .col(timestamp_with_time_zone_null(Proposals::ScheduledFor))
                .col(timestamp_with_time_zone_null(Proposals::SnoozedUntil))
                .col(uuid_null(Proposals::SupersededBy))
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("proposals_org_number", Proposals::Table)
                .col(Proposals::OrgId)
                .col(Proposals::Number)
                .unique()
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("proposals_org_id", Proposals::Table)
                .col(Proposals::OrgId)
                .col(Proposals::Id)
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("proposals_policy_status", Proposals::Table)
                .col(Proposals::PolicyId)
                .col(Proposals::Status)
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("proposals_status_scheduled", Proposals::Table)
                .col(Proposals::Status)
                .col(Proposals::ScheduledFor)
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("proposals_status_snoozed", Proposals::Table)
                .col(Proposals::Status)
                .col(Proposals::SnoozedUntil)
                .to_owned(),
        )
        .await?;

        let proposal_fk = |table: ProposalTable| {
            ForeignKey::create()
                .from(table.0, table.1)
                .to(Proposals::Table, Proposals::Id)
                .on_delete(ForeignKeyAction::Cascade)
                .to_owned()
        };

        m.create_table(
            Table::create()
                .table(ProposalChanges::Table)
                .col(uuid(ProposalChanges::ProposalId))
                .col(integer(ProposalChanges::Position))
                .col(string(ProposalChanges::Package))
                .col(string(ProposalChanges::Ecosystem))
                .col(string(ProposalChanges::FromVersion))
                .col(string(ProposalChanges::ToVersion))
                .col(string_null(ProposalChanges::SourceName))
                .col(big_integer(ProposalChanges::Hosts))
                .col(text(ProposalChanges::Advisories))
                .primary_key(
                    Index::create()
                        .col(ProposalChanges::ProposalId)
                        .col(ProposalChanges::Position),
                )
                .foreign_key(&mut proposal_fk(ProposalTable(
                    ProposalChanges::Table.into_iden(),
                    ProposalChanges::ProposalId.into_iden(),
                )))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(ProposalHosts::Table)
                .col(uuid(ProposalHosts::ProposalId))
                .col(uuid(ProposalHosts::HostId))
                .col(text(ProposalHosts::Changes))
                .primary_key(
                    Index::create()
                        .col(ProposalHosts::ProposalId)
                        .col(ProposalHosts::HostId),
                )
                .foreign_key(&mut proposal_fk(ProposalTable(
                    ProposalHosts::Table.into_iden(),
                    ProposalHosts::ProposalId.into_iden(),
                )))
                .foreign_key(
                    ForeignKey::create()
                        .from(ProposalHosts::Table, ProposalHosts::HostId)
                        .to(Hosts::Table, Hosts::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("proposal_hosts_host", ProposalHosts::Table)
                .col(ProposalHosts::HostId)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(ProposalDecisions::Table)
                .col(uuid(ProposalDecisions::Id).primary_key())
                .col(uuid(ProposalDecisions::ProposalId))
                .col(uuid(ProposalDecisions::AccountId))
                .col(string(ProposalDecisions::Decision))
                .col(text_null(ProposalDecisions::Reason))
                // The approver's account id on an approval, null otherwise: a unique index
                // makes a second approval by the same person impossible, whatever the race.
                .col(uuid_null(ProposalDecisions::ApprovalOf))
                .col(timestamp_with_time_zone(ProposalDecisions::At))
                .foreign_key(&mut proposal_fk(ProposalTable(
                    ProposalDecisions::Table.into_iden(),
                    ProposalDecisions::ProposalId.into_iden(),
                )))
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("proposal_decisions_approval", ProposalDecisions::Table)
                .col(ProposalDecisions::ProposalId)
                .col(ProposalDecisions::ApprovalOf)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Comments::Table)
                .col(uuid(Comments::Id).primary_key())
                .col(uuid(Comments::OrgId))
                .col(uuid(Comments::ProposalId))
                .col(uuid(Comments::AuthorId))
                .col(text(Comments::Body))
                .col(text(Comments::Mentions))
                .col(timestamp_with_time_zone(Comments::WrittenAt))
                .foreign_key(&mut proposal_fk(ProposalTable(
                    Comments::Table.into_iden(),
                    Comments::ProposalId.into_iden(),
                )))
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("comments_proposal_id", Comments::Table)
                .col(Comments::ProposalId)
                .col(Comments::Id)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(HostJobs::Table)
                .col(uuid(HostJobs::Id).primary_key())
                .col(uuid(HostJobs::OrgId))
                .col(uuid(HostJobs::HostId))
                .col(uuid_null(HostJobs::ProposalId))
                .col(string(HostJobs::Kind))
                .col(text(HostJobs::Payload))
                .col(string(HostJobs::Status))
                .col(text_null(HostJobs::Log))
                .col(boolean_null(HostJobs::Rebooted))
                .col(timestamp_with_time_zone(HostJobs::CreatedAt))
                .col(timestamp_with_time_zone_null(HostJobs::DispatchedAt))
                .col(timestamp_with_time_zone_null(HostJobs::FinishedAt))
                .foreign_key(
                    ForeignKey::create()
                        .from(HostJobs::Table, HostJobs::HostId)
                        .to(Hosts::Table, Hosts::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("host_jobs_host_status", HostJobs::Table)
                .col(HostJobs::HostId)
                .col(HostJobs::Status)
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("host_jobs_proposal", HostJobs::Table)
                .col(HostJobs::ProposalId)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(KnownExploited::Table)
                .col(string(KnownExploited::Cve).primary_key())
                .col(timestamp_with_time_zone(KnownExploited::AddedAt))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            KnownExploited::Table.into_iden(),
            HostJobs::Table.into_iden(),
            Comments::Table.into_iden(),
            ProposalDecisions::Table.into_iden(),
            ProposalHosts::Table.into_iden(),
            ProposalChanges::Table.into_iden(),
            Proposals::Table.into_iden(),
            PolicyDirty::Table.into_iden(),
            Policies::Table.into_iden(),
        ] {
            m.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        m.alter_table(
            Table::alter()
                .table(Organizations::Table)
                .drop_column(Organizations::ProposalSeq)
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Hosts::Table)
                .drop_column(Hosts::ReleaseUpgrade)
                .to_owned(),
        )
        .await
    }
}

struct ProposalTable(DynIden, DynIden);
