//! Rollouts and the reboot budget (issue 31, decisions §20):
//! - `policies.rollout`, `proposals.rollout`: the rollout as JSON text (waves, soak, success
//!   percentage, failure budget, in-flight cap); a proposal keeps its policy's as it opened.
//!   NULL: one wave of every host.
//! - `proposal_hosts.wave`, `host_jobs.wave`: the wave a host of a proposal going ahead is in
//!   (0-based; NULL until the proposal goes ahead), and its jobs'.
//! - `proposal_rollouts`: one row per proposal that went ahead: its state, the waves begun,
//!   why it halted, when the scheduler must look at it again (`due_at`: a soak ending, a window
//!   opening), and the failures a resume set aside (across the proposal, and in the wave it
//!   resumed, whose success percentage they no longer count against).
//! - `organizations.max_concurrent_reboots` (NULL: no limit); `hosts.reboot_slot_until` and
//!   `reboot_slot_job`: a host holding one of those reboot slots, until when at most, and the job
//!   that took it (NULL once that job's result is in: the host's next check-in frees it).
//!
//! Proposals already going ahead when this runs become one wave (`rest`) that has begun.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Policies {
    Table,
    Rollout,
}

#[derive(DeriveIden)]
enum Proposals {
    Table,
    Id,
    Rollout,
}

#[derive(DeriveIden)]
enum ProposalHosts {
    Table,
    Wave,
}

#[derive(DeriveIden)]
enum HostJobs {
    Table,
    ProposalId,
    Wave,
    Status,
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    RebootSlotUntil,
    RebootSlotJob,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    MaxConcurrentReboots,
}

#[derive(DeriveIden)]
enum ProposalRollouts {
    Table,
    ProposalId,
    OrgId,
    State,
    Begun,
    Waves,
    HaltedReason,
    HaltedAt,
    DueAt,
    FailuresForgiven,
    ForgivenWave,
    ForgivenInWave,
    UpdatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // SQLite alters one column per statement.
        m.alter_table(
            Table::alter()
                .table(Policies::Table)
                .add_column(text_null(Policies::Rollout))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Proposals::Table)
                .add_column(text_null(Proposals::Rollout))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(ProposalHosts::Table)
                .add_column(integer_null(ProposalHosts::Wave))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(HostJobs::Table)
                .add_column(integer_null(HostJobs::Wave))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Hosts::Table)
                .add_column(timestamp_with_time_zone_null(Hosts::RebootSlotUntil))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Hosts::Table)
                .add_column(uuid_null(Hosts::RebootSlotJob))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Organizations::Table)
                .add_column(integer_null(Organizations::MaxConcurrentReboots))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(ProposalRollouts::Table)
                .col(uuid(ProposalRollouts::ProposalId).primary_key())
                .col(uuid(ProposalRollouts::OrgId))
                .col(string(ProposalRollouts::State))
                .col(integer(ProposalRollouts::Begun).default(0))
                .col(text(ProposalRollouts::Waves))
                .col(text_null(ProposalRollouts::HaltedReason))
                .col(timestamp_with_time_zone_null(ProposalRollouts::HaltedAt))
                .col(timestamp_with_time_zone_null(ProposalRollouts::DueAt))
                .col(big_integer(ProposalRollouts::FailuresForgiven).default(0))
                .col(integer_null(ProposalRollouts::ForgivenWave))
                .col(big_integer(ProposalRollouts::ForgivenInWave).default(0))
                .col(timestamp_with_time_zone(ProposalRollouts::UpdatedAt))
                .foreign_key(
                    ForeignKey::create()
                        .from(ProposalRollouts::Table, ProposalRollouts::ProposalId)
                        .to(Proposals::Table, Proposals::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        // What the job-result path and dispatch ask of a wave: is any job of it unfinished, how
        // many failed, how many are in flight.
        m.create_index(
            Index::create()
                .name("host_jobs_proposal_wave_status")
                .table(HostJobs::Table)
                .col(HostJobs::ProposalId)
                .col(HostJobs::Wave)
                .col(HostJobs::Status)
                .to_owned(),
        )
        .await?;
        let db = m.get_connection();
        // Partial indexes (both databases have them): only the few rows that take part.
        db.execute_unprepared(
            "CREATE INDEX hosts_reboot_slots ON hosts (org_id, reboot_slot_until) \
             WHERE reboot_slot_until IS NOT NULL",
        )
        .await?;
        db.execute_unprepared(
            "CREATE INDEX proposal_rollouts_due ON proposal_rollouts (due_at) \
             WHERE due_at IS NOT NULL",
        )
        .await?;
        // Proposals going ahead now: one wave of every host, begun unless still scheduled.
        db.execute_unprepared(
            "INSERT INTO proposal_rollouts \
             (proposal_id, org_id, state, begun, waves, failures_forgiven, updated_at) \
             SELECT id, org_id, \
                    CASE status WHEN 'scheduled' THEN 'waiting' ELSE 'running' END, \
                    CASE status WHEN 'scheduled' THEN 0 ELSE 1 END, \
                    '[{\"name\":\"rest\",\"hosts\":' || CAST(hosts AS TEXT) || '}]', \
                    0, updated_at \
             FROM proposals WHERE status IN ('approved', 'scheduled', 'applying')",
        )
        .await?;
        db.execute_unprepared(
            "UPDATE proposal_hosts SET wave = 0 WHERE proposal_id IN \
             (SELECT proposal_id FROM proposal_rollouts)",
        )
        .await?;
        db.execute_unprepared(
            "UPDATE host_jobs SET wave = 0 WHERE proposal_id IN \
             (SELECT proposal_id FROM proposal_rollouts)",
        )
        .await?;
        Ok(())
    }
}
