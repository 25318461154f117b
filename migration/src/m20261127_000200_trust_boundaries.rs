//! Trust boundaries (issue 27, decisions §18):
//! - `sso_logins.browser_hash`: the hash of the `service_sso` cookie the browser that started a
//!   sign-in holds; the callback needs it.
//! - `scim_tokens.revoked_at`, `revoked_reason`: a SCIM token is revoked (not forgotten) when its
//!   issuer stops being an owner, so the owners can see why the provider was cut off.
//! - `invitations.revoked_reason`, `via_scim`: an invitation refused at accept because of its
//!   inviter is marked, and SCIM's invitations (for addresses outside the verified domains)
//!   take their role from the provider's groups at acceptance.
//! - `email_sends`: one row per emailed sign-in or sign-up link, keyed by kind and a hash of the
//!   address, for the limits of 1 a minute and 5 an hour.
//! - Changelog statuses are interface.md's names: `found` and `missing` (decisions §16).
//! - Postgres: `api_replicas.lease_until`, until when a replica may answer identity from memory
//!   without having heard more (`platform::identity_changes`).

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DatabaseBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum SsoLogins {
    Table,
    BrowserHash,
}

#[derive(DeriveIden)]
enum ScimTokens {
    Table,
    RevokedAt,
    RevokedReason,
}

#[derive(DeriveIden)]
enum Invitations {
    Table,
    RevokedReason,
    ViaScim,
}

#[derive(DeriveIden)]
enum EmailSends {
    Table,
    Id,
    Key,
    SentAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // SQLite alters one column per statement.
        m.alter_table(
            Table::alter()
                .table(SsoLogins::Table)
                .add_column(binary_null(SsoLogins::BrowserHash))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(ScimTokens::Table)
                .add_column(timestamp_with_time_zone_null(ScimTokens::RevokedAt))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(ScimTokens::Table)
                .add_column(text_null(ScimTokens::RevokedReason))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Invitations::Table)
                .add_column(text_null(Invitations::RevokedReason))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Invitations::Table)
                .add_column(boolean(Invitations::ViaScim).default(false))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(EmailSends::Table)
                .col(uuid(EmailSends::Id).primary_key())
                .col(text(EmailSends::Key))
                .col(timestamp_with_time_zone(EmailSends::SentAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("email_sends_key_sent_at")
                .table(EmailSends::Table)
                .col(EmailSends::Key)
                .col(EmailSends::SentAt)
                .to_owned(),
        )
        .await?;
        let db = m.get_connection();
        db.execute_unprepared("UPDATE changelogs SET status = 'found' WHERE status = 'available'")
            .await?;
        db.execute_unprepared(
            "UPDATE changelogs SET status = 'missing' WHERE status = 'unavailable'",
        )
        .await?;
        if m.get_database_backend() == DatabaseBackend::Postgres {
            db.execute_unprepared(
                "ALTER TABLE api_replicas ADD COLUMN lease_until timestamptz NOT NULL DEFAULT now()",
            )
            .await?;
        }
        Ok(())
    }
}
