//! Single sign-on (decisions §15): each organization's OIDC connection (client secret sealed
//! under `SECRETS_KEY`, role mappings as JSON text; whether it is enforced stays
//! `organizations.sso_enforced`, which the organization's answer already shows), its domain
//! claims (verified by a DNS TXT
//! record; a verified domain belongs to one organization at most, kept by a unique nullable
//! column), and the sign-ins in flight (`state` hashed, nonce, sealed PKCE verifier), each used
//! once and for ten minutes.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum SsoConnections {
    Table,
    OrgId,
    Enabled,
    Issuer,
    ClientId,
    ClientSecret,
    GroupsClaim,
    RoleMappings,
    DefaultRole,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum SsoDomains {
    Table,
    OrgId,
    Domain,
    TxtValue,
    VerifiedAt,
    VerifiedDomain,
    CreatedAt,
}

#[derive(DeriveIden)]
enum SsoLogins {
    Table,
    Id,
    StateHash,
    OrgId,
    Email,
    Nonce,
    PkceVerifier,
    CreatedAt,
    ExpiresAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(SsoConnections::Table)
                .col(uuid(SsoConnections::OrgId).primary_key())
                .col(boolean(SsoConnections::Enabled))
                .col(text(SsoConnections::Issuer))
                .col(text(SsoConnections::ClientId))
                .col(text(SsoConnections::ClientSecret))
                .col(string(SsoConnections::GroupsClaim))
                .col(text(SsoConnections::RoleMappings))
                .col(string_null(SsoConnections::DefaultRole))
                .col(timestamp_with_time_zone(SsoConnections::CreatedAt))
                .col(timestamp_with_time_zone(SsoConnections::UpdatedAt))
                .foreign_key(
                    ForeignKey::create()
                        .from(SsoConnections::Table, SsoConnections::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(SsoDomains::Table)
                .col(uuid(SsoDomains::OrgId))
                .col(string(SsoDomains::Domain))
                .col(string(SsoDomains::TxtValue))
                .col(timestamp_with_time_zone_null(SsoDomains::VerifiedAt))
                .col(string_null(SsoDomains::VerifiedDomain))
                .col(timestamp_with_time_zone(SsoDomains::CreatedAt))
                .primary_key(
                    Index::create()
                        .col(SsoDomains::OrgId)
                        .col(SsoDomains::Domain),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(SsoDomains::Table, SsoDomains::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        // Set to the domain when verified, null before: many organizations may claim a
        // domain, only one may have it verified (both databases let NULLs repeat).
        m.create_index(
            Index::create()
                .name("sso_domains_verified_domain")
                .table(SsoDomains::Table)
                .col(SsoDomains::VerifiedDomain)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(SsoLogins::Table)
                .col(uuid(SsoLogins::Id).primary_key())
                .col(binary_len_uniq(SsoLogins::StateHash, 32))
                .col(uuid(SsoLogins::OrgId))
                .col(string(SsoLogins::Email))
                .col(string(SsoLogins::Nonce))
                .col(text(SsoLogins::PkceVerifier))
                .col(timestamp_with_time_zone(SsoLogins::CreatedAt))
                .col(timestamp_with_time_zone(SsoLogins::ExpiresAt))
                .foreign_key(
                    ForeignKey::create()
                        .from(SsoLogins::Table, SsoLogins::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("sso_logins_expires_at")
                .table(SsoLogins::Table)
                .col(SsoLogins::ExpiresAt)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            SsoLogins::Table.into_iden(),
            SsoDomains::Table.into_iden(),
            SsoConnections::Table.into_iden(),
        ] {
            m.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}
