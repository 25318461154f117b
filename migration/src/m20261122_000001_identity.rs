//! Accounts, organizations and everything that decides who may do what: memberships, one-time
//! email tokens, sessions, API tokens, invitations, the audit log and rate-limit state.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Accounts {
    Table,
    Id,
    Email,
    Name,
    TimeZone,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
    Slug,
    Name,
    Plan,
    SsoEnforced,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Memberships {
    Table,
    OrgId,
    AccountId,
    Role,
    CreatedAt,
}

#[derive(DeriveIden)]
enum EmailTokens {
    Table,
    Id,
    TokenHash,
    Purpose,
    Email,
    Payload,
    CreatedAt,
    ExpiresAt,
    UsedAt,
}

#[derive(DeriveIden)]
enum Sessions {
    Table,
    Id,
    TokenHash,
    AccountId,
    CsrfToken,
    CreatedAt,
    LastSeenAt,
    ExpiresAt,
}

#[derive(DeriveIden)]
enum ApiTokens {
    Table,
    Id,
    OrgId,
    Name,
    Role,
    TokenHash,
    CreatedBy,
    CreatedAt,
    ExpiresAt,
    LastUsedAt,
    RevokedAt,
}

#[derive(DeriveIden)]
enum Invitations {
    Table,
    Id,
    OrgId,
    Email,
    Role,
    TokenHash,
    InvitedBy,
    CreatedAt,
    ExpiresAt,
    AcceptedAt,
    RevokedAt,
}

#[derive(DeriveIden)]
enum AuditEvents {
    Table,
    Id,
    OrgId,
    ActorAccountId,
    ActorApiTokenId,
    Action,
    TargetKind,
    TargetId,
    Ip,
    Details,
    CreatedAt,
}

#[derive(DeriveIden)]
enum RateLimits {
    Table,
    Key,
    TatMs,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(Accounts::Table)
                .col(uuid(Accounts::Id).primary_key())
                .col(string_uniq(Accounts::Email))
                .col(string_null(Accounts::Name))
                .col(string(Accounts::TimeZone).default("UTC"))
                .col(timestamp_with_time_zone(Accounts::CreatedAt))
                .col(timestamp_with_time_zone(Accounts::UpdatedAt))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Organizations::Table)
                .col(uuid(Organizations::Id).primary_key())
                .col(string_uniq(Organizations::Slug))
                .col(string(Organizations::Name))
                .col(string(Organizations::Plan).default("free"))
                .col(boolean(Organizations::SsoEnforced).default(false))
                .col(timestamp_with_time_zone(Organizations::CreatedAt))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Memberships::Table)
                .col(uuid(Memberships::OrgId))
                .col(uuid(Memberships::AccountId))
                .col(string(Memberships::Role))
                .col(timestamp_with_time_zone(Memberships::CreatedAt))
                .primary_key(
                    Index::create()
                        .col(Memberships::OrgId)
                        .col(Memberships::AccountId),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(Memberships::Table, Memberships::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(Memberships::Table, Memberships::AccountId)
                        .to(Accounts::Table, Accounts::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("memberships_account")
                .table(Memberships::Table)
                .col(Memberships::AccountId)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(EmailTokens::Table)
                .col(uuid(EmailTokens::Id).primary_key())
                .col(binary_len_uniq(EmailTokens::TokenHash, 32))
                .col(string(EmailTokens::Purpose))
                .col(string(EmailTokens::Email))
                .col(text_null(EmailTokens::Payload))
                .col(timestamp_with_time_zone(EmailTokens::CreatedAt))
                .col(timestamp_with_time_zone(EmailTokens::ExpiresAt))
                .col(timestamp_with_time_zone_null(EmailTokens::UsedAt))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Sessions::Table)
                .col(uuid(Sessions::Id).primary_key())
                .col(binary_len_uniq(Sessions::TokenHash, 32))
                .col(uuid(Sessions::AccountId))
                .col(string(Sessions::CsrfToken))
                .col(timestamp_with_time_zone(Sessions::CreatedAt))
                .col(timestamp_with_time_zone(Sessions::LastSeenAt))
                .col(timestamp_with_time_zone(Sessions::ExpiresAt))
                .foreign_key(
                    ForeignKey::create()
                        .from(Sessions::Table, Sessions::AccountId)
                        .to(Accounts::Table, Accounts::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("sessions_account")
                .table(Sessions::Table)
                .col(Sessions::AccountId)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(ApiTokens::Table)
                .col(uuid(ApiTokens::Id).primary_key())
                .col(uuid(ApiTokens::OrgId))
                .col(string(ApiTokens::Name))
                .col(string(ApiTokens::Role))
                .col(binary_len_uniq(ApiTokens::TokenHash, 32))
                .col(uuid(ApiTokens::CreatedBy))
                .col(timestamp_with_time_zone(ApiTokens::CreatedAt))
                .col(timestamp_with_time_zone_null(ApiTokens::ExpiresAt))
                .col(timestamp_with_time_zone_null(ApiTokens::LastUsedAt))
                .col(timestamp_with_time_zone_null(ApiTokens::RevokedAt))
                .foreign_key(
                    ForeignKey::create()
                        .from(ApiTokens::Table, ApiTokens::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("api_tokens_org")
                .table(ApiTokens::Table)
                .col(ApiTokens::OrgId)
                .col(ApiTokens::Id)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Invitations::Table)
                .col(uuid(Invitations::Id).primary_key())
                .col(uuid(Invitations::OrgId))
                .col(string(Invitations::Email))
                .col(string(Invitations::Role))
                .col(binary_len_uniq(Invitations::TokenHash, 32))
                .col(uuid(Invitations::InvitedBy))
                .col(timestamp_with_time_zone(Invitations::CreatedAt))
                .col(timestamp_with_time_zone(Invitations::ExpiresAt))
                .col(timestamp_with_time_zone_null(Invitations::AcceptedAt))
                .col(timestamp_with_time_zone_null(Invitations::RevokedAt))
                .foreign_key(
                    ForeignKey::create()
                        .from(Invitations::Table, Invitations::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("invitations_org")
                .table(Invitations::Table)
                .col(Invitations::OrgId)
                .col(Invitations::Id)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(AuditEvents::Table)
                .col(uuid(AuditEvents::Id).primary_key())
                .col(uuid_null(AuditEvents::OrgId))
                .col(uuid_null(AuditEvents::ActorAccountId))
                .col(uuid_null(AuditEvents::ActorApiTokenId))
                .col(string(AuditEvents::Action))
                .col(string_null(AuditEvents::TargetKind))
                .col(string_null(AuditEvents::TargetId))
                .col(string_null(AuditEvents::Ip))
                .col(text_null(AuditEvents::Details))
                .col(timestamp_with_time_zone(AuditEvents::CreatedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("audit_events_org")
                .table(AuditEvents::Table)
                .col(AuditEvents::OrgId)
                .col(AuditEvents::Id)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(RateLimits::Table)
                .col(string(RateLimits::Key).primary_key())
                .col(big_integer(RateLimits::TatMs))
                .to_owned(),
        )
        .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            RateLimits::Table.into_iden(),
            AuditEvents::Table.into_iden(),
            Invitations::Table.into_iden(),
            ApiTokens::Table.into_iden(),
            Sessions::Table.into_iden(),
            EmailTokens::Table.into_iden(),
            Memberships::Table.into_iden(),
            Organizations::Table.into_iden(),
            Accounts::Table.into_iden(),
        ] {
            m.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}
